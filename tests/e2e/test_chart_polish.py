"""Chart polish on the real local kube-apiserver with the project's helm.

- The Kubernetes definitions in ``values.schema.json`` are the ones this apiserver publishes (``/openapi/v2``,
  made strict by kvplan_dev/k8s_schema.py): regenerated here and compared.
- A real ``helm install`` with a typo in a Kubernetes-typed value, a wrong type, or an unknown key fails naming it.
- A ``helm install`` with a PodDisruptionBudget, extra volumes and mounts, ``imagePullSecrets`` in ``{name:}`` form,
  an image digest and JSON logs succeeds, and the apiserver holds what was asked for.
- The ``helm test`` hook Pod is accepted by the apiserver (server-side dry run; there is no kubelet here to run it),
  and its check, run as written, passes against a real operator metrics endpoint and fails against another server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvplan_dev.process import free_port

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "kvplan-operator"
NS = "kvplan-system"
DIGEST = "sha256:" + "ab" * 32


@pytest.fixture(scope="module")
def cluster(tools: Any) -> Iterator[Any]:
    from kvplan_dev.cluster import LocalCluster

    with LocalCluster(tools) as local:
        local.kubectl("create", "namespace", NS)
        yield local


def helm(tools: Any, cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(tools.helm), "--kubeconfig", str(cluster.kubeconfig), *args], capture_output=True,
                          text=True, timeout=300)


def test_kubernetes_definitions_match_the_apiserver(cluster: Any) -> None:
    from kvplan_dev import k8s_schema

    live = k8s_schema.definitions(json.loads(cluster.kubectl("get", "--raw", "/openapi/v2").stdout))
    shipped = json.loads((CHART / "values.schema.json").read_text())["definitions"]
    assert {k: v for k, v in shipped.items() if k.startswith("io.k8s.")} == live, "run `make chart-schema`"


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        pytest.param("resources.limitz.cpu=1", "at '/resources': additional properties 'limitz' not allowed",
                     id="resources-typo"),
        pytest.param("tolerations[0].efect=NoSchedule", "at '/tolerations/0': additional properties 'efect'",
                     id="toleration-typo"),
        pytest.param("replicaCount=abc", "at '/replicaCount': got string, want integer", id="wrong-type"),
        pytest.param("imagePullSecrets[0]=regcred", "at '/imagePullSecrets/0': got string, want object",
                     id="pull-secret-string"),
        pytest.param("metricz.port=1", "additional properties 'metricz' not allowed", id="unknown-key"),
    ],
)
def test_helm_install_refuses_naming_the_key(tools: Any, cluster: Any, setting: str, message: str) -> None:
    done = helm(tools, cluster, "install", "bad", str(CHART), "-n", NS, "--set", setting)
    assert done.returncode != 0 and message in done.stderr, done.stderr
    assert "bad" not in helm(tools, cluster, "list", "-n", NS, "-q").stdout.split()


def test_install_with_every_polish_option(tools: Any, cluster: Any) -> None:
    sets = ["podDisruptionBudget.enabled=true", "podDisruptionBudget.minAvailable=1",
            "imagePullSecrets[0].name=regcred", "extraVolumes[0].name=ca", "extraVolumes[0].configMap.name=ca-bundle",
            "extraVolumeMounts[0].name=ca", "extraVolumeMounts[0].mountPath=/etc/ca",
            "extraVolumeMounts[0].readOnly=true", f"image.digest={DIGEST}", "logFormat=json", "crds.install=true"]
    argv = ["install", "polish", str(CHART), "-n", NS]
    for item in sets:
        argv += ["--set", item]
    done = helm(tools, cluster, *argv)
    assert done.returncode == 0, done.stderr
    pdb = json.loads(cluster.kubectl("-n", NS, "get", "pdb", "polish-kvplan-operator", "-o", "json").stdout)
    assert pdb["spec"]["minAvailable"] == 1 and "maxUnavailable" not in pdb["spec"]
    dep = json.loads(cluster.kubectl("-n", NS, "get", "deployment", "polish-kvplan-operator", "-o", "json").stdout)
    pod = dep["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert {"name": "ca", "configMap": {"name": "ca-bundle", "defaultMode": 420}} in pod["volumes"]
    assert {"name": "ca", "mountPath": "/etc/ca", "readOnly": True} in container["volumeMounts"]
    assert container["image"].endswith(f":0.1.0@{DIGEST}")
    assert "--log-format=json" in container["args"]


def test_helm_test_hook_pod_is_accepted(tools: Any, cluster: Any) -> None:
    rendered = subprocess.run([str(tools.helm), "template", "polish", str(CHART), "-n", NS,
                               "-s", "templates/tests/test-metrics.yaml"], capture_output=True, text=True, timeout=120)
    assert rendered.returncode == 0, rendered.stderr
    pod = yaml.safe_load(rendered.stdout)
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    done = cluster.kubectl("-n", NS, "apply", "--dry-run=server", "-f", "-", input_text=rendered.stdout)
    assert "created (server dry run)" in done.stdout


class _Other(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = b"not the operator\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return


def test_helm_test_check_passes_on_the_operator_and_fails_elsewhere(tools: Any) -> None:
    from kvplan_operator.record.metrics import Metrics

    rendered = subprocess.run([str(tools.helm), "template", "polish", str(CHART), "-n", NS,
                               "-s", "templates/tests/test-metrics.yaml"], capture_output=True, text=True, timeout=120)
    container = yaml.safe_load(rendered.stdout)["spec"]["containers"][0]
    assert container["command"][:2] == ["/usr/bin/python3.11", "-c"]
    assert container["args"] == ["http://polish-kvplan-operator-metrics.kvplan-system.svc:8080/metrics"]
    script = container["command"][2]
    port = free_port()
    Metrics().serve(port, addr="127.0.0.1")
    ok = subprocess.run([sys.executable, "-c", script, f"http://127.0.0.1:{port}/metrics"], capture_output=True,
                        text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.startswith("OK"), ok.stdout + ok.stderr
    other = HTTPServer(("127.0.0.1", 0), _Other)
    thread = threading.Thread(target=other.serve_forever, daemon=True)
    thread.start()
    try:
        bad = subprocess.run([sys.executable, "-c", script, f"http://127.0.0.1:{other.server_port}/metrics"],
                             capture_output=True, text=True, timeout=60)
    finally:
        other.shutdown()
    assert bad.returncode == 1 and "no kvplan_build_info" in bad.stderr
