"""The planner's profiles come from the measured step-time model (issue 22, part 6): the line t0 + t1*B the planner,
the engine model and the rules take, against the model's own step times; the per-GPU batch default; the prefill
rate; layouts vLLM would refuse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kvcore.cli.instance_file import instance_from_mapping
from kvcore.errors import InputError
from kvcore.planner.instance import Instance
from kvcore.profiles import GPUS, MODELS, linear_step, roofline
from kvcore.profiles.models import CONFIGS
from kvcore.profiles.steptime import kv_tokens, layout, prefill_time, step_time
from kvcore.sim import SimGroup

DENSE = sorted(m for m, a in MODELS.items() if not a.moe)


def _grid(batch: int) -> list[int]:
    return sorted({1, *(2**i for i in range(1, 12) if 2**i < batch), batch})


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_the_line_is_exact_at_the_operating_batch_and_close_below_it(gpu: str) -> None:
    # Dense models: the line t0 + t1*B meets the measured model at B* and stays within 35% of it at 1, 2, 4, ... B*
    # (the model is flat to ~64 sequences, then rises, and where max_num_seqs is 1024 it steps up past vLLM's
    # 512-token CUDA-graph limit, so no line can be exact everywhere).
    checked = 0
    for model in DENSE:
        for tp, pp in ((1, 1), (2, 1), (4, 1), (8, 1), (4, 2)):
            p = roofline(gpu, model, tp, pp)
            if not p.feasible:
                continue
            lay = layout(GPUS[gpu], MODELS[model], tp, pp)
            b = int(p.operating_batch)
            assert p.step_time(b) == pytest.approx(step_time(lay, 1024.0, batch=b), rel=1e-9)
            assert p.throughput_tokens_s == pytest.approx(b / step_time(lay, 1024.0, batch=b), rel=1e-9)
            worst = max(abs(p.step_time(x) / step_time(lay, 1024.0, batch=x) - 1) for x in _grid(b))
            assert worst < 0.35, (model, tp, pp, worst)
            assert p.step_t0_s > 0 and p.step_t1_s >= 0
            checked += 1
    assert checked >= 10


def test_linear_step_recovers_a_line_and_keeps_its_signs() -> None:
    assert linear_step(lambda b: 0.03 + 2e-4 * b, 256) == pytest.approx((0.03, 2e-4), rel=1e-9)
    t0, t1 = linear_step(lambda b: 0.05, 64)            # flat: no slope
    assert (t0, t1) == pytest.approx((0.05, 0.0))
    t0, t1 = linear_step(lambda b: 0.05 - 1e-5 * b, 64)  # falling (not a step time): slope clamped at 0
    assert t1 == 0.0 and t0 == pytest.approx(0.05 - 64e-5)
    t0, t1 = linear_step(lambda b: 1e-3 * b, 8)         # through the origin: the intercept stays positive
    assert t0 > 0 and t1 > 0 and t0 + 8 * t1 == pytest.approx(8e-3)


def test_70b_on_a100_matches_the_published_shape() -> None:
    # Public A100-80GB Llama-70B measurements (issue 22): batch-1 decode 31-36 ms at TP4, slope ~0.19 ms per sequence
    # at TP4, and TP4 1.2-1.4x TP8 in decode tokens/s per GPU. At TP8, vLLM itself measured 16.4 ms at batch 1
    # (kvcore/data/profiling/published_vllm_runs.json); issue 22's ~26 ms was composed from vidur's eager kernel
    # and NCCL timings, which vLLM's CUDA graphs and own all-reduce undercut. The old roofline said 23 ms, 12 ms,
    # 0.284 ms and 0.96x. Issue 22's target: the TP4 step within 15% of the measured 31 + 0.19 * B ms over batch 1-64
    # (ctx 1,024).
    tp4, tp8 = roofline("A100-80GB", "llama-70b", 4, 1), roofline("A100-80GB", "llama-70b", 8, 1)
    assert 31e-3 * 0.85 <= tp4.step_time(1) <= 36e-3 * 1.15
    assert 16.4e-3 * 0.8 <= tp8.step_time(1) <= 16.4e-3 * 1.2
    lay = layout(GPUS["A100-80GB"], MODELS["llama-70b"], 4, 1)
    for b in (1, 8, 16, 32, 48, 64):
        assert step_time(lay, 1024.0, batch=b) == pytest.approx((31 + 0.19 * b) * 1e-3, rel=0.15), b
    ratio = (tp4.throughput_tokens_s / 4) / (tp8.throughput_tokens_s / 8)
    assert 1.15 <= ratio <= 1.45


def test_operating_batch_is_the_gpus_vllm_default() -> None:
    # vLLM 0.33: max_num_seqs 256 on A100, 1024 on >= 70 GiB non-A100 parts (get_batch_defaults)
    a100, h100 = roofline("A100-80GB", "llama-8b", 1, 1), roofline("H100-SXM", "llama-8b", 1, 1)
    assert a100.max_num_seqs == 256 and a100.operating_batch == 256
    assert h100.max_num_seqs == 1024
    assert h100.operating_batch == min(1024, h100.kv_capacity_tokens / 1024) > 256


def test_prefill_rate_is_the_layouts_own() -> None:
    for tp in (2, 4, 8):
        p = roofline("A100-80GB", "llama-70b", tp, 1)
        lay = layout(GPUS["A100-80GB"], MODELS["llama-70b"], tp, 1)
        assert p.prefill_tokens_s == pytest.approx(2048 / prefill_time(lay, 2048), rel=1e-12)
        assert SimGroup.from_profile("g", 1, p).prefill_tokens_per_s == pytest.approx(p.prefill_tokens_s)
        assert SimGroup.from_profile("g", 1, p, prefill_tokens_per_s=100.0).prefill_tokens_per_s == 100.0
    # more GPUs prefill faster (compute-bound), unlike the old single 4,400 tokens/s
    rates = [roofline("A100-80GB", "llama-70b", tp, 1).prefill_tokens_s for tp in (2, 4, 8)]
    assert rates[0] < rates[1] < rates[2]


def test_capacity_is_the_models() -> None:
    for gpu, model, tp in (("A100-80GB", "llama-70b", 4), ("H100-SXM", "qwen3-32b", 2), ("L40S", "llama-8b", 1)):
        p = roofline(gpu, model, tp, 1)
        assert p.kv_capacity_tokens == kv_tokens(layout(GPUS[gpu], MODELS[model], tp, 1)) > 0


def test_refused_layouts_are_infeasible_with_vllms_reason() -> None:
    p = roofline("A100-80GB", "qwen2.5-7b", 8, 1)   # 28 attention heads
    assert not p.feasible and "28 attention heads" in p.reason and p.kv_capacity_tokens == 0
    p = roofline("A100-80GB", "llama-8b", 1, 64)     # 32 layers
    assert not p.feasible and "layers" in p.reason


EXAMPLES = Path(__file__).resolve().parents[4] / "examples"


def _instance(model: str, tp: int, pp: int = 1, gpu: str = "A100-80GB") -> dict[str, Any]:
    """examples/instance-70b.yaml with its first group serving ``model`` on ``gpu``, allowing TP8 and (tp, pp)."""
    inst: dict[str, Any] = yaml.safe_load((EXAMPLES / "instance-70b.yaml").read_text())
    inst["groups"] = inst["groups"][:1]
    inst["groups"][0].update(model=model, gpu_type=gpu, layouts=[{"tp": 8, "pp": 1}, {"tp": tp, "pp": pp}])
    return inst


def _load(inst: dict[str, Any]) -> Instance:
    return instance_from_mapping(inst, base=EXAMPLES)


@pytest.mark.parametrize(("model", "tp", "pp", "field", "words"), [
    ("llama-70b", 3, 1, "groups[0].layouts[1].tp", "does not divide the 64 attention heads"),
    ("llama-8b", 1, 33, "groups[0].layouts[1].pp", "exceeds the 32 layers"),
])
def test_instance_refuses_a_layout_vllm_would_refuse(model: str, tp: int, pp: int, field: str, words: str) -> None:
    with pytest.raises(InputError, match=words) as err:
        _load(_instance(model, tp, pp))
    assert err.value.field == field


def test_instance_refuses_fp8_weights_on_a_gpu_without_fp8() -> None:
    # the 8B's config.json with fp8 weights, on an A10G (no fp8) and on an H100 (fp8)
    cfg = {**dict(CONFIGS["llama-8b"][1]), "quantization_config": {"quant_method": "fp8"}}
    inst = _instance("my-8b-fp8", 1, gpu="A10G")
    inst["models"] = {"my-8b-fp8": cfg}
    with pytest.raises(InputError, match="fp8 weights need fp8 support") as err:
        _load(inst)
    assert err.value.field == "groups[0].layouts[0].model.weight_dtype"
    inst["groups"][0]["gpu_type"] = "H100-SXM"
    assert _load(inst).groups[0].gpu_type == "H100-SXM"


def test_engine_model_takes_the_measured_curve() -> None:
    # The profile's knots are the model's own step times; the engine's StepTiming interpolates between them, so a
    # decode step at a knot is the model's step, and between knots it lies between its neighbours.
    from kvcore.sim.engine import group_timing

    p = roofline("H200", "mixtral-8x7b", 2, 1)   # MoE: the line is worst here
    lay = layout(GPUS["H200"], MODELS["mixtral-8x7b"], 2, 1)
    timing = group_timing(SimGroup.from_profile("g", 1, p))
    batches = [b for b, _ in p.decode_knots]
    assert batches[0] == 1 and batches[-1] == p.max_num_seqs and int(p.operating_batch) in batches
    for b in (1, 8, 64, 512, p.max_num_seqs):
        assert timing.decode_s(b) == pytest.approx(step_time(lay, 1024.0, batch=b), rel=1e-12)
    mid = timing.decode_s(48)
    assert timing.decode_s(32) < mid < timing.decode_s(64)
    assert abs(mid / step_time(lay, 1024.0, batch=48) - 1) < 0.05      # the curve, not the line
    assert abs(p.step_time(48) / step_time(lay, 1024.0, batch=48) - 1) > 0.1
    # a user's measured line (an override of t0 or t1) replaces the curve
    from kvcore.profiles import ProfileOverride, resolve
    ov = ProfileOverride(gpu_type="H200", model="mixtral-8x7b", tp=2, pp=1, step_t0_s=0.01, step_t1_s=1e-4)
    mine = resolve("H200", "mixtral-8x7b", 2, 1, (ov,))
    assert mine.decode_knots == () and group_timing(SimGroup.from_profile("g", 1, mine)).decode_s(10) == 0.011


@pytest.mark.parametrize(("knots", "where"), [(((2, 0.1), (2, 0.2)), "[1]"), (((0, 0.1),), "[0]"),
                                              (((1, 0.0),), "[0]"), (((1, float("nan")),), "[0]")])
def test_bad_knots_name_the_knot(knots: tuple[tuple[int, float], ...], where: str) -> None:
    from kvcore.sim.engine import StepTiming

    with pytest.raises(InputError) as err:
        StepTiming(0.01, 0.0, 0.0, knots)
    assert err.value.field == "timing.decode_knots" + where


@pytest.mark.parametrize(("gpu", "model", "tp", "pp"), [
    ("A100-80GB", "llama-70b", 4, 1), ("A100-80GB", "llama-70b", 8, 1), ("A100-80GB", "llama-8b", 1, 1),
    ("H100-SXM", "llama-70b", 4, 2)])
def test_context_term_is_the_kv_read_of_one_token(gpu: str, model: str, tp: int, pp: int) -> None:
    # the step's slope in its context, worked out from the architecture: one token's KV bytes, split over the KV-head
    # shards and the pipeline's stages, read at the calibrated share of the GPU's bandwidth
    lay = layout(GPUS[gpu], MODELS[model], tp, pp)
    m = MODELS[model]
    want = m.kv_bytes_per_token / (pp * min(tp, m.kv_heads) * lay.coeff.eta_bw * GPUS[gpu].hbm_bytes_s)
    p = roofline(gpu, model, tp, pp)
    assert p.context_s_per_token == pytest.approx(want, rel=1e-9)
    # the engine model takes it: a decode step at 2,048 tokens of context per sequence is the model's own
    from kvcore.sim.engine import group_timing

    timing = group_timing(SimGroup.from_profile("g", 1, p))
    b = 16
    model_s = step_time(lay, 2048.0, batch=b)
    assert timing.step_ns(b, b, 2048 * b) == pytest.approx(model_s * 1e9, rel=2e-3)   # the curve is exact at knots
    assert timing.step_ns(b, b, 1024 * b) == pytest.approx(step_time(lay, 1024.0, batch=b) * 1e9, rel=1e-6)


def test_context_term_overrides_and_scales_with_the_fit() -> None:
    from kvcore.profiles import ProfileOverride, check_override, resolve
    from kvcore.profiles.online import scaled_override

    base = roofline("A100-80GB", "llama-70b", 4, 1)
    ov = ProfileOverride(gpu_type="A100-80GB", model="llama-70b", tp=4, pp=1, step_t1_s=2e-4, context_s_per_token=1e-8)
    mine = resolve("A100-80GB", "llama-70b", 4, 1, (ov,))
    assert mine.context_s_per_token == 1e-8
    assert SimGroup.from_profile("g", 1, mine).step_time_per_context_token_s == 1e-8
    # an override of the line alone keeps the model's context term (the line holds at the nominal context)
    line = ProfileOverride(gpu_type="A100-80GB", model="llama-70b", tp=4, pp=1, step_t1_s=2e-4)
    assert resolve("A100-80GB", "llama-70b", 4, 1, (line,)).context_s_per_token == base.context_s_per_token
    # a fit scales it as the per-sequence slope it is part of
    assert scaled_override(base, (1.0, 1.5, 1.0)).context_s_per_token == pytest.approx(1.5 * base.context_s_per_token)
    for bad in (-1e-9, 0.01, float("inf")):
        with pytest.raises(InputError) as err:
            check_override(ProfileOverride(gpu_type="A100-80GB", model="llama-70b", tp=4, pp=1,
                                           context_s_per_token=bad), field="profiles[0]")
        assert err.value.field == "profiles[0].context_s_per_token"
