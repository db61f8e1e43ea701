"""Server-side apply with the field manager ``kvplan-operator``, on the real local control plane (and a real
Prometheus backfilled from the shared traces), the way a GitOps tool meets it:

- after a reconcile the apiserver records the operator's Deployment fields under ``kvplan-operator`` with
  ``operation: Apply`` (a ConfigMap the operator creates is a POST, ``operation: Update``, same manager);
- a GitOps controller server-side applying the manifest from Git (its own field manager, no force) is refused with a
  conflict naming ``kvplan-operator`` on the operator's fields (args, replicas), which is what Argo CD's
  ``managedFieldsManagers`` / ``ignoreDifferences`` are for (docs/upgrade.md);
- the same manifest without those fields (what ``RespectIgnoreDifferences`` sends) is accepted, keeps the operator's
  values, and the operator's next reconcile writes nothing;
- the ``KVPLAN_RESERVE_*`` env an earlier release set goes from the real Deployment (removals go through a separate
  patch, since an apply only removes what the same manager applied before), and its state ConfigMap key once no
  Deployment refers to it any more.
"""

from __future__ import annotations

import copy
import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kvplan_operator.kube import FIELD_MANAGER, Kube
from operator_world import backfill, deployment, kvplan_spec, run, setup, versions

pytestmark = pytest.mark.integration

GITOPS = "argocd-controller"


def _managers(body: dict) -> dict[tuple[str, str], str]:
    return {(m["manager"], m["operation"]): json.dumps(m.get("fieldsV1", {})) for m in body["metadata"]["managedFields"]}


def _git_apply(kube_api, namespace: str, manifest: dict, *, force: bool = False) -> None:
    client.AppsV1Api(kube_api).patch_namespaced_deployment(
        manifest["metadata"]["name"], namespace, manifest, field_manager=GITOPS, force=force,
        _content_type="application/apply-patch+yaml")


def test_operator_fields_are_applied_and_gitops_is_told(crd, kube_api, namespace, prometheus, traces_dir):
    kube = Kube(kube_api)
    backfill(prometheus, traces_dir)
    setup(kube_api, namespace, kvplan_spec(prometheus.url))
    assert run(kube, namespace).ok
    dep = kube.get_deployment(namespace, "vllm-a")
    managers = _managers(dep)
    assert (FIELD_MANAGER, "Apply") in managers, list(managers)
    applied = managers[(FIELD_MANAGER, "Apply")]
    for field in ('"f:replicas"', '"f:nodeSelector"', '"f:args"', '"f:nvidia.com/gpu"', '"k:{\\"name\\":\\"vllm\\"}"'):
        assert field in applied, field
    router = kube.get_configmap(namespace, "llm-router")  # created by the operator (POST: operation Update)
    assert any(manager == FIELD_MANAGER and "f:routing.json" in fields
               for (manager, _), fields in _managers(router).items())

    git = deployment("vllm-a")
    with pytest.raises(ApiException) as refused:
        _git_apply(kube_api, namespace, git)
    assert refused.value.status == 409
    assert FIELD_MANAGER in refused.value.body and ".spec.replicas" in refused.value.body

    ignored = copy.deepcopy(git)  # what an ignoreDifferences-aware sync sends: Git without the operator's fields
    ignored["spec"].pop("replicas")
    for c in ignored["spec"]["template"]["spec"]["containers"]:
        c.pop("args", None)
    _git_apply(kube_api, namespace, ignored)
    after = kube.get_deployment(namespace, "vllm-a")
    assert after["spec"]["replicas"] == dep["spec"]["replicas"]
    vllm = next(c for c in after["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
    assert vllm["args"] == next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")["args"]
    assert (GITOPS, "Apply") in _managers(after)
    before = versions(kube, namespace)
    out = run(kube, namespace)
    assert out.ok and list(out.changed) == [], out
    assert versions(kube, namespace) == before


def test_an_earlier_releases_reserve_env_goes(crd, kube_api, namespace, prometheus, traces_dir):
    kube = Kube(kube_api)
    backfill(prometheus, traces_dir)
    setup(kube_api, namespace, kvplan_spec(prometheus.url))
    assert run(kube, namespace).ok

    def env_names() -> set[str]:
        body = kube.get_deployment(namespace, "vllm-a")
        vllm = next(c for c in body["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
        return {e["name"] for e in vllm.get("env") or []}

    # what an earlier release left: the env on the pod template, its key in the state ConfigMap
    ref = {"configMapKeyRef": {"name": "fleet-kvplan", "key": "KVPLAN_RESERVE_CHAT"}}
    client.AppsV1Api(kube_api).patch_namespaced_deployment("vllm-a", namespace, {"spec": {"template": {"spec": {
        "containers": [{"name": "vllm", "env": [{"name": "KVPLAN_RESERVE_CHAT", "valueFrom": ref}]}]}}}})
    client.CoreV1Api(kube_api).patch_namespaced_config_map("fleet-kvplan", namespace,
                                                          {"data": {"KVPLAN_RESERVE_CHAT": "96"}})
    assert {"KVPLAN_RESERVE_CHAT", "HF_HOME"} <= env_names()
    assert run(kube, namespace).ok
    assert "KVPLAN_RESERVE_CHAT" not in env_names() and "HF_HOME" in env_names()
    # the reconcile observed a Deployment still referring to the key: it stays one cycle longer
    assert "KVPLAN_RESERVE_CHAT" in kube.get_configmap(namespace, "fleet-kvplan")["data"]
    assert run(kube, namespace).ok
    state = kube.get_configmap(namespace, "fleet-kvplan")
    assert state is not None and not [k for k in state.get("data") or {} if k.startswith("KVPLAN_RESERVE_")]


def test_a_held_max_unavailable_is_an_update_and_survives_the_next_apply(kube_api, namespace):
    """kvplan's hold of ``maxUnavailable`` (operator/targets/rollout_room.py) goes as a strategic-merge update, not
    in the apply: an apply that omits a field its manager applied before removes it, so kvplan's next reconcile
    (which writes no strategy while the rollout goes on) would drop the held value mid-rollout."""
    kube = Kube(kube_api)
    body = deployment("vllm-held")
    body["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    client.AppsV1Api(kube_api).create_namespaced_deployment(namespace, body)
    note = json.dumps({"held": 2, "user": 1}, sort_keys=True)
    args = {"spec": {"template": {"spec": {"containers": [{"name": "vllm", "args": ["--tensor-parallel-size", "4"]}]}}}}

    def rolling_update() -> dict:
        return kube.get_deployment(namespace, "vllm-held")["spec"]["strategy"]["rollingUpdate"]

    def annotations() -> dict:
        return kube.get_deployment(namespace, "vllm-held")["metadata"].get("annotations") or {}

    held = copy.deepcopy(args)
    held["spec"]["strategy"] = {"rollingUpdate": {"maxUnavailable": 2}}
    held["metadata"] = {"annotations": {"kvplan.io/rollout-max-unavailable": note, "kvplan.io/owner": "p"}}
    kube.patch_deployment(namespace, "vllm-held", held)
    assert rolling_update() == {"maxSurge": 0, "maxUnavailable": 2}
    assert annotations()["kvplan.io/rollout-max-unavailable"] == note
    managers = _managers(kube.get_deployment(namespace, "vllm-held"))
    assert '"f:maxUnavailable"' in managers[(FIELD_MANAGER, "Update")]
    assert '"f:maxUnavailable"' not in managers[(FIELD_MANAGER, "Apply")]
    assert '"f:kvplan.io/owner"' in managers[(FIELD_MANAGER, "Apply")]

    # Next reconcile, still rolling: the same note, no strategy. The held value stays.
    keep = copy.deepcopy(args)
    keep["metadata"] = {"annotations": {"kvplan.io/rollout-max-unavailable": note, "kvplan.io/owner": "p"}}
    kube.patch_deployment(namespace, "vllm-held", keep)
    assert rolling_update()["maxUnavailable"] == 2

    # Complete: the user's value back, the note gone; then a plain apply leaves the user's value alone.
    back = copy.deepcopy(args)
    back["spec"]["strategy"] = {"rollingUpdate": {"maxUnavailable": 1}}
    back["metadata"] = {"annotations": {"kvplan.io/rollout-max-unavailable": None, "kvplan.io/owner": "p"}}
    kube.patch_deployment(namespace, "vllm-held", back)
    assert rolling_update()["maxUnavailable"] == 1
    assert "kvplan.io/rollout-max-unavailable" not in annotations()
    kube.patch_deployment(namespace, "vllm-held", {**copy.deepcopy(args), "metadata": {"annotations": {
        "kvplan.io/owner": "p"}}})
    assert rolling_update() == {"maxSurge": 0, "maxUnavailable": 1}
