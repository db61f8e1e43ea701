"""The knob rule (kvcore.rules.knobs): stock vLLM's --watermark, --max-num-seqs and --scheduling-policy priority
chosen by replaying recent history through the vLLM engine model. Without memory pressure it keeps stock values;
under pressure its choice lowers rho-priced recompute on a *fresh* replay (another seed) without costing more than
the allowed latency; priorities appear only when cost ratios differ; no candidate it calls eligible leaves more
requests outside the latency targets than stock vLLM; old engines get no watermark; bad input names the field; the
operator's entry point works on a planned instance."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from kvcore.errors import InputError
from kvcore.rules.classes import KnobClass, replay
from kvcore.rules.knobs import choose_knobs, knobs_for_plan
from kvcore.sim import SimGroup
from kvcore.sim.engine import EngineConfig, simulate_engine


def classes(traces_dir: Path, rho: tuple[float, float]) -> list[KnobClass]:
    data = np.loadtxt(traces_dir / "azure2023_conv.csv", delimiter=",", skiprows=1)
    inp, out = data[:4000, 1], data[:4000, 2]
    short = inp <= np.median(inp)
    return [KnobClass.build("short", 2.0, inp[short], out[short], 400, rho[0]),
            KnobClass.build("long", 2.0, inp[~short], out[~short], 400, rho[1])]


OFF = {"ttft_slo_s": math.inf, "tpot_slo_s": math.inf}
"""The latency targets off (a test of the cost side)."""


def group(kv: int) -> SimGroup:
    return SimGroup(name="g", replicas=2, kv_capacity_tokens=kv, step_time_base_s=0.03, step_time_per_seq_s=0.0004,
                    prefill_tokens_per_s=8000)


def test_no_memory_pressure_keeps_stock(traces_dir: Path) -> None:
    choice = choose_knobs(group(2_000_000), classes(traces_dir, (10.0, 10.0)), requests=600)
    assert (choice.max_num_seqs, choice.watermark, choice.scheduling_policy) == (256, 0.0, "fcfs")
    assert all(m.preemptions == 0 for m in choice.candidates)
    assert not any(m.policy == "priority" for m in choice.candidates)  # equal rho: no priorities tried


@pytest.mark.slow
def test_choice_holds_on_a_fresh_replay(traces_dir: Path) -> None:
    cls = classes(traces_dir, (10.0, 2.0))
    g = group(40_000)
    choice = choose_knobs(g, cls, requests=1500, seed=1)
    assert (choice.watermark, choice.max_num_seqs, choice.scheduling_policy) != (0.0, 256, "fcfs"), choice.reason
    assert any(m.policy == "priority" for m in choice.candidates)
    workload, policy = replay(g, cls, requests=1500, rng=np.random.default_rng(99))
    stock = simulate_engine(workload, [g], policy, rng=np.random.default_rng(0), engine=EngineConfig())
    tuned = simulate_engine(workload, [g], policy, rng=np.random.default_rng(0),
                            engine=choice.engine_config(EngineConfig(), ["short", "long"]))
    assert stock.preemptions > 0
    assert tuned.preemptions < stock.preemptions / 2
    assert tuned.e2e.p99 is not None and stock.e2e.p99 is not None
    assert tuned.e2e.p99 <= 1.05 * stock.e2e.p99


def test_old_engine_gets_no_watermark(traces_dir: Path) -> None:
    choice = choose_knobs(group(40_000), classes(traces_dir, (10.0, 2.0)), engine_version="0.32.1", requests=400)
    assert choice.watermark is None and "needs >= 0.33" in choice.reason
    assert {m.watermark for m in choice.candidates} == {0.0}


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"inputs": [], "outputs": []}, "knobs.classes[c].inputs"),
    ({"rho": 0.0}, "knobs.classes[c].rho"),
    ({"rate_rps": -1.0}, "knobs.classes[c].rate_rps"),
    ({"weights": [1.0, -1.0]}, "knobs.classes[c].weights"),
], ids=["no-samples", "rho-zero", "negative-rate", "bad-weights"])
def test_bad_class_names_the_field(kwargs: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"name": "c", "rate_rps": 1.0, "inputs": [10, 20], "outputs": [5, 6],
                               "reserve_tokens": 10.0, "rho": 2.0}
    args.update(kwargs)
    with pytest.raises(InputError) as err:
        KnobClass.build(**args)  # type: ignore[arg-type]
    assert err.value.field == field


def test_bad_version() -> None:
    with pytest.raises(InputError, match="engine_version"):
        choose_knobs(group(40_000), [KnobClass.build("c", 1.0, [10], [5], 0, 2.0)], engine_version="latest")


def test_knobs_for_plan() -> None:
    from kvcore.planner import plan
    from kvcore.planner.synthetic import generate

    inst = generate(classes=2, configs=2, samples=300, seed=4)
    p = plan(inst)
    choices = knobs_for_plan(p, inst, requests=300)
    served = {g.name for g in p.groups if g.replicas > 0 and g.tp > 0 and g.arrival_rate > 0}
    assert set(choices) == served and served
    for name, choice in choices.items():
        assert choice.group == name and choice.candidates and 8 <= choice.max_num_seqs <= 256


@pytest.mark.slow
def test_knobs_in_force_are_kept_inside_the_knee(traces_dir: Path) -> None:
    """Hysteresis: knobs in force that are eligible and within 10 % of the best reduction are kept (no restart for
    a replay's noise); knobs outside the knee (stock vLLM under pressure, or knobs that cost latency) are replaced
    by the rule's own choice. The world is past saturation (P99 e2e near a minute), where every candidate misses the
    latency targets, so they are off here: this tests the cost side."""
    cls, g = classes(traces_dir, (10.0, 2.0)), group(40_000)
    free = choose_knobs(g, cls, requests=800, seed=1, **OFF, search="full")  # every candidate measured
    assert choose_knobs(g, cls, requests=800, seed=1, **OFF).model_dump(exclude={"reason", "candidates", "work"}) == \
        free.model_dump(exclude={"reason", "candidates", "work"})
    chosen = (free.watermark, free.max_num_seqs, free.scheduling_policy)
    stock = next(m for m in free.candidates if (m.watermark, m.max_num_seqs, m.policy) == (0.0, 256, "fcfs"))
    best = min(m.priced_recompute for m in free.candidates if m.eligible)
    enough = best + 0.1 * (stock.priced_recompute - best)
    inside = [m for m in free.candidates if m.eligible and m.priced_recompute <= enough
              and (m.watermark, m.max_num_seqs, m.policy) != chosen]
    assert inside and stock.priced_recompute > enough, free.candidates  # the case this test needs
    keep = (inside[-1].watermark, inside[-1].max_num_seqs, inside[-1].policy)
    for search in ("fast", "full"):
        kept = choose_knobs(g, cls, requests=800, seed=1, **OFF, current=keep, search=search)
        assert (kept.watermark, kept.max_num_seqs, kept.scheduling_policy) == keep
        assert kept.reason.startswith("knobs in force kept")
    assert kept.candidates == free.candidates
    replaced = choose_knobs(g, cls, requests=800, seed=1, **OFF, current=(0.0, 256, "fcfs"))
    assert (replaced.watermark, replaced.max_num_seqs, replaced.scheduling_policy) == chosen
    outside = next(m for m in free.candidates if not m.eligible)
    moved = choose_knobs(g, cls, requests=800, seed=1, **OFF, current=(outside.watermark, outside.max_num_seqs,
                                                                outside.policy))
    assert (moved.watermark, moved.max_num_seqs, moved.scheduling_policy) == chosen
    odd = (chosen[0] or 0.0, 77, chosen[2])  # not among the rule's own max_num_seqs candidates: measured as one more
    extra = choose_knobs(g, cls, requests=800, seed=1, **OFF, current=odd, search="full")
    assert len(extra.candidates) == len(free.candidates) + 1
    assert [(m.watermark, m.max_num_seqs, m.policy) for m in extra.candidates][-1] == odd


def test_knobs_put_no_request_more_outside_the_latency_targets(traces_dir: Path) -> None:
    """With the latency targets off (infinite), the rule's choice on this pressed group leaves more requests outside
    TTFT 2 s / TPOT 0.1 s than stock vLLM (its 1% goodput tolerance spends them); with the targets on, every
    candidate it calls eligible leaves no more than stock does, its choice is another one, and its reason names the
    targets."""
    from knob_search_world import classes as gpt4_classes

    cls, g = gpt4_classes(traces_dir, (10.0, 2.0), 0.7), group(12_000)
    off = choose_knobs(g, cls, requests=400, seed=3, ttft_slo_s=math.inf, tpot_slo_s=math.inf, search="full")
    on = choose_knobs(g, cls, requests=400, seed=3, search="full")
    by_knobs = {(m.watermark, m.max_num_seqs, m.policy): m for m in on.candidates}
    stock = by_knobs[(0.0, 256, "fcfs")]
    assert stock.slo_violations > 0
    assert by_knobs[(off.watermark, off.max_num_seqs, off.scheduling_policy)].slo_violations > stock.slo_violations
    assert all(m.slo_violations <= stock.slo_violations for m in on.candidates if m.eligible)
    assert (on.watermark, on.max_num_seqs, on.scheduling_policy) != (off.watermark, off.max_num_seqs,
                                                                       off.scheduling_policy)
    assert "SLO misses (TTFT 2 s, TPOT 0.1 s)" in on.reason
    assert all(m.slo_violations == 0 for m in off.candidates)  # no targets: no request is outside them


@pytest.mark.parametrize("field", ["ttft_slo_s", "tpot_slo_s"])
def test_a_latency_target_not_above_zero_names_the_field(field: str) -> None:
    with pytest.raises(InputError) as err:
        choose_knobs(group(40_000), [KnobClass.build("c", 1.0, [10], [5], 0, 2.0)],
                     **{field: 0.0})  # type: ignore[arg-type]
    assert err.value.field == f"knobs.{field}"
