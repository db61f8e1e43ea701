"""Collisions of names between KVPlans of one namespace, on the real apiserver and a real Prometheus (issue 26,
item 6): the router ConfigMap of one KVPlan named as another's state, plan-detail or plan-detail chunk ConfigMap
(refused by the CRD schema), as another's router ConfigMap (OwnedByOther), a KVPlan whose plan-detail name is another
KVPlan's ConfigMap (OwnedByOther, nothing applied), and KVPlans with suffix-overlapping names side by side. The
other KVPlan's objects keep their resourceVersion: nothing was written to them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvcore.planner import plan
from kvplan_operator import conditions as C
from kvplan_operator.kube import Kube
from kvplan_operator.prom import PromClient
from kvplan_operator.reconcile import Deps, reconcile
from operator_world import backfill, create_kvplan, deployment, kvplan_spec, refused  # type: ignore[import-not-found]

pytestmark = pytest.mark.integration


def add(kube_api: Any, namespace: str, name: str, prom_url: str, router: str) -> None:
    from kubernetes import client

    spec = copy.deepcopy(kvplan_spec(prom_url))
    for g, suffix in zip(spec["groups"], ("a", "b")):
        g["deployment"] = f"{name}-{suffix}"
        client.AppsV1Api(kube_api).create_namespaced_deployment(namespace, deployment(f"{name}-{suffix}"))
    spec["router"] = {"configMap": {"name": router}}
    create_kvplan(kube_api, namespace, spec, name=name)


def run(kube: Kube, namespace: str, name: str) -> Any:
    body = kube.get_kvplan(namespace, name)
    assert body is not None
    return reconcile(body, Deps(kube=kube, prom_factory=PromClient.connect, planner=plan, backoff_base_s=1.0))


def versions(kube: Kube, namespace: str, names: list[str]) -> dict[str, str | None]:
    out = {}
    for n in names:
        body = kube.get_configmap(namespace, n)
        out[n] = body["metadata"]["resourceVersion"] if body else None
    return out


def owner(kube: Kube, namespace: str, cm: str) -> str:
    return kube.get_configmap(namespace, cm)["metadata"]["annotations"]["kvplan.io/owner"]


def test_collisions_on_the_real_apiserver(crd, kube_api, kube, namespace, prometheus, traces_dir):
    from kubernetes import client

    backfill(prometheus, traces_dir)
    add(kube_api, namespace, "other", prometheus.url, "other-router")
    assert run(kube, namespace, "other").ok
    theirs = ["other-kvplan", "other-plan", "other-router"]
    before = versions(kube, namespace, theirs)
    assert all(before.values()) and owner(kube, namespace, "other-kvplan") == f"{namespace}/other"

    # the router ConfigMap named as the other KVPlan's state / detail / detail chunk: refused by the apiserver's
    # schema (a KVPlan stored before the CRD had that rule is refused by the operator's spec check: unit tier)
    for i, router in enumerate(("other-kvplan", "other-plan", "other-plan-1")):
        spec = copy.deepcopy(kvplan_spec(prometheus.url))
        spec["router"] = {"configMap": {"name": router}}
        error = refused(kube_api, namespace, spec)
        assert error.status == 422 and "reserved for KVPlans' own ConfigMaps" in error.body, error.body
    # ... and as the other KVPlan's router ConfigMap: owned by a live KVPlan
    add(kube_api, namespace, "mine3", prometheus.url, "other-router")
    out = run(kube, namespace, "mine3")
    assert out.reason == C.OWNED_BY_OTHER and f"managed by KVPlan {namespace}/other" in out.message, out
    assert versions(kube, namespace, theirs) == before
    for suffix in ("a", "b"):  # nothing applied for it either
        d = kube.get_deployment(namespace, f"mine3-{suffix}")
        assert "kvplan.io/owner" not in (d["metadata"].get("annotations") or {})

    # a KVPlan whose plan-detail name is another KVPlan's ConfigMap (written by an operator before the fix)
    client.CoreV1Api(kube_api).create_namespaced_config_map(namespace, {
        "metadata": {"name": "pooled-plan", "annotations": {"kvplan.io/owner": f"{namespace}/other"}},
        "data": {"routing.json": "{}"}})
    held = versions(kube, namespace, ["pooled-plan"])
    add(kube_api, namespace, "pooled", prometheus.url, "pooled-router")
    out = run(kube, namespace, "pooled")
    assert out.reason == C.OWNED_BY_OTHER and "ConfigMap pooled-plan" in out.message, out
    assert versions(kube, namespace, ["pooled-plan"]) == held
    assert kube.get_configmap(namespace, "pooled-kvplan") is None  # nothing applied, not even the state

    # suffix-overlapping names side by side: each writes only its own
    for name in ("x", "x-plan", "x-kvplan"):
        add(kube_api, namespace, name, prometheus.url, f"{name}-router")
    for _ in range(2):
        for name in ("x", "x-plan", "x-kvplan"):
            out = run(kube, namespace, name)
            assert out.ok, (name, out)
    for name in ("x", "x-plan", "x-kvplan"):
        for cm in (f"{name}-kvplan", f"{name}-plan", f"{name}-router"):
            assert owner(kube, namespace, cm) == f"{namespace}/{name}", cm
    assert versions(kube, namespace, theirs) == before
