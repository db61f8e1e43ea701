"""Owners other than kvplan, on the real apiserver and a real Prometheus:

- a Deployment with a controller ownerReference (to an object of a kind kvplan has no target for) refuses the
  whole plan: ``OwnedByController`` naming the owner, and no object changes (every resourceVersion the same, no
  state ConfigMap); once the owner lets go (``controller: false``) the next reconcile applies the plan;
- a KEDA ScaledObject (the upstream CRD, from KEDA's Go module) targeting a Deployment: its replicas are left as
  they are and status names the ScaledObject and the reason, while the other group's replicas are kvplan's;
- a field manager the spec names that scales through the ``scale`` subresource after kvplan wrote the replicas
  takes them over: kvplan leaves them from then on (the apiserver records that write under ``f:spec.f:replicas``).
"""

from __future__ import annotations

import copy

import pytest

from kvplan_operator import conditions as C
from kvplan_operator.kube import Kube
from operator_world import backfill, cond, fetch, kvplan_spec, run, setup, versions  # type: ignore[import-not-found]

pytestmark = pytest.mark.integration


def test_controller_owned_deployment_is_refused_and_nothing_written(crd, kube_api, kube: Kube, namespace,
                                                                    prometheus, traces_dir):
    from kubernetes import client

    backfill(prometheus, traces_dir)
    setup(kube_api, namespace, kvplan_spec(prometheus.url))
    core, apps = client.CoreV1Api(kube_api), client.AppsV1Api(kube_api)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "some-controller"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "some-controller", "uid": owner.metadata.uid,
           "controller": True}
    apps.patch_namespaced_deployment("vllm-b", namespace, {"metadata": {"ownerReferences": [ref]}},
                                     field_manager="some-controller")
    before = versions(kube, namespace)
    out = run(kube, namespace)
    assert out.reason == C.OWNED_BY_CONTROLLER, out
    assert "ConfigMap/some-controller (v1)" in out.message and "some-controller" in out.message
    assert versions(kube, namespace) == before and before["fleet-kvplan"] is None  # nothing, not even the state
    body = fetch(kube, namespace)
    ready = cond(body, C.READY)
    assert ready["status"] == "False" and ready["reason"] == C.OWNED_BY_CONTROLLER
    assert "Deployment vllm-b is controlled by ConfigMap/some-controller (v1)" in ready["message"]
    assert body["status"]["lastError"]["reason"] == C.OWNED_BY_CONTROLLER
    kinds = [e.reason for e in core.list_namespaced_event(namespace).items if e.involved_object.kind == "KVPlan"]
    assert C.OWNED_BY_CONTROLLER in kinds  # the transition was posted

    apps.patch_namespaced_deployment("vllm-b", namespace, {"metadata": {"ownerReferences": [
        {**ref, "controller": False}]}}, field_manager="some-controller")
    again = run(kube, namespace)
    assert again.ok, again
    annotations = kube.get_deployment(namespace, "vllm-b")["metadata"]["annotations"]
    assert annotations["kvplan.io/owner"] == f"{namespace}/fleet"
    assert cond(fetch(kube, namespace), C.READY)["reason"] == C.RECONCILED


@pytest.fixture(scope="module")
def keda(cluster) -> bool:
    """KEDA's upstream ScaledObject CRD, Established (it stays for the session: an empty list reads as no
    ScaledObject, as without KEDA)."""
    from kvplan_dev.gobuild import BuildError
    from kvplan_dev.gomodules import keda_crd

    try:
        path = keda_crd()
    except BuildError as exc:
        pytest.fail(f"KEDA's ScaledObject CRD could not be fetched: {exc}")
    cluster.kubectl("apply", "--server-side", "-f", str(path))
    cluster.wait_established(["scaledobjects.keda.sh"])
    return True


def test_keda_scaledobject_keeps_replicas(crd, keda, kube_api, kube: Kube, namespace, prometheus, traces_dir):
    from kubernetes import client

    backfill(prometheus, traces_dir)
    setup(kube_api, namespace, kvplan_spec(prometheus.url))
    client.AppsV1Api(kube_api).patch_namespaced_deployment_scale("vllm-a", namespace, {"spec": {"replicas": 3}})
    client.CustomObjectsApi(kube_api).create_namespaced_custom_object("keda.sh", "v1alpha1", namespace,
                                                                      "scaledobjects", {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "vllm-a-scaler"},
        "spec": {"scaleTargetRef": {"name": "vllm-a"}, "minReplicaCount": 1, "maxReplicaCount": 4,
                 "triggers": [{"type": "cpu", "metadata": {"value": "80"}}]}})
    out = run(kube, namespace)
    assert out.ok, out
    groups = fetch(kube, namespace)["status"]["plan"]["groups"]
    a, b = kube.get_deployment(namespace, "vllm-a"), kube.get_deployment(namespace, "vllm-b")
    assert a["spec"]["replicas"] == 3
    assert groups["pool-a"]["replicasManagedBy"] == "ScaledObject/vllm-a-scaler"
    assert groups["pool-a"]["replicasReason"] == C.REPLICAS_BY_AUTOSCALER
    assert "replicas" not in a["metadata"]["annotations"]["kvplan.io/owned-fields"].split(",")
    vllm = next(c for c in a["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
    assert vllm["args"][vllm["args"].index("--tensor-parallel-size") + 1] == str(groups["pool-a"]["tp"])
    assert groups["pool-b"]["replicasReason"] == C.REPLICAS_BY_KVPLAN
    assert b["spec"]["replicas"] == groups["pool-b"]["podReplicas"]


def test_named_field_manager_takes_replicas_over(crd, kube_api, kube: Kube, namespace, prometheus, traces_dir):
    from kubernetes import client

    backfill(prometheus, traces_dir)
    spec = copy.deepcopy(kvplan_spec(prometheus.url))
    spec["groups"][1]["replicaOwner"] = {"fieldManagers": ["dynamo-operator"]}
    setup(kube_api, namespace, spec)
    assert run(kube, namespace).ok
    planned = fetch(kube, namespace)["status"]["plan"]["groups"]["pool-b"]
    assert planned["replicasReason"] == C.REPLICAS_BY_KVPLAN  # listed, but it never wrote replicas
    assert kube.get_deployment(namespace, "vllm-b")["spec"]["replicas"] == planned["podReplicas"]
    scaled = planned["podReplicas"] + 2
    client.AppsV1Api(kube_api).patch_namespaced_deployment_scale("vllm-b", namespace, {"spec": {"replicas": scaled}},
                                                                 field_manager="dynamo-operator")
    out = run(kube, namespace)
    assert out.ok, out
    b = kube.get_deployment(namespace, "vllm-b")
    group = fetch(kube, namespace)["status"]["plan"]["groups"]["pool-b"]
    assert b["spec"]["replicas"] == scaled
    assert group["replicasManagedBy"] == "FieldManager/dynamo-operator"
    assert group["replicasReason"] == C.REPLICAS_BY_FIELD_MANAGER
    holders = [e["manager"] for e in b["metadata"]["managedFields"]
               if "f:replicas" in (e.get("fieldsV1") or {}).get("f:spec", {})]
    assert holders == ["dynamo-operator"], b["metadata"]["managedFields"]
