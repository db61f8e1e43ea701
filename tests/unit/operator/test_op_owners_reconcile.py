"""Owners other than kvplan, through one whole reconcile at the level of the operator's Kubernetes wrapper: a
Deployment another controller owns refuses the whole plan (``OwnedByController``, the owner named, nothing written
but status) and the next reconcile after the owner lets go applies it, while DryRun says so in a note; replicas owned by a scaler kvplan finds
(AIBrix PodAutoscaler), by a field manager the spec names or by an external party are not written while the rest of
the plan is, and status says who and why; a Helm release is named in status and notes; a data-parallel pod
requests its engines' GPUs and the Deployment counts pods; an unknown data-parallel size or a pod larger than a
node is refused."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvplan_operator import conditions as C
from kvplan_operator.reconcile import reconcile
from op_fakes import FakeKube, container, dep, kvplan  # type: ignore[import-not-found]
from op_reconcile_world import cond, deps, kube  # type: ignore[import-not-found]  # noqa: F401
from op_targets_world import SPEC  # type: ignore[import-not-found]

#: production-stack's operator: a controller kvplan has no target for (KServe's LLMInferenceService has one).
OWNER = {"apiVersion": "production-stack.vllm.ai/v1alpha1", "kind": "VLLMRuntime", "name": "chat", "uid": "u9",
         "controller": True}


def spec_with(**group_fields: Any) -> dict[str, Any]:
    spec = copy.deepcopy(SPEC)
    spec["groups"][1].update(group_fields)
    return spec


def test_controller_owned_deployment_refuses_the_plan_and_writes_nothing(kube: FakeKube) -> None:
    kube.deployments["vllm-small"]["metadata"]["ownerReferences"] = [OWNER]
    kube.deployments["vllm-small"]["metadata"]["managedFields"] = [{"manager": "vllmruntime-manager",
                                                                    "operation": "Update"}]
    before = copy.deepcopy(kube.deployments)
    out = reconcile(kvplan(copy.deepcopy(SPEC), kube), deps(kube))
    assert out.reason == C.OWNED_BY_CONTROLLER and out.retry_after is not None, out
    assert kube.writes == ["status"] and kube.deployments == before
    assert kube.configmaps == {}  # not even the state ConfigMap: the plan is held as a whole
    ready = cond(kube, C.READY)
    assert ready["status"] == "False" and ready["reason"] == C.OWNED_BY_CONTROLLER
    assert "VLLMRuntime/chat (production-stack.vllm.ai/v1alpha1)" in ready["message"]
    assert "vllmruntime-manager" in ready["message"] and "nothing applied" in ready["message"]
    assert cond(kube, C.APPLIED)["reason"] == C.OWNED_BY_CONTROLLER
    # the owner lets go (orphaned): the next reconcile applies the plan
    kube.deployments["vllm-small"]["metadata"]["ownerReferences"] = [{**OWNER, "controller": False}]
    assert reconcile(kvplan(copy.deepcopy(SPEC), kube), deps(kube)).ok
    assert kube.deployments["vllm-small"]["metadata"]["annotations"]["kvplan.io/owner"] == "ns/fleet"


@pytest.mark.parametrize(("setup", "group_fields", "by", "reason"), [
    pytest.param(lambda k: k.scaled.update({"vllm-small": "PodAutoscaler/small-kpa"}), {}, "PodAutoscaler/small-kpa",
                 C.REPLICAS_BY_AUTOSCALER, id="aibrix-podautoscaler"),
    pytest.param(lambda k: k.deployments["vllm-small"]["metadata"].update(managedFields=[
        {"manager": "dynamo-operator", "operation": "Update", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]),
        {"replicaOwner": {"fieldManagers": ["dynamo-operator"]}}, "FieldManager/dynamo-operator",
        C.REPLICAS_BY_FIELD_MANAGER, id="named-field-manager"),
    pytest.param(lambda k: None, {"replicaOwner": {"policy": "External"}}, "External", C.REPLICAS_EXTERNAL,
                 id="external"),
])
def test_replicas_owned_elsewhere_are_left_and_the_rest_applies(kube: FakeKube, setup: Any,
                                                                group_fields: dict[str, Any], by: str,
                                                                reason: str) -> None:
    kube.deployments["vllm-small"]["spec"]["replicas"] = 7  # what the other owner set
    setup(kube)
    out = reconcile(kvplan(spec_with(**group_fields), kube), deps(kube))
    assert out.ok, out
    small = kube.deployments["vllm-small"]
    group = kube.status["plan"]["groups"]["small"]
    assert small["spec"]["replicas"] == 7
    assert group["replicasManagedBy"] == by and group["replicasReason"] == reason
    assert "replicas" not in small["metadata"]["annotations"]["kvplan.io/owned-fields"].split(",")
    vllm = container(small)
    assert vllm["args"][vllm["args"].index("--tensor-parallel-size") + 1] == str(group["tp"])  # the rest applied
    assert any(f"replicas left to {by}" in n for n in kube.status["plan"]["notes"])
    big = kube.status["plan"]["groups"]["big"]
    assert big["replicasReason"] == C.REPLICAS_BY_KVPLAN and kube.deployments["vllm-big"]["spec"]["replicas"] == \
        big["podReplicas"]


def test_helm_release_is_named_in_status(kube: FakeKube) -> None:
    kube.deployments["vllm-small"]["metadata"].update(
        labels={"app.kubernetes.io/managed-by": "Helm"},
        annotations={"meta.helm.sh/release-name": "stack", "meta.helm.sh/release-namespace": "ns"})
    assert reconcile(kvplan(copy.deepcopy(SPEC), kube), deps(kube)).ok
    groups = kube.status["plan"]["groups"]
    assert groups["small"]["helmRelease"] == "ns/stack" and groups["big"]["helmRelease"] is None
    assert any("Helm release ns/stack" in n and "helm upgrade restores" in n for n in kube.status["plan"]["notes"])


def test_data_parallel_pods_request_their_engines_gpus(kube: FakeKube) -> None:
    kube.deployments["vllm-small"] = dep("vllm-small", ["--model", "m", "--tensor-parallel-size", "1",
                                                        "--data-parallel-size-local", "2"])
    spec = copy.deepcopy(SPEC)
    assert reconcile(kvplan(spec, kube), deps(kube)).ok
    small, group = kube.deployments["vllm-small"], kube.status["plan"]["groups"]["small"]
    per_engine = group["tp"] * group["pp"]
    limits = container(small)["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == str(2 * per_engine) and group["gpusPerPod"] == 2 * per_engine
    assert group["enginesPerPod"] == 2 and group["podReplicas"] == small["spec"]["replicas"]
    engines, pods = group["replicas"], small["spec"]["replicas"]
    assert pods in (engines // 2, -(-engines // 2))
    assert pods * 2 * per_engine <= spec["groups"][1]["nodePool"]["gpuCount"]
    big = kube.status["plan"]["groups"]["big"]  # no data parallelism: one engine per pod
    assert big["enginesPerPod"] == 1 and container(kube.deployments["vllm-big"])["resources"]["limits"][
        "nvidia.com/gpu"] == str(big["tp"] * big["pp"])


@pytest.mark.parametrize(("args", "layouts", "gpu_count", "reason", "needle"), [
    pytest.param(["sh", "-c", "vllm serve m --data-parallel-size-local $DP"], None, 8, C.UNSUPPORTED_CONTAINER_LAYOUT,
                 "data-parallel size is known only at run time", id="runtime-dp"),
    pytest.param(["--model", "m", "--data-parallel-size-local", "8"], [{"tp": 2}], 16, C.LAYOUT_EXCEEDS_NODE,
                 "16 GPUs per pod exceeds one node", id="pod-larger-than-a-node"),
    pytest.param(["--model", "m", "--data-parallel-size-local", "4"], [{"tp": 2}], 6, C.LAYOUT_EXCEEDS_NODE,
                 "8 GPUs per pod exceeds the group's gpuCount 6", id="pod-larger-than-the-pool"),
])
def test_data_parallel_pods_kvplan_cannot_count_are_refused(kube: FakeKube, args: list[str],
                                                            layouts: list[Any] | None, gpu_count: int, reason: str,
                                                            needle: str) -> None:
    kube.deployments["vllm-small"] = dep("vllm-small", [] if args[0] == "sh" else args)
    if args[0] == "sh":
        container(kube.deployments["vllm-small"])["command"] = args
    before = copy.deepcopy(kube.deployments)
    spec = spec_with(**({"layouts": layouts} if layouts else {}))
    spec["groups"][1]["nodePool"]["gpuCount"] = gpu_count
    out = reconcile(kvplan(spec, kube), deps(kube))
    assert out.reason == reason and needle in out.message, out
    assert kube.writes == ["status"] and kube.deployments == before


def test_dry_run_tells_of_a_controller_owned_deployment(kube: FakeKube) -> None:
    kube.deployments["vllm-small"]["metadata"]["ownerReferences"] = [OWNER]
    before = copy.deepcopy(kube.deployments)
    out = reconcile(kvplan({**copy.deepcopy(SPEC), "mode": "DryRun"}, kube), deps(kube))
    assert out.ok and kube.deployments == before
    assert any("controlled by VLLMRuntime/chat" in n and C.OWNED_BY_CONTROLLER in n
               for n in kube.status["plan"]["notes"])
