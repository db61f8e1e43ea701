"""The KServe LLMInferenceService target: the pure patch builder and drift (parallelism, the vLLM container's
flags and GPUs, replicas, the pool, what is kept), which groups it serves (``workloadRef`` or the Deployment's
controller ownerReference), the fields it refuses with a named condition (``spec.worker``, ``spec.prefill``, data
parallelism, no vLLM container, a missing object), a failed read or write of it (ReadFailed, ApplyFailed, nothing
written), and whole reconciles on the fake Kube: the LLMInferenceService is
patched, KServe's Deployment never is, and a second reconcile writes nothing."""

from __future__ import annotations

import copy

import pytest

from kvplan_operator import conditions as C
from kvplan_operator.desired import ANN_LAYOUT, ANN_OWNER, GroupTarget
from kvplan_operator.reconcile import reconcile
from kvplan_operator.spec import parse_spec
from kvplan_operator.targets.llmisvc import (build_llmisvc_patch, find_vllm_container, llmisvc_drift, llmisvc_layout,
                                             pod_view, unexpressible_fields)
from kvplan_operator.targets.vllm_flags import PP_FLAG, TP_FLAG, read_flags
from kvplan_operator.targets.workload import controller_llmisvc, llmisvc_name
from op_fakes import Fault, FakeKube, dep, kvplan, smp  # type: ignore[import-not-found]
from op_reconcile_world import cond, deps  # type: ignore[import-not-found]
from op_targets_world import SPEC  # type: ignore[import-not-found]


def owner_ref(name: str, *, controller: bool = True, api: str = "serving.kserve.io/v1alpha2",
              kind: str = "LLMInferenceService") -> dict:
    return {"apiVersion": api, "kind": kind, "name": name, "uid": "u-" + name, "controller": controller}


def llmisvc(name: str, *, args: list[str] | None = None, spec: dict | None = None) -> dict:
    """An LLMInferenceService as the apiserver returns it: one vLLM container ``main`` in spec.template."""
    return {"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
            "metadata": {"name": name, "namespace": "ns", "annotations": {"team": "a"}, "generation": 3},
            "spec": {"model": {"uri": "hf://m"}, "replicas": 1,
                     "template": {"containers": [
                         {"name": "main", "image": "vllm",
                          "args": args if args is not None else ["--served-model-name", "m", "--max-model-len",
                                                                 "8192"],
                          "resources": {"limits": {"memory": "100Gi"}}},
                         {"name": "sidecar", "image": "proxy"}]}} | (spec or {})}


def kserve_deployment(name: str, owner: str) -> dict:
    body = dep(name)
    body["metadata"]["ownerReferences"] = [owner_ref(owner)]
    return body


def one_group_spec() -> dict:
    spec = copy.deepcopy(SPEC)
    spec["groups"] = [copy.deepcopy(spec["groups"][0])]
    spec["groups"][0]["container"] = "main"
    spec["router"] = {"configMap": {"name": "router"}}
    return spec


@pytest.mark.parametrize(("ref", "want"), [
    pytest.param(owner_ref("isvc"), "isvc", id="controller"),
    pytest.param(owner_ref("isvc", controller=False), None, id="not-controller"),
    pytest.param(owner_ref("isvc", api="other.io/v1"), None, id="other-group"),
    pytest.param(owner_ref("rs", kind="ReplicaSet", api="apps/v1"), None, id="other-kind"),
])
def test_controller_llmisvc(ref, want):
    assert controller_llmisvc({"metadata": {"ownerReferences": [ref]}}) == want


def test_workload_ref_wins_over_owner():
    spec = one_group_spec()
    spec["groups"][0]["workloadRef"] = {"kind": "LLMInferenceService", "name": "named"}
    group = parse_spec(spec).groups[0]
    assert llmisvc_name(group, kserve_deployment("vllm-big", "from-owner")) == "named"
    assert llmisvc_name(parse_spec(one_group_spec()).groups[0], dep("vllm-big")) is None


def test_patch_sets_parallelism_flags_gpus_replicas_and_keeps_the_rest():
    group = parse_spec(one_group_spec()).groups[0]
    body = llmisvc("isvc")
    target = GroupTarget("big", tp=4, pp=2, replicas=2, max_num_seqs=64)
    patch = build_llmisvc_patch(body, group=group, target=target, owner="ns/fleet", generation=7,
                                manage_replicas=True)
    assert patch["spec"]["parallelism"] == {"tensor": 4, "pipeline": 2}
    assert patch["spec"]["replicas"] == 2
    (c,) = patch["spec"]["template"]["containers"]  # only the vLLM container: server-side apply keeps the sidecar
    assert c["name"] == "main"
    flags = read_flags(c)
    assert (flags[TP_FLAG], flags[PP_FLAG], flags["--max-num-seqs"]) == ("4", "2", "64")
    assert c["args"][:4] == ["--served-model-name", "m", "--max-model-len", "8192"]
    assert c["resources"] == {"limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}}
    ann = patch["metadata"]["annotations"]
    assert ann[ANN_OWNER] == "ns/fleet" and ann[ANN_LAYOUT] == "tp=4,pp=2,replicas=2"
    assert "spec.replicas" in ann["kvplan.io/owned-fields"]
    # applied, the object has no drift left, and its other fields are as they were
    after = copy.deepcopy(body)
    smp(after, copy.deepcopy(patch))
    assert llmisvc_drift(body, patch) and llmisvc_drift(after, patch) == []
    assert after["spec"]["model"] == body["spec"]["model"]
    assert [x["name"] for x in after["spec"]["template"]["containers"]] == ["main", "sidecar"]
    assert after["spec"]["template"]["containers"][0]["resources"]["limits"]["memory"] == "100Gi"
    assert llmisvc_layout(after, "main") == (4, 2)


def test_replicas_left_alone_when_not_managed():
    group = parse_spec(one_group_spec()).groups[0]
    patch = build_llmisvc_patch(llmisvc("isvc"), group=group, target=GroupTarget("big", 2, 1, 3), owner="ns/f",
                                generation=1, manage_replicas=False)
    assert "replicas" not in patch["spec"] and "spec.replicas" not in patch["metadata"]["annotations"][
        "kvplan.io/owned-fields"]


def test_layout_falls_back_to_parallelism():
    body = llmisvc("isvc", spec={"parallelism": {"tensor": 2, "pipeline": 2}})
    assert llmisvc_layout(body, "main") == (2, 2)
    body = llmisvc("isvc", args=["--tensor-parallel-size", "8"], spec={"parallelism": {"tensor": 2}})
    assert llmisvc_layout(body, "main") == (8, 1)  # the flag is what vLLM runs


def test_pod_view_reads_like_a_deployment():
    deployment = kserve_deployment("isvc-kserve", "isvc")
    deployment["status"] = {"replicas": 1, "updatedReplicas": 1}
    view = pod_view(llmisvc("isvc"), deployment)
    assert view["spec"]["replicas"] == 1 and view["status"] == deployment["status"]
    assert "generation" not in view["metadata"]
    assert view["spec"]["template"]["spec"]["containers"][0]["name"] == "main"


@pytest.mark.parametrize(("extra", "field"), [
    pytest.param({"worker": {"containers": [{"name": "w"}]}}, "spec.worker", id="multi-node"),
    pytest.param({"prefill": {"replicas": 1}}, "spec.prefill", id="prefill-decode"),
    pytest.param({"parallelism": {"data": 4, "dataLocal": 2}}, "spec.parallelism.data", id="data-parallel"),
])
def test_unexpressible_fields_are_named(extra, field):
    assert field in unexpressible_fields(llmisvc("isvc", spec=extra))
    assert unexpressible_fields(llmisvc("isvc", spec={"parallelism": {"data": 1, "tensor": 2}})) == []


def test_no_vllm_container_in_template():
    body = llmisvc("isvc")
    del body["spec"]["template"]
    assert find_vllm_container(body, "main") is None
    with pytest.raises(LookupError, match="spec.template.containers"):
        build_llmisvc_patch(body, group=parse_spec(one_group_spec()).groups[0], target=GroupTarget("big", 1, 1, 1),
                            owner="ns/f", generation=1, manage_replicas=True)


def kserve_world() -> FakeKube:
    kube = FakeKube({"vllm-big": kserve_deployment("vllm-big", "big-isvc")})
    kube.llmisvcs["big-isvc"] = llmisvc("big-isvc")
    return kube


def test_reconcile_patches_the_llmisvc_never_the_deployment():
    kube = kserve_world()
    before = copy.deepcopy(kube.deployments["vllm-big"])
    spec = one_group_spec()
    out = reconcile(kvplan(spec, kube), deps(kube))
    assert out.ok, out
    assert not any(w.startswith("patch Deployment/") for w in kube.writes), kube.writes
    assert kube.deployments["vllm-big"] == before
    assert "patch LLMInferenceService/big-isvc" in kube.writes
    g = kube.status["plan"]["groups"]["big"]
    isvc = kube.llmisvcs["big-isvc"]
    assert isvc["spec"]["parallelism"] == {"tensor": g["tp"], "pipeline": g["pp"]}
    assert isvc["spec"]["replicas"] == g["replicas"]
    main = find_vllm_container(isvc, "main")
    assert main is not None and read_flags(main)[TP_FLAG] == str(g["tp"])
    assert main["resources"]["limits"]["nvidia.com/gpu"] == str(g["tp"] * g["pp"])
    assert cond(kube, C.READY)["reason"] == C.RECONCILED
    # the same data again: nothing to write
    writes = len(kube.writes)
    again = reconcile(kvplan(spec, kube), deps(kube))
    assert again.ok, again
    assert not any("LLMInferenceService" in w or "Deployment" in w for w in kube.writes[writes:]), kube.writes[writes:]


@pytest.mark.parametrize(("change", "reason", "field"), [
    pytest.param(lambda k: k.llmisvcs.pop("big-isvc"), C.WORKLOAD_MISSING, "big-isvc", id="missing"),
    pytest.param(lambda k: k.llmisvcs["big-isvc"]["spec"].update(worker={"containers": [{"name": "w"}]}),
                 C.UNSUPPORTED_WORKLOAD_FIELD, "spec.worker", id="worker"),
    pytest.param(lambda k: k.llmisvcs["big-isvc"]["spec"].pop("template"), C.CONTAINER_NOT_FOUND,
                 "spec.template.containers", id="no-template"),
])
def test_refusals_write_nothing_but_status(change, reason, field):
    kube = kserve_world()
    change(kube)
    out = reconcile(kvplan(one_group_spec(), kube), deps(kube))
    assert not out.ok and out.reason == reason, out
    assert field in cond(kube, C.READY)["message"]
    assert not any(w.startswith(("patch LLMInferenceService/", "patch Deployment/")) for w in kube.writes)


def test_scaling_owns_replicas():
    kube = kserve_world()
    kube.llmisvcs["big-isvc"]["spec"]["scaling"] = {"maxReplicas": 4}
    del kube.llmisvcs["big-isvc"]["spec"]["replicas"]  # the CRD's CEL rule: replicas and scaling exclude each other
    out = reconcile(kvplan(one_group_spec(), kube), deps(kube))
    assert out.ok, out
    assert "patch LLMInferenceService/big-isvc" in kube.writes
    assert "replicas" not in kube.llmisvcs["big-isvc"]["spec"]
    assert any("spec.scaling" in n for n in kube.status["plan"]["notes"]), kube.status["plan"]["notes"]


@pytest.mark.parametrize(("method", "error", "reason"), [
    pytest.param("get_llminferenceservice", "403", C.READ_FAILED, id="read-forbidden"),
    pytest.param("get_llminferenceservice", "timeout", C.READ_FAILED, id="read-timeout"),
    pytest.param("patch_llminferenceservice", "409", C.APPLY_FAILED, id="write-conflict"),
    pytest.param("patch_llminferenceservice", "500", C.APPLY_FAILED, id="write-500"),
])
def test_kubernetes_failures_become_conditions(method, error, reason):
    kube = kserve_world()
    kube.faults.append(Fault(method, error))
    before = copy.deepcopy(kube.llmisvcs["big-isvc"])
    out = reconcile(kvplan(one_group_spec(), kube), deps(kube))
    assert not out.ok and out.reason == reason, out
    ready = cond(kube, C.READY)
    assert (ready["status"], ready["reason"]) == ("False", reason), ready
    assert "big-isvc" in ready["message"], ready
    assert kube.llmisvcs["big-isvc"] == before
    assert not any(w.startswith(("patch LLMInferenceService/", "patch Deployment/")) for w in kube.writes)
