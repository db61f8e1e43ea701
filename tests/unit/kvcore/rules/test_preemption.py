"""The price of a preemption from the engine model (kvcore.rules.preemption): the per-request harm is recompute plus the
stall converted by the step time, computed from the outcome arrays by hand; the operating batch is the memory's or
max_num_seqs; a replay without memory pressure prices nothing; under pressure the price is bounded by what a
preemption can physically throw away, the hazard times the generated tokens gives back the preemptions, and the
engine's rho grows as memory shrinks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvcore.errors import InputError
from kvcore.rules.classes import KnobClass, replay
from kvcore.rules.preemption import (
    class_prices,
    context_tokens,
    harm_tokens,
    operating_batch,
    price_preemptions,
    token_interval_s,
)
from kvcore.sim import SimGroup
from kvcore.sim.engine import EngineConfig, simulate_engine
from kvcore.sim.engine.jobs import freeze_outcomes, new_outcomes


def group(kv: int) -> SimGroup:
    return SimGroup(name="g", replicas=1, kv_capacity_tokens=kv, step_time_base_s=0.03, step_time_per_seq_s=0.0004,
                    prefill_tokens_per_s=8000)


def classes(traces_dir: Path) -> list[KnobClass]:
    data = np.loadtxt(traces_dir / "azure2023_conv.csv", delimiter=",", skiprows=1)
    inp, out = data[:3000, 1], data[:3000, 2]
    short = inp <= np.median(inp)
    return [KnobClass.build("short", 2.0, inp[short], out[short], 0, 1.0),
            KnobClass.build("long", 2.0, inp[~short], out[~short], 0, 1.0)]


def test_harm_by_hand() -> None:
    raw = new_outcomes(3, 1)
    raw["preemptions"] = [0, 2, 1]
    raw["recomputed"] = [0, 500, 40]
    raw["max_gap_ns"] = [300_000_000, 2_000_000_000, 500_000_000]
    h = harm_tokens(freeze_outcomes(raw), 0.05)
    assert h.tolist() == pytest.approx([0.0, 500 + 2.0 / 0.05, 40 + 0.5 / 0.05])
    with pytest.raises(InputError, match="t_tok"):
        harm_tokens(freeze_outcomes(raw), 0.0)


@pytest.mark.parametrize(("kv", "ctx", "expected"), [
    (1_000_000, 1000.0, 256.0), (16_000, 500.0, (1000 - 1) * 16 / 500),
], ids=["seqs-bind", "memory-binds"])
def test_operating_batch(kv: int, ctx: float, expected: float) -> None:
    g = group(kv)
    assert operating_batch(g, EngineConfig(), ctx) == pytest.approx(expected)
    assert token_interval_s(g, EngineConfig(), ctx) == pytest.approx(0.03 + 0.0004 * expected)


def test_no_pressure_prices_nothing(traces_dir: Path) -> None:
    cls = classes(traces_dir)
    g = group(5_000_000)
    wl, pol = replay(g, cls, requests=400, rng=np.random.default_rng(0))
    res = simulate_engine(wl, [g], pol, rng=np.random.default_rng(0), keep_requests=True)
    price = price_preemptions(wl, res, 0.05)
    assert res.preemptions == 0
    assert (price.preemptions, price.price_tokens, price.hazard_per_token, price.rho) == (0, 0.0, 0.0, 0.0)
    assert price.generated_tokens == pytest.approx(float(wl.output_tokens.sum()))


def _priced(traces_dir: Path, kv: int) -> tuple[float, float, int, float, float, float]:
    cls = classes(traces_dir)
    g = group(kv)
    wl, pol = replay(g, cls, requests=1200, rng=np.random.default_rng(1))
    res = simulate_engine(wl, [g], pol, rng=np.random.default_rng(0), keep_requests=True)
    t = token_interval_s(g, EngineConfig(), context_tokens(wl.input_tokens, wl.output_tokens))
    p = price_preemptions(wl, res, t)
    biggest = float((wl.input_tokens + wl.output_tokens).max())
    assert p.preemptions == res.preemptions
    assert p.hazard_per_token * p.generated_tokens == pytest.approx(res.preemptions)
    by_class = class_prices(wl, res, t, [c.name for c in cls])
    assert sum(c.preemptions for c in by_class.values()) == res.preemptions
    return p.rho, p.recompute_tokens, p.preemptions, biggest, p.stall_s, t


def test_pressure_prices_within_physical_bounds(traces_dir: Path) -> None:
    rho_tight, recompute, n, biggest, stall, t = _priced(traces_dir, 30_000)
    rho_loose = _priced(traces_dir, 60_000)[0]
    assert n > 0 and rho_tight > 0
    assert 0 < recompute <= biggest  # a preemption recomputes at most the longest context
    assert stall >= t  # the stall of a preempted request spans at least one step
    assert rho_tight > rho_loose  # less memory, more preemptions per token, a higher price


def test_class_names_must_match(traces_dir: Path) -> None:
    cls = classes(traces_dir)
    g = group(5_000_000)
    wl, pol = replay(g, cls, requests=50, rng=np.random.default_rng(0))
    res = simulate_engine(wl, [g], pol, rng=np.random.default_rng(0), keep_requests=True)
    with pytest.raises(InputError, match="classes"):
        class_prices(wl, res, 0.05, ["only-one"])
    with pytest.raises(InputError, match="keep_requests"):
        price_preemptions(wl, simulate_engine(wl, [g], pol, rng=np.random.default_rng(0)), 0.05)
