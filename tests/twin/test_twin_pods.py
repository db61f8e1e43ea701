"""The twin's Pods are real: the example Deployment is scheduled by the real kube-scheduler onto GPU nodes, each Pod
runs as a real ``vllm serve`` that answers requests, Prometheus scrapes its real ``/metrics``, a changed layout
rolls out through the real Deployment and ReplicaSet controllers (new engines, with the new layout's KV blocks),
deleted Pods' servers stop, and a bad flag crash-loops with its restarts counted.

Every wait is for a condition (a Pod Ready, a Deployment rolled, a series scraped) and fails at once when the node
agent records an error; a run that hangs is stopped by pytest's own per-test timeout. Nothing asserts on time."""

from __future__ import annotations

import copy
import itertools
import json
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from kvcore.profiles.gpus import get_gpu
from kvcore.profiles.models import get_model
from kvcore.profiles.steptime import kv_tokens, layout

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

REPO = Path(__file__).resolve().parents[2]
_NAMESPACES = itertools.count()


def wait_for(twin: Any, what: str, check: Callable[[], Any]) -> Any:
    """Poll ``check`` until it returns something truthy (a failed HTTP read counts as not yet); fail as soon as the
    node agent has recorded an error."""
    while True:
        assert twin.agent.errors == [], f"the node agent failed while waiting for {what}: {twin.agent.errors}"
        try:
            value = check()
        except OSError:
            value = None
        if value:
            return value
        time.sleep(0.5)


def example_deployment(replicas: int, tp: int, args: list[str] | None = None) -> dict[str, Any]:
    """The first Deployment of examples/vllm-deployments.yaml with ``replicas`` and TP (and GPUs) set."""
    docs = [d for d in yaml.safe_load_all((REPO / "examples" / "vllm-deployments.yaml").read_text()) if d]
    dep = copy.deepcopy(next(d for d in docs if d["kind"] == "Deployment"))
    dep["spec"]["replicas"] = replicas
    container = dep["spec"]["template"]["spec"]["containers"][0]
    container["args"] = [a if not a.startswith("--tensor-parallel-size") else f"--tensor-parallel-size={tp}"
                         for a in container["args"]] + list(args or [])
    for key in ("requests", "limits"):
        container["resources"][key]["nvidia.com/gpu"] = str(tp)
    dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 10
    return dep  # type: ignore[no-any-return]


def kubectl_json(twin: Any, *args: str) -> Any:
    return json.loads(twin.cluster.kubectl(*args, "-o", "json").stdout)


def pods(twin: Any, namespace: str, instance: str) -> list[dict[str, Any]]:
    return kubectl_json(twin, "-n", namespace, "get", "pods", "-l",  # type: ignore[no-any-return]
                        f"app.kubernetes.io/instance={instance}")["items"]


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def prom_query(twin: Any, expr: str) -> list[dict[str, Any]]:
    url = f"{twin.prometheus.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url) as resp:
        return json.loads(resp.read())["data"]["result"]  # type: ignore[no-any-return]


def expected_blocks(tp: int, kv_scale: float) -> int:
    """The KV blocks kvcore's measured model gives the layout (A100-80GB, Llama 3 70B), times the twin's scale."""
    lay = layout(get_gpu("A100-80GB"), get_model("llama-70b"), tp, 1)
    return int(kv_tokens(lay) * kv_scale) // 16


@pytest.fixture
def namespace_in_twin(twin: Any) -> Any:
    name = f"twin-{next(_NAMESPACES)}"
    twin.cluster.kubectl("create", "namespace", name)
    twin.cluster.kubectl("-n", name, "create", "secret", "generic", "hf-token", "--from-literal=token=unused")
    wait_for(twin, "ServiceAccount default in the new namespace",
             lambda: twin.cluster.kubectl("-n", name, "get", "sa", "default", check=False).returncode == 0)
    yield name
    twin.cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_pods_serve_are_scraped_and_roll_to_a_new_layout(twin: Any, namespace_in_twin: str) -> None:
    ns, instance = namespace_in_twin, "llama70b-interactive"
    dep = example_deployment(replicas=1, tp=8)
    twin.cluster.kubectl("-n", ns, "apply", "-f", "-", input_text=json.dumps(dep))
    first = wait_for(twin, "the TP=8 Pod Ready", lambda: [p for p in pods(twin, ns, instance) if ready(p)])[0]
    assert first["spec"]["nodeName"] in twin.nodes
    node = kubectl_json(twin, "get", "node", first["spec"]["nodeName"])
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"

    # A request through the Pod's own IP and port, answered by vLLM (fabricated tokens, real scheduler/server).
    ip = first["status"]["podIP"]
    body = {"model": "llama-70b", "prompt": list(range(100, 164)), "max_tokens": 12, "min_tokens": 12,
            "ignore_eos": True}
    request = urllib.request.Request(f"http://{ip}:8000/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as resp:
        answer = json.loads(resp.read())
    assert answer["usage"]["completion_tokens"] == 12

    # Prometheus scraped vLLM's own series from the Pod, with the Pod's labels; the engine has the TP=8 blocks.
    pod1 = first["metadata"]["name"]
    generated = wait_for(twin, "vllm:generation_tokens_total scraped", lambda: [
        r for r in prom_query(twin, f'vllm:generation_tokens_total{{pod="{pod1}",namespace="{ns}"}}')
        if float(r["value"][1]) >= 12])
    assert generated[0]["metric"]["container"] == "vllm"
    info = wait_for(twin, "vllm:cache_config_info", lambda: prom_query(twin, f'vllm:cache_config_info{{pod="{pod1}"}}'))
    blocks_tp8 = int(info[0]["metric"]["num_gpu_blocks"])
    assert blocks_tp8 == expected_blocks(8, twin.config.kv_scale)

    # A new layout (TP=4, two replicas) rolls out: new ReplicaSet, new Pods, new engines; the old one stops.
    old_record = next(r.process.record for r in twin.agent.runs.values() if r.name == pod1)
    twin.cluster.kubectl("-n", ns, "apply", "-f", "-", input_text=json.dumps(example_deployment(replicas=2, tp=4)))

    def rolled() -> list[dict[str, Any]]:
        got = kubectl_json(twin, "-n", ns, "get", "deployment", dep["metadata"]["name"])
        status = got.get("status", {})
        done = (status.get("observedGeneration") == got["metadata"]["generation"]
                and status.get("updatedReplicas") == 2 and status.get("readyReplicas") == 2
                and status.get("replicas") == 2)
        current = pods(twin, ns, instance)
        return current if done and len(current) == 2 else []

    new = wait_for(twin, "the rollout to TP=4 x 2", rolled)
    assert pod1 not in {p["metadata"]["name"] for p in new}
    wait_for(twin, "the old Pod's server stopped", lambda: not old_record.alive())
    per_node: dict[str, int] = {}
    for pod in new:
        per_node[pod["spec"]["nodeName"]] = per_node.get(pod["spec"]["nodeName"], 0) + 4
    assert all(gpus <= 8 for gpus in per_node.values())
    for pod in new:
        name = pod["metadata"]["name"]
        info = wait_for(twin, f"cache_config_info of {name}", lambda: prom_query(twin, f'vllm:cache_config_info{{pod="{name}"}}'))
        assert int(info[0]["metric"]["num_gpu_blocks"]) == expected_blocks(4, twin.config.kv_scale) < blocks_tp8

    # Deleting the Deployment ends every server (the agent's final delete with grace 0, as the kubelet's).
    twin.cluster.kubectl("-n", ns, "delete", "deployment", dep["metadata"]["name"])
    wait_for(twin, "every Pod gone", lambda: not pods(twin, ns, instance))
    wait_for(twin, "no server left", lambda: not [r for r in twin.agent.runs.values() if r.namespace == ns])
    assert twin.agent.errors == []


def test_a_bad_flag_crash_loops_with_restarts_counted(twin: Any, namespace_in_twin: str) -> None:
    ns = namespace_in_twin
    dep = example_deployment(replicas=1, tp=8, args=["--max-num-seqs=banana"])
    twin.cluster.kubectl("-n", ns, "apply", "-f", "-", input_text=json.dumps(dep))

    def looping() -> dict[str, Any] | None:
        for pod in pods(twin, ns, "llama70b-interactive"):
            statuses = pod.get("status", {}).get("containerStatuses") or []
            if statuses and statuses[0]["restartCount"] >= 2 and \
                    (statuses[0]["state"].get("waiting") or {}).get("reason") == "CrashLoopBackOff":
                return pod
        return None

    pod = wait_for(twin, "restartCount >= 2 in CrashLoopBackOff", looping)
    status = pod["status"]["containerStatuses"][0]
    assert status["ready"] is False and not ready(pod)
    assert status["lastState"]["terminated"]["exitCode"] != 0
    twin.cluster.kubectl("-n", ns, "delete", "deployment", dep["metadata"]["name"])
    wait_for(twin, "the Pod gone", lambda: not pods(twin, ns, "llama70b-interactive"))
    assert twin.agent.errors == []
