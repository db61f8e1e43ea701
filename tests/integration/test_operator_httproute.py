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
from operator_httproute_world import (GW, HEADER, POOLS, REPO, ROUTE, SERVICES, control_plane_tools, crds, create_services_and_route, expected_weights, get_route, largest_remainder, owned, pool, route_body, route_weights, without_owned_weights)  # noqa: F401 - fixtures are found by name


pytestmark = pytest.mark.integration


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
