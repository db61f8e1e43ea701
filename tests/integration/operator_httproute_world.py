"""The shared world of ``test_operator_httproute.py`` and the tests that reuse it: the operator's HTTPRoute and InferencePool targets on the real local apiserver, with the UPSTREAM CRDs -- Gateway."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
import pytest
from kvplan_operator import conditions as C
from kvplan_operator.kube import Kube
from operator_world import apply_crds, backfill, cond, detail, fetch, kvplan_spec, run, setup


REPO = Path(__file__).resolve().parents[2]


GW = ("gateway.networking.k8s.io", "v1")


POOLS = ("inference.networking.k8s.io", "v1")


ROUTE = "llm"


HEADER = "x-gateway-inference-objective"


SERVICES = ("vllm-a", "vllm-b")  # groups pool-a/pool-b set no `service`: the Deployment name is the Service


@pytest.fixture(scope="session")
def control_plane_tools():
    """kube-apiserver, etcd, kubectl, Prometheus (helm is not needed here, as in test_operator_reconcile.py)."""
    from kvplan_dev.tools import PROMETHEUS, PROMTOOL, Tools, apiserver_path, etcd_path, helm_path, kubectl_path

    tools = Tools(apiserver_path(), etcd_path(), kubectl_path(), helm_path(), PROMETHEUS, PROMTOOL)
    missing = [k for k, v in tools.as_dict().items() if k != "helm" and not Path(v).exists()]
    if missing:
        pytest.fail(f"missing binaries {missing}: run `make tools`")
    return tools


def install_upstream_crds(cluster, fetch: Callable[[], dict[str, Path]], established: list[str],
                          what: str) -> dict[str, Path]:
    """The KVPlan CRD and the upstream CRDs ``fetch`` downloads (``what`` names them in a failure), applied
    server-side until ``established`` are Established; the files, by name. They stay installed for the rest of
    the session."""
    from kvplan_dev.demo import wait_established
    from kvplan_dev.gobuild import BuildError

    try:
        files = fetch()
    except BuildError as exc:
        pytest.fail(f"upstream {what} CRDs could not be fetched: {exc}")
    apply_crds(cluster, REPO / "crds" / "kvplans.kvplan.io.yaml")
    for path in files.values():
        cluster.kubectl("apply", "--server-side", "-f", str(path))
    try:
        wait_established(cluster, established)
    except RuntimeError as exc:
        pytest.fail(str(exc))
    return files


@pytest.fixture(scope="module")
def crds(cluster):
    """The KVPlan CRD and the upstream HTTPRoute and InferencePool CRDs, Established (an absent route still reads
    as 404, as without the CRD)."""
    from kvplan_dev.gomodules import upstream_crds

    return install_upstream_crds(cluster, upstream_crds, ["httproutes.gateway.networking.k8s.io",
                                                          "inferencepools.inference.networking.k8s.io"],
                                 "Gateway API / Inference Extension")


def route_body(namespace: str) -> dict:
    def svc(name: str, weight: int | None = None) -> dict:
        return {"name": name, "port": 8000} | ({} if weight is None else {"weight": weight})

    return {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": ROUTE, "labels": {"team": "inference"}, "annotations": {"example.com/owner": "platform"}},
        "spec": {
            "parentRefs": [{"name": "inference-gw", "sectionName": "http"}],
            "hostnames": ["llm.example.com"],
            "rules": [
                # chat: weight left out on one ref (the apiserver defaults it to 1); plus the same Service name in
                # another namespace, which is not this group's Service.
                {"matches": [{"headers": [{"name": HEADER, "value": "chat"}]}],
                 "backendRefs": [svc("vllm-a", 1), svc("vllm-b"),
                                 {"name": "vllm-a", "namespace": f"{namespace}-shadow", "port": 8000, "weight": 9}]},
                # code: header name in another case (header names are case-insensitive), a path, a timeout; plus a
                # non-Service backend (Gateway API Inference Extension InferencePool) named like group pool-b.
                {"matches": [{"path": {"type": "PathPrefix", "value": "/v1"},
                              "headers": [{"name": "X-Gateway-Inference-Objective", "type": "Exact", "value": "code"}]}],
                 "timeouts": {"request": "120s"},
                 "backendRefs": [svc("vllm-a", 500), svc("vllm-b", 500),
                                 {"group": "inference.networking.x-k8s.io", "kind": "InferencePool", "name": "vllm-b",
                                  "weight": 0}]},
                # everything else: the fleet mix; plus a canary Service kvplan knows nothing about, and a filter.
                {"filters": [{"type": "RequestHeaderModifier",
                              "requestHeaderModifier": {"add": [{"name": "x-gateway", "value": "kvplan-test"}]}}],
                 "backendRefs": [svc("vllm-a"), svc("vllm-b"), svc("vllm-canary", 5)]},
            ],
        },
    }


def create_services_and_route(kube_api, namespace: str) -> dict:
    from kubernetes import client

    core = client.CoreV1Api(kube_api)
    for name in (*SERVICES, "vllm-canary"):
        core.create_namespaced_service(namespace, {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 8000, "targetPort": 8000}]}})
    return client.CustomObjectsApi(kube_api).create_namespaced_custom_object(*GW, namespace, "httproutes",
                                                                             route_body(namespace))


def get_route(kube: Kube, namespace: str) -> dict:
    route = kube.get_httproute(namespace, ROUTE)
    assert route is not None
    return route


def owned(ref: dict, namespace: str) -> bool:
    """A backendRef naming a group's Service in the route's namespace (what docs/operator.md says kvplan owns)."""
    return (ref.get("group", "") == "" and ref.get("kind", "Service") == "Service"
            and ref.get("namespace", namespace) == namespace and ref["name"] in SERVICES)


def without_owned_weights(route: dict, namespace: str) -> dict:
    """The route with the weights kvplan owns removed and kvplan's own annotation dropped: everything else must
    be exactly as the user wrote it (after apiserver defaulting)."""
    out = copy.deepcopy({"metadata": {k: route["metadata"].get(k) for k in ("labels", "annotations")},
                         "spec": route["spec"]})
    out["metadata"]["annotations"] = {k: v for k, v in (out["metadata"]["annotations"] or {}).items()
                                      if not k.startswith("kvplan.io/")}
    for rule in out["spec"]["rules"]:
        for ref in rule.get("backendRefs") or []:
            if owned(ref, namespace):
                ref.pop("weight")
    return out


def largest_remainder(shares: dict[str, float], total: int = 1000) -> dict[str, int]:
    """Integers proportional to ``shares`` summing exactly to ``total`` (all 0 when every share is 0)."""
    s = sum(shares.values())
    if s <= 0:
        return {k: 0 for k in shares}
    exact = {k: v * total / s for k, v in shares.items()}
    out = {k: int(exact[k] // 1) for k in shares}
    for k in sorted(shares, key=lambda k: (out[k] - exact[k], k))[:total - sum(out.values())]:
        out[k] += 1
    return out


def expected_weights(kube: Kube, namespace: str) -> dict[str, dict[str, int]]:
    """Per class and for the fleet mix: Service -> integer weight, from the router ConfigMap (class weights,
    admission, group -> Service) and status (arrival rates), per the mapping in docs/operator.md."""
    doc = json.loads(kube.get_configmap(namespace, "llm-router")["data"]["routing.json"])
    rates = {c: v["arrivalRate"] for c, v in detail(kube, namespace)["classes"].items()}
    service = {g: v["service"] for g, v in doc["groups"].items()}
    assert sorted(service.values()) == list(SERVICES)
    # weights list only the groups with a non-zero weight (docs/operator.md, "Router ConfigMap format")
    out = {c: largest_remainder({service[g]: v["weights"].get(g, 0) for g in doc["groups"]})
           for c, v in doc["classes"].items()}
    fleet = {service[g]: sum(rates[c] * v["admit"] * v["weights"].get(g, 0) for c, v in doc["classes"].items())
             for g in doc["groups"]}
    out["_fleet"] = largest_remainder(fleet)
    for w in out.values():
        assert sum(w.values()) in (0, 1000), w
    return out


def route_weights(route: dict, namespace: str) -> list[dict[str, int]]:
    return [{ref["name"]: ref["weight"] for ref in rule["backendRefs"] if owned(ref, namespace)}
            for rule in route["spec"]["rules"]]


def pool(name: str, app: str) -> dict:
    return {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": app}}, "targetPorts": [{"number": 8000}],
                     "endpointPickerRef": {"name": f"{name}-epp", "port": {"number": 9002}}}}
