"""A GPU the catalogue does not have, given by its datasheet figures: an instance's ``gpu_types`` (the operator's
``nodePool.gpuSpec``) is planned on exactly as a catalogue GPU with the same figures, and its bad values are
refused naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kvcore.cli.instance_file import instance_from_mapping
from kvcore.errors import InputError
from kvcore.planner import plan
from kvcore.planner.instance import Instance
from kvcore.profiles import GPUS, resolve, roofline
from kvcore.profiles.gpus import GpuType
from kvcore.profiles.models import CONFIGS

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"


def _spec(g: GpuType, **change: Any) -> dict[str, Any]:
    """A catalogue GPU's figures as a user would write them (camelCase keys)."""
    out = {"memoryBytes": g.memory_bytes, "hbmBytesPerSecond": g.hbm_bytes_s, "bf16Flops": g.bf16_flops,
           "fp8Flops": g.fp8_flops, "interconnect": g.interconnect, "interconnectBytesPerSecond": g.interconnect_bytes_s,
           "family": g.family, "resource": g.resource, "nodeLabel": g.node_label, "deviceName": g.device_name}
    out.update(change)
    return out


def _instance(gpu: str, specs: dict[str, Any], model: str = "llama-70b") -> dict[str, Any]:
    inst: dict[str, Any] = yaml.safe_load((EXAMPLES / "instance-70b.yaml").read_text())
    inst["groups"] = inst["groups"][:1]
    inst["groups"][0].update(model=model, gpu_type=gpu)
    inst["gpu_types"] = specs
    return inst


def _load(inst: dict[str, Any]) -> Instance:
    return instance_from_mapping(inst, base=EXAMPLES)


@pytest.mark.parametrize("catalogue", ["H100-SXM", "A100-40GB", "MI300X"])
@pytest.mark.parametrize(("model", "tp"), [("llama-70b", 4), ("llama-8b", 1)])
def test_a_user_gpu_with_a_catalogue_gpus_figures_has_its_profile(catalogue: str, model: str, tp: int) -> None:
    mine = resolve("my-gpu", model, tp, 1, gpus={"my-gpu": _spec(GPUS[catalogue])})
    ref = roofline(catalogue, model, tp, 1)
    assert mine.gpu_type == "my-gpu" and mine.feasible == ref.feasible
    for field in ("kv_capacity_tokens", "throughput_tokens_s", "step_t0_s", "step_t1_s", "prefill_tokens_s",
                  "max_num_seqs", "decode_knots"):
        assert getattr(mine, field) == getattr(ref, field), field


def test_more_memory_and_bandwidth_hold_and_serve_more() -> None:
    base = _spec(GPUS["H100-SXM"], deviceName="NVIDIA H100 80GB HBM3")
    small = resolve("g", "llama-70b", 4, 1, gpus={"g": base})
    big = resolve("g2", "llama-70b", 4, 1, gpus={"g2": {**base, "memoryBytes": 2 * base["memoryBytes"],
                                                         "hbmBytesPerSecond": 2 * base["hbmBytesPerSecond"]}})
    assert big.kv_capacity_tokens > 2 * small.kv_capacity_tokens   # the weights' share stays the same
    assert big.step_t0_s < small.step_t0_s
    tiny = resolve("g3", "llama-70b", 4, 1, gpus={"g3": {**base, "memoryBytes": 16e9}})
    assert not tiny.feasible and "weights need" in tiny.reason


def test_vllms_batch_defaults_follow_the_users_gpu() -> None:
    # vLLM 0.33's get_batch_defaults: >= 70 GiB and not an A100 -> 1024 sequences; an A100 by name -> 256
    big = _spec(GPUS["H100-SXM"])
    assert resolve("a", "llama-8b", 1, 1, gpus={"a": {**big, "deviceName": "NVIDIA GH200 96GB HBM3"}}).max_num_seqs == 1024
    assert resolve("b", "llama-8b", 1, 1, gpus={"b": {**big, "deviceName": "NVIDIA A100-SXM4-80GB"}}).max_num_seqs == 256
    assert resolve("c", "llama-8b", 1, 1, gpus={"c": {**big, "memoryBytes": 48e9}}).max_num_seqs == 256


def test_an_instance_on_a_user_gpu_plans() -> None:
    inst = _load(_instance("gh200", {"gh200": _spec(GPUS["H200"], memoryBytes=96e9, hbmBytesPerSecond=4.0e12,
                                                     deviceName="NVIDIA GH200 96GB HBM3")}))
    result = plan(inst)
    (group,) = result.groups
    assert group.name == inst.groups[0].name and group.replicas >= 1
    # the plan's capacity is the user GPU's profile at the chosen layout, not any catalogue GPU's
    prof = resolve("gh200", "llama-70b", group.tp, group.pp, gpus=inst.gpu_types)
    assert group.kv_capacity_tokens <= prof.kv_capacity_tokens * (1 + 1e-9)
    assert all(roofline(name, "llama-70b", group.tp, group.pp).kv_capacity_tokens != prof.kv_capacity_tokens
               for name in GPUS)


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"memoryBytes": 0}, "gpu_types.my-gpu.memoryBytes", "no memory"),
    ({"hbmBytesPerSecond": -1.0}, "gpu_types.my-gpu.hbmBytesPerSecond", ">= 0"),
    ({"bf16Flops": "lots"}, "gpu_types.my-gpu.bf16Flops", "finite number"),
    ({"interconnect": "infiniband"}, "gpu_types.my-gpu.interconnect", "nvlink or pcie or xgmi"),
    ({"family": "b200"}, "gpu_types.my-gpu.family", "a100 or h100"),
    ({"nodeLabel": "no-equals"}, "gpu_types.my-gpu.nodeLabel", "key=value"),
    ({"memoryGB": 80}, "gpu_types.my-gpu.memoryGB", "unknown key"),
    ({"memoryBytes": 1e300}, "gpu_types.my-gpu.memoryBytes", "at most 1e\\+13"),
    ({"memory_bytes": 1e9}, "gpu_types.my-gpu.memory_bytes", "give memoryBytes or memory_bytes, not both"),
    ({"bf16Flops": float("inf")}, "gpu_types.my-gpu.bf16Flops", "finite number"),
])
def test_bad_gpu_figures_name_the_key(change: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(InputError, match=words) as err:
        _load(_instance("my-gpu", {"my-gpu": _spec(GPUS["H100-SXM"], **change)}))
    assert err.value.field == field


def test_snake_case_keys_are_the_same_figures() -> None:
    camel = _spec(GPUS["H100-SXM"])
    snake = {"memory_bytes": camel["memoryBytes"], "hbm_bytes_s": camel["hbmBytesPerSecond"],
             "bf16_flops": camel["bf16Flops"], "fp8_flops": camel["fp8Flops"], "interconnect": camel["interconnect"],
             "interconnect_bytes_s": camel["interconnectBytesPerSecond"], "family": camel["family"],
             "device_name": camel["deviceName"]}
    a = resolve("a", "llama-70b", 4, 1, gpus={"a": camel})
    b = resolve("b", "llama-70b", 4, 1, gpus={"b": snake})
    assert (a.kv_capacity_tokens, a.step_t0_s, a.step_t1_s) == (b.kv_capacity_tokens, b.step_t0_s, b.step_t1_s)


def test_a_missing_figure_is_named() -> None:
    spec = _spec(GPUS["H100-SXM"])
    del spec["bf16Flops"]
    with pytest.raises(InputError, match="required") as err:
        _load(_instance("my-gpu", {"my-gpu": spec}))
    assert err.value.field == "gpu_types.my-gpu.bf16Flops"


def test_a_catalogue_name_cannot_be_redefined_and_an_unknown_name_lists_the_users() -> None:
    with pytest.raises(InputError, match="catalogue GPU type") as err:
        _load(_instance("H100-SXM", {"H100-SXM": _spec(GPUS["H100-SXM"], memoryBytes=1e9)}))
    assert err.value.field == "gpu_types.H100-SXM"
    with pytest.raises(InputError, match="unknown GPU type 'my-gpu2'") as err2:
        _load(_instance("my-gpu2", {"my-gpu": _spec(GPUS["H100-SXM"])}))
    assert err2.value.field == "groups[0].gpu_type" and "my-gpu" in (err2.value.hint or "")


def test_fp8_on_a_user_gpu_without_fp8_is_refused() -> None:
    cfg = {**dict(CONFIGS["llama-8b"][1]), "quantization_config": {"quant_method": "fp8"}}
    inst = _instance("old-gpu", {"old-gpu": _spec(GPUS["A100-80GB"], fp8Flops=0.0)}, model="my-8b-fp8")
    inst["models"] = {"my-8b-fp8": cfg}
    with pytest.raises(InputError, match="fp8 weights need fp8 support") as err:
        _load(inst)
    assert err.value.field == "groups[0].layouts[0].model.weight_dtype"
    inst["gpu_types"]["old-gpu"]["fp8Flops"] = 1.0e15
    assert _load(inst).groups[0].gpu_type == "old-gpu"
