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
