"""A KVPlan group's inline ``modelConfig`` (issue 22): parsed, handed to kvcore as the instance's model, and a bad key
reported at the CR path."""

from __future__ import annotations

import copy

from kvplan_operator.decide.translate import cr_path
from kvplan_operator.spec import parse_spec

from op_targets_world import SPEC  # type: ignore[import-not-found]

CFG = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 40, "hidden_size": 8192,
       "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 128256}


def test_model_config_is_parsed_and_its_errors_map_to_the_cr_path() -> None:
    raw = copy.deepcopy(SPEC)
    raw["groups"][0]["model"] = "my-35b"
    raw["groups"][0]["modelConfig"] = CFG
    raw["groups"][0]["nodePool"]["gpuType"] = "H100-SXM"
    spec = parse_spec(raw)
    assert spec.groups[0].hf_config == CFG and spec.groups[0].node_pool.gpu_type == "H100-SXM"
    assert spec.groups[0].node_pool.selector() == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert cr_path("models.my-35b.num_hidden_layers", spec) == "spec.groups[0].modelConfig.num_hidden_layers"


def test_mi300x_groups_get_the_amd_resource_and_label() -> None:
    from kvplan_operator.targets.deployment import gpu_resource
    raw = copy.deepcopy(SPEC)
    raw["groups"][0]["nodePool"]["gpuType"] = "MI300X"
    spec = parse_spec(raw)
    assert gpu_resource(spec.groups[0]) == "amd.com/gpu"
    assert spec.groups[0].node_pool.selector() == {"amd.com/gpu.product-name": "AMD_Instinct_MI300X"}
    assert gpu_resource(parse_spec(copy.deepcopy(SPEC)).groups[0]) == "nvidia.com/gpu"


# --- modelConfigRef: the config.json in a ConfigMap, read in observe ------------------------------------------------

def _ref_world(configmaps: dict) -> tuple[dict, object]:
    from op_fakes import FakeKube, dep  # type: ignore[import-not-found]

    raw = copy.deepcopy(SPEC)
    raw["groups"][0]["model"] = "my-35b"
    raw["groups"][0]["modelConfigRef"] = {"name": "my-35b-config"}
    kube = FakeKube({"vllm-big": dep("vllm-big"), "vllm-small": dep("vllm-small")}, configmaps=configmaps)
    return raw, kube


def _reconcile(raw: dict, kube) -> tuple[object, list]:
    from kvcore.planner import plan as real_plan
    from kvplan_operator.reconcile import reconcile
    from op_fakes import kvplan  # type: ignore[import-not-found]
    from op_reconcile_world import deps  # type: ignore[import-not-found]

    seen: list = []

    def planner(instance, **kw):
        seen.append(dict(instance.models))
        return real_plan(instance, **kw)

    return reconcile(kvplan(raw, kube), deps(kube, planner=planner)), seen


def test_model_config_ref_is_planned_like_an_inline_config() -> None:
    import json

    raw, kube = _ref_world({"my-35b-config": {"metadata": {"name": "my-35b-config"},
                                              "data": {"config.json": json.dumps(CFG)}}})
    out, seen = _reconcile(raw, kube)
    assert out.ok, out
    assert seen and seen[0] == {"my-35b": CFG}  # the planner got the ConfigMap's shape for the group's model


def test_a_missing_model_config_is_a_named_reason_and_nothing_is_applied() -> None:
    import json

    from kvplan_operator import conditions as C

    for configmaps, words in (({}, "ConfigMap my-35b-config not found"),
                              ({"my-35b-config": {"data": {"other.json": "{}"}}}, "no key 'config.json'")):
        raw, kube = _ref_world(configmaps)
        out, seen = _reconcile(raw, kube)
        assert out.reason == C.MODEL_CONFIG_MISSING and words in out.message, out
        assert "spec.groups[0].modelConfigRef[my-35b-config/config.json]" in out.message
        assert seen == [] and [w for w in kube.writes if w != "status"] == []
    for text in ("not json", json.dumps([1, 2]), "[" * 100_000):
        raw, kube = _ref_world({"my-35b-config": {"data": {"config.json": text}}})
        out, seen = _reconcile(raw, kube)
        assert out.reason == C.INVALID_SPEC and "not a JSON object" in out.message, out
        assert seen == [] and [w for w in kube.writes if w != "status"] == []


def test_a_bad_key_in_a_referenced_config_names_the_configmap() -> None:
    import json

    from kvplan_operator import conditions as C

    raw, kube = _ref_world({"my-35b-config": {"data": {"config.json": json.dumps({**CFG, "num_hidden_layers": 0})}}})
    out, _ = _reconcile(raw, kube)
    assert out.reason == C.INVALID_SPEC, out
    assert "spec.groups[0].modelConfigRef[my-35b-config/config.json].num_hidden_layers" in out.message
    assert [w for w in kube.writes if w != "status"] == []


def test_model_config_and_its_ref_together_are_refused() -> None:
    import pytest

    from kvplan_operator.spec import InvalidSpec

    raw = copy.deepcopy(SPEC)
    raw["groups"][0]["modelConfig"] = CFG
    raw["groups"][0]["modelConfigRef"] = {"name": "x", "key": "config.json"}
    with pytest.raises(InvalidSpec) as err:
        parse_spec(raw)
    assert ("spec.groups[0].modelConfigRef", "give modelConfig or modelConfigRef, not both") in err.value.errors
