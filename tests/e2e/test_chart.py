"""The Helm chart against the project's real helm and a real local kube-apiserver + etcd.

Covers: ``helm lint --strict`` is clean and ``make lint-chart`` works; ``values.schema.json`` refuses typos and
out-of-range values; ``helm template`` renders for the default
values and for every optional feature, with the restricted securityContext and the least-privilege RBAC the
values promise (table-driven); the rendered manifests, CRDs included, are accepted by the real apiserver (first a
server-side dry-run, then for real); a real ``helm install`` / ``helm uninstall`` with its NOTES; the examples
validate against the installed CRD; and, authenticated as the
chart's ServiceAccount with a TokenRequest token, what the operator needs is allowed and what it must not do
(delete a Deployment, read a Secret, touch an unwatched namespace, create Deployments) is really refused by the
apiserver. The operator reconciling a KVPlan under that same token is ``tests/e2e/test_demo.py``.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "kvplan-operator"
RELEASE = "kvplan-operator"
RELEASE_NS = "kvplan-system"
WATCHED = "serving"
UNWATCHED = "elsewhere"


def helm(tools: Any, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(tools.helm), *args], capture_output=True, text=True, timeout=120)
    if check:
        assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def render(tools: Any, *sets: str) -> list[dict[str, Any]]:
    argv = ["template", RELEASE, str(CHART), "--namespace", RELEASE_NS]
    for item in sets:
        argv += ["--set", item]
    return [d for d in yaml.safe_load_all(helm(tools, *argv).stdout) if isinstance(d, dict)]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def rules_of(docs: list[dict[str, Any]]) -> dict[tuple[str, str, str], set[str]]:
    """(role kind + namespace, apiGroup, resource) -> verbs, over every Role and ClusterRole."""
    out: dict[tuple[str, str, str], set[str]] = {}
    for doc in docs:
        if doc["kind"] not in ("Role", "ClusterRole"):
            continue
        scope = doc["kind"] + ":" + doc["metadata"].get("namespace", "")
        for rule in doc.get("rules") or []:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    out.setdefault((scope, group, resource), set()).update(rule["verbs"])
    return out


# --- lint and render -----------------------------------------------------------------------------------------------
def test_helm_lint_strict_is_clean(tools: Any) -> None:
    done = helm(tools, "lint", "--strict", str(CHART))
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout, done.stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


def test_make_lint_chart(tools: Any) -> None:
    done = subprocess.run(["make", "lint-chart"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize(
    ("sets", "kinds"),
    [
        pytest.param((), {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service",
                          "ClusterKopfPeering", "CustomResourceDefinition", "Pod"}, id="defaults-all-namespaces"),
        pytest.param((f"watchNamespaces={{{WATCHED},{UNWATCHED}}}",),
                     {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment",
                      "Service", "KopfPeering", "CustomResourceDefinition", "Pod"}, id="watched-namespaces"),
        pytest.param(("serviceMonitor.enabled=true", "replicaCount=2", "httpRoute.enabled=true",
                      "prometheus.authSecrets={prom-token}",
                      "prometheus.allowedHosts={prometheus.monitoring.svc,*.obs.svc:9090}",
                      "prometheus.tokenFiles={/var/run/secrets/prom/token}"),
                     {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service",
                      "ServiceMonitor", "ClusterKopfPeering", "CustomResourceDefinition", "Pod"}, id="every-option"),
        pytest.param(("metrics.enabled=false", "peering.enabled=false", "crds.install=false"),
                     {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment"},
                     id="no-metrics-standalone-no-crds"),
    ],
)
def test_template_renders(tools: Any, sets: tuple[str, ...], kinds: set[str]) -> None:
    docs = render(tools, *sets)
    assert {d["kind"] for d in docs} == kinds
    hooks = [d for d in docs if (d["metadata"].get("annotations") or {}).get("helm.sh/hook")]
    assert [d["kind"] for d in hooks] == (["Pod"] if "Pod" in kinds else []), "the helm test Pod is the only hook"
    (deployment,) = by_kind(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert any(a.startswith("--liveness=http://0.0.0.0:") for a in container["args"])
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert {"KVPLAN_TIMER_TICK_S", "KVPLAN_BACKOFF_BASE_S"} <= set(env)
    metrics = [a for a in container["args"] if a.startswith("--metrics-port=")]
    assert metrics == (["--metrics-port=0"] if "metrics.enabled=false" in sets else ["--metrics-port=8080"])
    allowed = [a for a in container["args"] if a.startswith("--prometheus-allowed-hosts")]
    assert allowed == (["--prometheus-allowed-hosts=prometheus.monitoring.svc,*.obs.svc:9090"]
                       if any(x.startswith("prometheus.allowedHosts") for x in sets) else [])
    files = [a for a in container["args"] if a.startswith("--prometheus-token-files")]
    assert files == (["--prometheus-token-files=/var/run/secrets/prom/token"]
                     if any(x.startswith("prometheus.tokenFiles") for x in sets) else [])
    liveness_port = int(container["args"][[a.startswith("--liveness") for a in container["args"]].index(True)]
                        .rsplit(":", 1)[1].split("/")[0])
    assert liveness_port != 8080, "liveness and metrics would share a port"


@pytest.mark.parametrize(
    ("sets", "present", "absent"),
    [
        pytest.param((), {("ClusterRole:", "apps", "deployments"): {"get", "patch"},
                          ("ClusterRole:", "kvplan.io", "kvplans"): {"get", "list", "watch", "patch"},
                          ("ClusterRole:", "kvplan.io", "kvplans/status"): {"get", "patch"},
                          ("ClusterRole:", "", "configmaps"): {"get", "create", "patch"},
                          ("ClusterRole:", "apiextensions.k8s.io", "customresourcedefinitions"):
                              {"get", "list", "watch"}},
                     {("ClusterRole:", "", "secrets"), ("ClusterRole:", "gateway.networking.k8s.io", "httproutes"),
                      ("ClusterRole:", "inference.networking.k8s.io", "inferencepools"),
                      ("ClusterRole:", "kopf.dev", "kopfpeerings"),
                      ("ClusterRole:", "serving.kserve.io", "llminferenceservices")}, id="defaults"),
        pytest.param((f"watchNamespaces={{{WATCHED}}}",),
                     {(f"Role:{WATCHED}", "apps", "deployments"): {"get", "patch"},
                      ("ClusterRole:", "", "namespaces"): {"get", "list", "watch"}},
                     {("ClusterRole:", "apps", "deployments"), ("ClusterRole:", "", "configmaps")},
                     id="namespaced-no-cluster-wide-writes"),
        pytest.param(("peering.enabled=false",), {("ClusterRole:", "apps", "deployments"): {"get", "patch"}},
                     {("ClusterRole:", "kopf.dev", "clusterkopfpeerings"),
                      ("ClusterRole:", "kopf.dev", "kopfpeerings")},
                     id="standalone-no-peering-rules"),
        pytest.param(("httpRoute.enabled=true",),
                     {("ClusterRole:", "gateway.networking.k8s.io", "httproutes"): {"get", "patch"},
                      ("ClusterRole:", "inference.networking.k8s.io", "inferencepools"): {"get"},
                      ("ClusterRole:", "kopf.dev", "clusterkopfpeerings"): {"get", "list", "watch", "patch"}},
                     set(), id="httproutes-and-peering"),
        pytest.param(("kserve.enabled=true",),
                     {("ClusterRole:", "serving.kserve.io", "llminferenceservices"): {"get", "patch"}},
                     {("ClusterRole:", "serving.kserve.io", "llminferenceservices/status")}, id="kserve"),
        pytest.param(("leaderWorkerSet.enabled=true",),
                     {("ClusterRole:", "leaderworkerset.x-k8s.io", "leaderworkersets"): {"get", "patch"}},
                     {("ClusterRole:", "serving.kserve.io", "llminferenceservices")}, id="leaderworkerset"),
    ],
)
def test_rbac_is_least_privilege(tools: Any, sets: tuple[str, ...], present: dict[tuple[str, str, str], set[str]],
                                 absent: set[tuple[str, str, str]]) -> None:
    rules = rules_of(render(tools, *sets))
    for key, verbs in present.items():
        assert rules.get(key) == verbs, key
    for key in absent:
        assert key not in rules, key
    every_verb = set().union(*rules.values())
    assert not every_verb & {"delete", "deletecollection", "*", "escalate", "bind", "impersonate"}
    puts = sorted(key for key, verbs in rules.items() if "update" in verbs and key[2] != "kvplans/finalizers")
    assert puts == [], "the operator and kopf only PATCH"


def test_secret_access_is_by_name_only(tools: Any) -> None:
    docs = render(tools, f"watchNamespaces={{{WATCHED}}}", "prometheus.authSecrets={prom-token}")
    (role,) = by_kind(docs, "Role")
    secret_rules = [r for r in role["rules"] if "secrets" in r["resources"]]
    assert secret_rules == [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["prom-token"],
                             "verbs": ["get"]}]


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        pytest.param("imag.tag=1", "additional properties 'imag' not allowed", id="typo-in-key"),
        pytest.param("logLevel=warning", "/logLevel", id="log-level-enum"),
        pytest.param("metrics.port=0", "/metrics/port", id="port-range"),
        pytest.param("watchNamespaces={Not_A_Namespace}", "/watchNamespaces/0", id="namespace-name"),
        pytest.param("prometheus.allowedHosts={a b}", "/prometheus/allowedHosts/0", id="allowed-host-pattern"),
    ],
)
def test_values_schema_refuses(tools: Any, setting: str, message: str) -> None:
    done = helm(tools, "template", RELEASE, str(CHART), "--set", setting, check=False)
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_two_replicas_without_peering_is_refused(tools: Any) -> None:
    done = helm(tools, "template", RELEASE, str(CHART), "--set", "replicaCount=2", "--set", "peering.enabled=false",
                check=False)
    assert done.returncode != 0
    assert "peering.enabled" in done.stderr


# --- on the real apiserver -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster(tools: Any) -> Iterator[Any]:
    from kvplan_dev.cluster import LocalCluster

    with LocalCluster(tools) as local:
        for namespace in (RELEASE_NS, WATCHED, UNWATCHED):
            local.kubectl("create", "namespace", namespace)
        yield local


@pytest.fixture(scope="module")
def installed(tools: Any, cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart rendered with its CRDs (watching WATCHED only), dry-run on the server, then applied for real."""
    folder = tmp_path_factory.mktemp("chart")
    rendered = helm(tools, "template", RELEASE, str(CHART), "--namespace", RELEASE_NS, "--include-crds",
                    "--set", f"watchNamespaces={{{WATCHED}}}").stdout
    docs = [d for d in yaml.safe_load_all(rendered) if isinstance(d, dict)
            and not (d["metadata"].get("annotations") or {}).get("helm.sh/hook")]  # helm install creates no test hooks
    crds = folder / "crds.yaml"
    crds.write_text(yaml.safe_dump_all(by_kind(docs, "CustomResourceDefinition")))
    rest = folder / "rest.yaml"
    rest.write_text(yaml.safe_dump_all([d for d in docs if d["kind"] != "CustomResourceDefinition"]))
    cluster.kubectl("apply", "--server-side", "--dry-run=server", "-f", str(crds))
    cluster.kubectl("apply", "--server-side", "-f", str(crds))
    from kvplan_dev.demo import wait_established

    wait_established(cluster, ("kvplans.kvplan.io", "kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"))
    cluster.kubectl("apply", "--server-side", "--dry-run=server", "-f", str(rest))
    cluster.kubectl("apply", "--server-side", "-f", str(rest))
    return folder


def test_rendered_objects_exist_on_the_apiserver(cluster: Any, installed: Path) -> None:
    names = {
        ("deployment", RELEASE_NS), ("serviceaccount", RELEASE_NS), ("service", RELEASE_NS),
        ("role", WATCHED), ("rolebinding", WATCHED), ("kopfpeering.kopf.dev", WATCHED),
    }
    for kind, namespace in names:
        cluster.kubectl("-n", namespace, "get", kind, RELEASE + ("-metrics" if kind == "service" else ""))
    deployment = json.loads(cluster.kubectl("-n", RELEASE_NS, "get", "deployment", RELEASE, "-o", "json").stdout)
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--namespace={WATCHED}" in args and f"--peering={RELEASE}" in args and "--standalone" not in args
    cluster.kubectl("get", "clusterrole", RELEASE)
    cluster.kubectl("get", "crd", "kvplans.kvplan.io", "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev")


def test_examples_validate_against_the_installed_crd(cluster: Any, installed: Path) -> None:
    for example in ("vllm-deployments.yaml", "kvplan-70b.yaml"):
        done = cluster.kubectl("-n", WATCHED, "apply", "--server-side", "--dry-run=server",
                               "-f", str(REPO / "examples" / example))
        assert "serverside-applied (server dry run)" in done.stdout, done.stdout


@pytest.fixture(scope="module")
def as_operator(cluster: Any, installed: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kubeconfig carrying a TokenRequest token of the chart's ServiceAccount."""
    path = tmp_path_factory.mktemp("sa") / "kubeconfig"
    return Path(cluster.service_account_kubeconfig(RELEASE_NS, RELEASE, path=path))


@pytest.mark.parametrize(
    ("verb", "resource", "namespace", "allowed"),
    [
        pytest.param("patch", "deployments.apps", WATCHED, True, id="patch-deployments"),
        pytest.param("watch", "kvplans.kvplan.io", WATCHED, True, id="watch-kvplans"),
        pytest.param("patch", "kvplans.kvplan.io --subresource=status", WATCHED, True, id="patch-kvplan-status"),
        pytest.param("create", "configmaps", WATCHED, True, id="create-configmaps"),
        pytest.param("create", "events", WATCHED, True, id="create-events"),
        pytest.param("list", "horizontalpodautoscalers.autoscaling", WATCHED, True, id="list-hpas"),
        pytest.param("get", "kvplans.kvplan.io", WATCHED, True, id="get-kvplans"),
        pytest.param("patch", "kopfpeerings.kopf.dev", WATCHED, True, id="patch-kopfpeering"),
        pytest.param("create", "kopfpeerings.kopf.dev", WATCHED, False, id="no-create-kopfpeering"),
        pytest.param("watch", "deployments.apps", WATCHED, False, id="no-watch-deployments"),
        pytest.param("list", "customresourcedefinitions.apiextensions.k8s.io", "", True, id="list-crds"),
        pytest.param("delete", "deployments.apps", WATCHED, False, id="no-delete-deployments"),
        pytest.param("create", "deployments.apps", WATCHED, False, id="no-create-deployments"),
        pytest.param("get", "secrets", WATCHED, False, id="no-secrets"),
        pytest.param("delete", "configmaps", WATCHED, False, id="no-delete-configmaps"),
        pytest.param("patch", "deployments.apps", UNWATCHED, False, id="no-unwatched-namespace"),
        pytest.param("list", "pods", WATCHED, False, id="no-pods"),
        pytest.param("patch", "httproutes.gateway.networking.k8s.io", WATCHED, False, id="no-httproutes-by-default"),
    ],
)
def test_can_i(cluster: Any, as_operator: Path, verb: str, resource: str, namespace: str, allowed: bool) -> None:
    args = ["auth", "can-i", verb, *resource.split()] + (["-n", namespace] if namespace else [])
    done = cluster.kubectl(*args, kubeconfig=as_operator, check=False)
    assert done.stdout.strip() == ("yes" if allowed else "no"), done.stdout + done.stderr


def test_scaledobjects_without_keda_are_404_not_403(cluster: Any, as_operator: Path) -> None:
    """KEDA is not installed: the operator's list must reach the apiserver's 404 (which it reads as "no KEDA"),
    not stop at a 403 (which it treats as an error)."""
    path = f"/apis/keda.sh/v1alpha1/namespaces/{WATCHED}/scaledobjects"
    done = cluster.kubectl("get", "--raw", path, kubeconfig=as_operator, check=False)
    assert done.returncode != 0
    assert "NotFound" in done.stderr or "404" in done.stderr or "not found" in done.stderr, done.stderr
    assert "Forbidden" not in done.stderr and "forbidden" not in done.stderr, done.stderr
    denied = cluster.kubectl("get", "--raw", f"/apis/keda.sh/v1alpha1/namespaces/{UNWATCHED}/scaledobjects",
                             kubeconfig=as_operator, check=False)
    assert "forbidden" in denied.stderr.lower(), denied.stderr


def test_forbidden_verbs_are_refused_for_real(cluster: Any, as_operator: Path) -> None:
    """Not just `can-i`: the real requests, as the operator's ServiceAccount, get 403 Forbidden."""
    cluster.kubectl("-n", WATCHED, "apply", "-f", str(REPO / "examples" / "vllm-deployments.yaml"))
    cluster.kubectl("-n", WATCHED, "create", "secret", "generic", "hf-token", "--from-literal=token=not-a-token")
    attempts = [
        ("-n", WATCHED, "delete", "deployment", "vllm-llama70b-batch"),
        ("-n", WATCHED, "get", "secret", "hf-token"),
        ("-n", UNWATCHED, "get", "deployments"),
        ("-n", WATCHED, "scale", "deployment", "vllm-llama70b-batch", "--replicas=0"),
    ]
    for argv in attempts:
        done = cluster.kubectl(*argv, kubeconfig=as_operator, check=False)
        assert done.returncode != 0 and "Forbidden" in done.stderr, (argv, done.stdout, done.stderr)
    # The Deployment survived, and what the operator is meant to do works under the same token.
    patch = json.dumps({"metadata": {"annotations": {"kvplan.io/test": "ok"}}})
    cluster.kubectl("-n", WATCHED, "patch", "deployment", "vllm-llama70b-batch", "--type=merge", "-p", patch,
                    kubeconfig=as_operator)
    body = json.loads(cluster.kubectl("-n", WATCHED, "get", "deployment", "vllm-llama70b-batch", "-o", "json").stdout)
    assert body["metadata"]["annotations"]["kvplan.io/test"] == "ok"


def test_helm_install_and_uninstall_for_real(tools: Any, cluster: Any, installed: Path) -> None:
    """A real ``helm install`` against the local apiserver (CRDs already present, as on an upgrade path), its NOTES,
    and a clean ``helm uninstall``."""
    namespace = "helm-watched"
    cluster.kubectl("create", "namespace", namespace)
    env = ["--kubeconfig", str(cluster.kubeconfig)]
    release = "kvp2"
    done = helm(tools, "install", release, str(CHART), "--namespace", RELEASE_NS, "--wait=false",
                "--set", f"watchNamespaces={{{namespace}}}", "--set", "crds.install=false", *env)
    assert "STATUS: deployed" in done.stdout
    assert f"namespaces: {namespace}" in done.stdout and "kubectl get kvp -w" in done.stdout  # NOTES.txt
    name = f"{release}-kvplan-operator"
    cluster.kubectl("-n", RELEASE_NS, "get", "deployment", name)
    cluster.kubectl("-n", namespace, "get", "rolebinding", name)
    cluster.kubectl("-n", namespace, "get", "kopfpeering.kopf.dev", "kvplan-operator")
    helm(tools, "uninstall", release, "--namespace", RELEASE_NS, *env)
    gone = cluster.kubectl("-n", RELEASE_NS, "get", "deployment", name, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
