"""The operator's HTTPRoute and InferencePool targets on the real local apiserver, with the UPSTREAM CRDs -- Gateway
API's HTTPRoute (standard channel) from the Go module sigs.k8s.io/gateway-api v1.6.3 and the Inference Extension's
InferencePool (inference.networking.k8s.io/v1) from sigs.k8s.io/gateway-api-inference-extension v1.6.0, fetched
with ``go mod download`` at test setup (kvplan_dev/gomodules.py) -- and a real backfilled Prometheus; the
reconcile is called directly, as in test_operator_reconcile.py:

- a KVPlan with ``router.httpRoute`` -> the backendRef weights of the groups' Services are the integers out of 1000
  that docs/operator.md maps the plan's routing to (per-class header rules: the class's weights; other rules: the
  fleet mix), computed here independently from the router ConfigMap and status;
- backendRefs kvplan does not own (another Service, the same name in another namespace, a non-Service kind with a
  group's name) and every other route field (matches, filters, timeouts, parentRefs, hostnames, metadata) survive;
- a second reconcile writes nothing (resourceVersion unchanged); DryRun leaves a route that differs from the plan
  untouched, and switching back to Apply restores the planned weights;
- backendRefs of kind InferencePool (one pool per group) get their group's weights; a pool whose selector stops
  matching its group's pods is refused (``RouterTargetInvalid``) with nothing written.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from kvplan_operator import conditions as C
from kvplan_operator.kube import Kube
from operator_world import apply_crds, backfill, cond, detail, fetch, kvplan_spec, run, setup

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
GW = ("gateway.networking.k8s.io", "v1")
POOLS = ("inference.networking.k8s.io", "v1")
ROUTE = "llm"
HEADER = "x-kvplan-class"
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


@pytest.fixture(scope="module")
def crds(cluster):
    """The KVPlan CRD and the upstream HTTPRoute and InferencePool CRDs, Established. They stay installed for the
    rest of the session (an absent route still reads as 404, as without the CRD)."""
    from kvplan_dev.demo import wait_established
    from kvplan_dev.gobuild import BuildError
    from kvplan_dev.gomodules import upstream_crds

    try:
        files = upstream_crds()
    except BuildError as exc:
        pytest.fail(f"upstream Gateway API / Inference Extension CRDs could not be fetched: {exc}")
    apply_crds(cluster, REPO / "crds" / "kvplans.kvplan.io.yaml")
    for path in files.values():
        cluster.kubectl("apply", "--server-side", "-f", str(path))
    try:
        wait_established(cluster, ["httproutes.gateway.networking.k8s.io", "inferencepools.inference.networking.k8s.io"])
    except RuntimeError as exc:
        pytest.fail(str(exc))
    return files


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
                              "headers": [{"name": "X-KVPlan-Class", "type": "Exact", "value": "code"}]}],
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


def test_httproute_weights_on_real_apiserver(crds, kube_api, kube, namespace, prometheus, traces_dir):
    from kubernetes import client

    backfill(prometheus, traces_dir)
    created = create_services_and_route(kube_api, namespace)
    # the apiserver defaulted the upstream CRD's fields
    chat_refs = created["spec"]["rules"][0]["backendRefs"]
    assert chat_refs[1] == {"group": "", "kind": "Service", "name": "vllm-b", "port": 8000, "weight": 1}
    assert created["spec"]["rules"][2]["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
    assert created["spec"]["parentRefs"][0]["kind"] == "Gateway"
    user_view = without_owned_weights(created, namespace)

    spec = kvplan_spec(prometheus.url)
    spec["router"]["httpRoute"] = {"name": ROUTE}
    setup(kube_api, namespace, spec)
    out = run(kube, namespace)
    assert out.ok, out
    assert f"HTTPRoute/{ROUTE}" in out.changed, out.changed
    body = fetch(kube, namespace)
    assert cond(body, C.READY)["status"] == "True", body["status"]

    route = get_route(kube, namespace)
    want = expected_weights(kube, namespace)
    assert route_weights(route, namespace) == [want["chat"], want["code"], want["_fleet"]], (route["spec"], want)
    assert all(sum(w.values()) == 1000 for w in route_weights(route, namespace))  # out of 1000, not the 1s created
    # everything kvplan does not own is exactly as created: other backendRefs (canary Service, same name in another
    # namespace, InferencePool named like a group), matches, filters, timeouts, parentRefs, hostnames, metadata
    assert without_owned_weights(route, namespace) == user_view, json.dumps(route["spec"]["rules"], indent=1)
    assert route["metadata"]["annotations"]["kvplan.io/owned-fields"] == (
        "spec.rules[*].backendRefs[*].weight,spec.rules[*].filters[RequestHeaderModifier].set[X-Vllm-Priority]")

    # a second reconcile on the same data writes nothing
    rv = route["metadata"]["resourceVersion"]
    again = run(kube, namespace)
    assert again.ok and not any(c.startswith("HTTPRoute/") for c in again.changed), again.changed
    assert get_route(kube, namespace)["metadata"]["resourceVersion"] == rv

    # DryRun: the user resets the weights; the operator must leave the route as it is
    api = client.CustomObjectsApi(kube_api)
    api.patch_namespaced_custom_object("kvplan.io", "v1alpha1", namespace, "kvplans", "fleet",
                                       {"spec": {"mode": "DryRun"}})
    reset = copy.deepcopy(route["spec"]["rules"])
    for rule in reset:
        for ref in rule["backendRefs"]:
            if owned(ref, namespace):
                ref["weight"] = 1
    api.patch_namespaced_custom_object(*GW, namespace, "httproutes", ROUTE, {"spec": {"rules": reset}})
    before = get_route(kube, namespace)
    dry = run(kube, namespace)
    assert dry.ok and dry.changed == [], dry
    assert cond(fetch(kube, namespace), C.APPLIED)["reason"] == C.DRY_RUN
    after = get_route(kube, namespace)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["spec"] == before["spec"]

    # back to Apply: the planned weights return (so the DryRun check above was not vacuous)
    api.patch_namespaced_custom_object("kvplan.io", "v1alpha1", namespace, "kvplans", "fleet",
                                       {"spec": {"mode": "Apply"}})
    assert run(kube, namespace).ok
    route = get_route(kube, namespace)
    want = expected_weights(kube, namespace)
    assert route_weights(route, namespace) == [want["chat"], want["code"], want["_fleet"]]
    assert without_owned_weights(route, namespace) == user_view


def pool(name: str, app: str) -> dict:
    return {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": app}}, "targetPorts": [{"number": 8000}],
                     "endpointPickerRef": {"name": f"{name}-epp", "port": {"number": 9002}}}}


def test_inferencepool_backendrefs_on_real_apiserver(crds, kube_api, kube, namespace, prometheus, traces_dir):
    from kubernetes import client

    backfill(prometheus, traces_dir)
    api = client.CustomObjectsApi(kube_api)
    for name, app in (("pool-a", "vllm-a"), ("pool-b", "vllm-b")):
        api.create_namespaced_custom_object(*POOLS, namespace, "inferencepools", pool(name, app))
    ref = {"group": "inference.networking.k8s.io", "kind": "InferencePool"}
    route = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": ROUTE},
             "spec": {"parentRefs": [{"name": "inference-gw"}], "rules": [
                 {"matches": [{"headers": [{"name": HEADER, "value": "chat"}]}],
                  "backendRefs": [ref | {"name": "pool-a"}, ref | {"name": "pool-b"}]},
                 {"backendRefs": [ref | {"name": "pool-a"}, ref | {"name": "pool-b"}]}]}}
    created = api.create_namespaced_custom_object(*GW, namespace, "httproutes", route)
    assert created["spec"]["rules"][0]["backendRefs"][0]["weight"] == 1  # upstream's default
    spec = kvplan_spec(prometheus.url)
    spec["router"]["httpRoute"] = {"name": ROUTE}
    spec["groups"][0]["inferencePool"], spec["groups"][1]["inferencePool"] = "pool-a", "pool-b"
    setup(kube_api, namespace, spec)
    out = run(kube, namespace)
    assert out.ok, out
    doc = json.loads(kube.get_configmap(namespace, "llm-router")["data"]["routing.json"])
    assert {g: v["inferencePool"] for g, v in doc["groups"].items()} == {"pool-a": "pool-a", "pool-b": "pool-b"}
    want = largest_remainder({g: doc["classes"]["chat"]["weights"].get(g, 0) for g in doc["groups"]})
    rules = get_route(kube, namespace)["spec"]["rules"]
    assert {b["name"]: b["weight"] for b in rules[0]["backendRefs"]} == {"pool-a": want["pool-a"],
                                                                         "pool-b": want["pool-b"]}
    assert sum(b["weight"] for b in rules[1]["backendRefs"]) == 1000

    # pool-b now selects other pods: refused, nothing written
    api.patch_namespaced_custom_object(*POOLS, namespace, "inferencepools", "pool-b",
                                       {"spec": {"selector": {"matchLabels": {"app": "someone-else"}}}})
    api.patch_namespaced_custom_object("kvplan.io", "v1alpha1", namespace, "kvplans", "fleet",
                                       {"spec": {"replan": {"minImprovement": 0.5}}})
    before = {name: kube.get_deployment(namespace, name)["metadata"]["resourceVersion"] for name in SERVICES}
    route_rv = get_route(kube, namespace)["metadata"]["resourceVersion"]
    out = run(kube, namespace)
    assert out.reason == C.ROUTER_TARGET_INVALID and "spec.groups[1].inferencePool" in out.message, out
    assert {name: kube.get_deployment(namespace, name)["metadata"]["resourceVersion"] for name in SERVICES} == before
    assert get_route(kube, namespace)["metadata"]["resourceVersion"] == route_rv
    assert cond(fetch(kube, namespace), C.READY)["reason"] == C.ROUTER_TARGET_INVALID
