"""Who else manages a serving Deployment, the pure parts: the controller ownerReference (a KVPlan's is not a
foreign controller), the owner-kind registry, field managers and who last wrote ``spec.replicas``, the Helm release;
the custom scalers' lists (KEDA ScaledObject, AIBrix PodAutoscaler; the wrapper's lists over a stub client: a 404 is
"not installed", a 403 or 500 an error naming the call) and the order in which a group's replica owner
is found, and the spec's ``replicaOwner`` refused with its field path; and data parallelism: engines per pod from
vLLM's flags, pods from the plan's engines."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvplan_operator import conditions as C
from kvplan_operator.decide.pods import pods, pods_note
from kvplan_operator.kube import FIELD_MANAGER, scale_targets
from kvplan_operator.observe.replica_owner import replica_owner
from kvplan_operator.spec import Group, InvalidSpec, parse_spec
from kvplan_operator.targets.deployment import read_dp_local
from kvplan_operator.targets.workload_owner import (ControllerRef, controller_ref, field_managers, helm_release,
                                                    owner_target, refusal, replicas_writers)
from op_targets_world import SPEC  # type: ignore[import-not-found]

KSERVE = {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "LLMInferenceService", "name": "chat", "uid": "u",
          "controller": True}


def meta(**kw: Any) -> dict[str, Any]:
    return {"metadata": kw}


def entry(manager: str, *, replicas: bool, subresource: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"f:replicas": {}} if replicas else {"f:template": {}}
    out: dict[str, Any] = {"manager": manager, "operation": "Update", "fieldsType": "FieldsV1",
                           "fieldsV1": {"f:spec": spec}}
    if subresource:
        out["subresource"] = subresource
    return out


@pytest.mark.parametrize(("refs", "expected"), [
    pytest.param([KSERVE], ControllerRef("LLMInferenceService", "chat", "serving.kserve.io/v1alpha1"), id="kserve"),
    pytest.param([{**KSERVE, "controller": False}], None, id="owner-but-not-controller"),
    pytest.param([{**KSERVE, "controller": None}], None, id="controller-unset"),
    pytest.param([{"apiVersion": "kvplan.io/v1beta1", "kind": "KVPlan", "name": "x", "controller": True}], None,
                 id="a-kvplan-is-not-a-foreign-controller"),
    pytest.param([{"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "controller": False},
                  {"apiVersion": "production-stack.vllm.ai/v1alpha1", "kind": "VLLMRuntime", "name": "r",
                   "controller": True}],
                 ControllerRef("VLLMRuntime", "r", "production-stack.vllm.ai/v1alpha1"), id="second-ref-controls"),
    pytest.param(["junk", {"controller": True}], ControllerRef("?", "?", "?"), id="malformed-still-refused"),
    pytest.param([], None, id="none"),
])
def test_controller_ref(refs: list[Any], expected: ControllerRef | None) -> None:
    assert controller_ref(meta(ownerReferences=refs)) == expected


def test_controller_ref_of_missing_or_bare_objects() -> None:
    assert controller_ref(None) is None and controller_ref({}) is None and controller_ref({"metadata": None}) is None


def test_owner_registry_hands_the_group_to_the_owners_target_only_when_that_target_ran() -> None:
    ref = ControllerRef("LLMInferenceService", "chat", "serving.kserve.io/v1alpha1")
    registry = {("serving.kserve.io", "LLMInferenceService"): "llmisvc"}
    assert ref.group == "serving.kserve.io"
    assert owner_target(ref, frozenset({"deployment", "llmisvc"}), registry) == "llmisvc"
    assert owner_target(ref, frozenset({"deployment"}), registry) is None  # registered, but not among the targets
    assert owner_target(ref, frozenset({"deployment", "llmisvc"}), {}) is None
    core = ControllerRef("ConfigMap", "c", "v1")
    assert core.group == "" and owner_target(core, frozenset({"deployment"})) is None


def test_refusal_names_the_owner_and_the_managers() -> None:
    body = meta(managedFields=[entry("llmisvc-controller", replicas=True), entry(FIELD_MANAGER, replicas=False),
                               entry("kubectl-edit", replicas=False), entry("llmisvc-controller", replicas=False)])
    ref = ControllerRef("LLMInferenceService", "chat", "serving.kserve.io/v1alpha1")
    text = refusal("vllm-a", ref, body)
    assert "Deployment vllm-a" in text and "LLMInferenceService/chat (serving.kserve.io/v1alpha1)" in text
    assert "written by llmisvc-controller, kubectl-edit" in text and FIELD_MANAGER not in text
    assert field_managers(body) == ("llmisvc-controller", "kubectl-edit")


def test_replicas_writers_are_the_managers_holding_spec_replicas() -> None:
    body = meta(managedFields=[entry("helm", replicas=False), entry("aibrix-controller", replicas=True,
                                                                     subresource="scale"),
                               entry(FIELD_MANAGER, replicas=True), {"manager": "odd", "fieldsV1": "not-a-map"}])
    assert replicas_writers(body) == ("aibrix-controller", FIELD_MANAGER)
    assert replicas_writers(None) == ()


@pytest.mark.parametrize(("labels", "annotations", "expected"), [
    pytest.param({"app.kubernetes.io/managed-by": "Helm"},
                 {"meta.helm.sh/release-name": "vllm", "meta.helm.sh/release-namespace": "serving"}, "serving/vllm",
                 id="release-and-namespace"),
    pytest.param({}, {"meta.helm.sh/release-name": "vllm"}, "vllm", id="release-only"),
    pytest.param({"app.kubernetes.io/managed-by": "Helm"}, {}, "?", id="label-only"),
    pytest.param({"app.kubernetes.io/managed-by": "kustomize"}, {}, None, id="not-helm"),
    pytest.param({}, {}, None, id="plain"),
])
def test_helm_release(labels: dict[str, str], annotations: dict[str, str], expected: str | None) -> None:
    assert helm_release(meta(labels=labels, annotations=annotations)) == expected


def scaler(name: str, ref: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"scaleTargetRef": ref}}


def test_scale_targets_keep_only_deployments() -> None:
    listed = {"items": [
        scaler("so-a", {"name": "vllm-a"}),  # KEDA: kind defaults to Deployment
        scaler("pa-b", {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm-b"}),
        scaler("pa-sts", {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "vllm-c"}),
        scaler("pa-other-group", {"apiVersion": "example.com/v1", "kind": "Deployment", "name": "vllm-d"}),
        scaler("no-name", {"kind": "Deployment"}),
        {"metadata": {"name": "no-spec"}},
        "junk",
    ]}
    assert scale_targets("PodAutoscaler", listed) == {"vllm-a": "PodAutoscaler/so-a", "vllm-b": "PodAutoscaler/pa-b"}
    assert scale_targets("ScaledObject", None) == {}  # not installed (404 on the list)


def group(**replica_owner: Any) -> Group:
    return Group.model_validate({"name": "a", "deployment": "vllm-a", "model": "llama-8b", "nodePool": {"gpuCount": 8},
                                 "replicaOwner": replica_owner})


WROTE = meta(managedFields=[entry("dynamo-operator", replicas=True)])


@pytest.mark.parametrize(("spec", "body", "scalers", "by", "reason"), [
    pytest.param({}, WROTE, {}, "kvplan", C.REPLICAS_BY_KVPLAN, id="unlisted-manager-is-ignored"),
    pytest.param({}, WROTE, {"vllm-a": "PodAutoscaler/pa"}, "PodAutoscaler/pa", C.REPLICAS_BY_AUTOSCALER,
                 id="autoscaler"),
    pytest.param({"fieldManagers": ["dynamo-operator"]}, WROTE, {}, "FieldManager/dynamo-operator",
                 C.REPLICAS_BY_FIELD_MANAGER, id="listed-manager"),
    pytest.param({"fieldManagers": ["dynamo-operator"]}, meta(managedFields=[entry("dynamo-operator", replicas=False)]),
                 {}, "kvplan", C.REPLICAS_BY_KVPLAN, id="listed-manager-not-holding-replicas"),
    pytest.param({"fieldManagers": ["dynamo-operator"]}, WROTE, {"vllm-a": "ScaledObject/so"}, "ScaledObject/so",
                 C.REPLICAS_BY_AUTOSCALER, id="autoscaler-before-manager"),
    pytest.param({"policy": "External"}, None, {"vllm-a": "ScaledObject/so"}, "External", C.REPLICAS_EXTERNAL,
                 id="external-first"),
    pytest.param({}, WROTE, {"vllm-b": "HorizontalPodAutoscaler/b"}, "kvplan", C.REPLICAS_BY_KVPLAN,
                 id="autoscaler-of-another-deployment"),
])
def test_replica_owner(spec: dict[str, Any], body: dict[str, Any] | None, scalers: dict[str, str], by: str,
                       reason: str) -> None:
    owner = replica_owner(group(**spec), body, scalers)
    assert (owner.by, owner.reason, owner.kvplan) == (by, reason, reason == C.REPLICAS_BY_KVPLAN)
    assert reason in C.REPLICA_REASONS


def container_body(args: list[str]) -> dict[str, Any]:
    return {"spec": {"template": {"spec": {"containers": [{"name": "vllm", "args": args}]}}}}


@pytest.mark.parametrize(("args", "expected"), [
    pytest.param(["--model", "m", "-tp", "2"], 1, id="no-dp"),
    pytest.param(["--data-parallel-size", "4"], 4, id="dp-alone-is-local"),
    pytest.param(["--data-parallel-size", "8", "--data-parallel-size-local", "2"], 2, id="local-wins"),
    pytest.param(["-dp", "8", "-dpl", "4", "-dpp", "13345"], 4, id="short-names"),
    pytest.param(["--data_parallel_size_local=3"], 3, id="underscores-and-equals"),
    pytest.param(["--data-parallel-size", "4", "--data-parallel-rank", "2"], 1, id="external-lb-rank"),
    pytest.param(["--data-parallel-size-local", "2", "--data-parallel-size-local", "4"], 4, id="last-wins"),
    pytest.param(["--data-parallel-size-local", "$DP"], None, id="runtime-value"),

    pytest.param(["--data-parallel-size-local", "0"], None, id="zero-local-engines"),
])
def test_engines_per_pod(args: list[str], expected: int | None) -> None:
    assert read_dp_local(container_body(args), "vllm") == expected


@pytest.mark.parametrize(("script", "expected"), [
    pytest.param("vllm serve m --data-parallel-size-local 2 $EXTRA", None, id="runtime-word-after-dp"),
    pytest.param("vllm serve m -tp 2 $EXTRA", 1, id="runtime-word-without-dp"),
    pytest.param("vllm serve m --data-parallel-size-local 2", 2, id="script"),
])
def test_engines_per_pod_in_a_shell_script(script: str, expected: int | None) -> None:
    body = {"spec": {"template": {"spec": {"containers": [{"name": "vllm", "command": ["sh", "-c", script]}]}}}}
    assert read_dp_local(body, "vllm") == expected


def test_engines_per_pod_of_a_missing_deployment_is_one() -> None:
    assert read_dp_local(None, "vllm") == 1


@pytest.mark.parametrize(("engines", "dp", "per_engine", "gpus", "expected"), [
    pytest.param(4, 1, 2, 8, 4, id="no-dp-unchanged"),
    pytest.param(4, 2, 2, 8, 2, id="exact"),
    pytest.param(3, 2, 2, 8, 2, id="rounded-up-when-it-fits"),
    pytest.param(3, 2, 2, 6, 1, id="rounded-down-when-up-exceeds-the-pool"),
    pytest.param(0, 4, 1, 8, 0, id="idle"),
])
def test_pods_from_engines(engines: int, dp: int, per_engine: int, gpus: int, expected: int) -> None:
    got = pods(engines, dp, per_engine, gpus)
    assert got == expected and got * dp * per_engine <= max(gpus, engines * per_engine)


def test_pods_note_only_when_the_engines_differ() -> None:
    assert pods_note("a", 4, 2, 2) is None and pods_note("a", 4, 1, 4) is None
    note = pods_note("a", 3, 2, 2)
    assert note is not None and "3 engine(s) planned" in note and "run 4" in note


@pytest.mark.parametrize(("replica_owner", "path"), [
    pytest.param({"policy": "Sometimes"}, "spec.groups[0].replicaOwner.policy", id="unknown-policy"),
    pytest.param({"fieldManagers": [""]}, "spec.groups[0].replicaOwner.fieldManagers[0]", id="empty-manager"),
    pytest.param({"fieldManagers": ["x" * 129]}, "spec.groups[0].replicaOwner.fieldManagers[0]", id="long-manager"),
    pytest.param({"fieldManagers": [f"m{i}" for i in range(17)]}, "spec.groups[0].replicaOwner.fieldManagers",
                 id="too-many-managers"),
    pytest.param({"owner": "me"}, "spec.groups[0].replicaOwner.owner", id="unknown-field"),
])
def test_bad_replica_owner_names_the_field(replica_owner: dict[str, Any], path: str) -> None:
    spec = copy.deepcopy(SPEC)
    spec["groups"][0]["replicaOwner"] = replica_owner
    with pytest.raises(InvalidSpec) as info:
        parse_spec(spec)
    assert path in [p for p, _ in info.value.errors], info.value.errors


class _ApiError(Exception):
    """What the kubernetes client raises for an HTTP error (``status``, ``body``)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status, self.body = status, None


class _Lists:
    """The two client APIs ``Kube.autoscaled_deployments`` calls: HPAs, and custom objects per plural (a dict, or
    an HTTP status to fail with)."""

    def __init__(self, hpas: list[tuple[str, str, str]], custom: dict[str, dict[str, Any] | int]) -> None:
        self.hpas, self.custom = hpas, custom
        self.asked: list[str] = []

    def list_namespaced_horizontal_pod_autoscaler(self, namespace: str, **_: Any) -> Any:
        from types import SimpleNamespace as NS

        return NS(items=[NS(metadata=NS(name=name), spec=NS(scale_target_ref=NS(kind=kind, name=target)))
                         for name, kind, target in self.hpas])

    def list_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                      **_: Any) -> dict[str, Any]:
        self.asked.append(f"{group}/{version}/{plural}")
        answer = self.custom[plural]
        if isinstance(answer, int):
            raise _ApiError(answer)
        return answer


def kube_over(lists: _Lists) -> Any:
    from kvplan_operator.kube import Kube

    kube = Kube.__new__(Kube)  # no client: only the two list APIs are used
    kube.autoscaling, kube.custom, kube.timeout_s = lists, lists, 1.0
    return kube


def test_autoscaled_deployments_lists_hpas_scaledobjects_and_podautoscalers() -> None:
    lists = _Lists([("hpa-a", "Deployment", "vllm-a"), ("hpa-sts", "StatefulSet", "x")], {
        "scaledobjects": 404, "podautoscalers": {"items": [scaler("kpa-b", {"kind": "Deployment", "name": "vllm-b"})]}})
    assert kube_over(lists).autoscaled_deployments("ns") == {"vllm-a": "HorizontalPodAutoscaler/hpa-a",
                                                             "vllm-b": "PodAutoscaler/kpa-b"}
    assert lists.asked == ["keda.sh/v1alpha1/scaledobjects", "autoscaling.aibrix.ai/v1alpha1/podautoscalers"]


@pytest.mark.parametrize(("status", "kind"), [pytest.param(403, "Forbidden", id="403"),
                                              pytest.param(500, "InternalError", id="500")])
def test_a_scaler_list_failing_otherwise_than_404_is_an_error(status: int, kind: str) -> None:
    from kvplan_operator.kube import KubeError

    lists = _Lists([], {"scaledobjects": {"items": []}, "podautoscalers": status})
    with pytest.raises(KubeError) as info:
        kube_over(lists).autoscaled_deployments("ns")
    assert (info.value.call, info.value.kind, info.value.status) == ("list PodAutoscalers", kind, status)
