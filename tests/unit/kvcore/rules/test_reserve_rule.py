"""Reservations that pay (kvcore.rules.reserve): without memory pressure the rule reserves nothing; under pressure
what it keeps beats y = 0 by the margin on every replay and holds on a *fresh* replay (another seed: fewer
preemptions, goodput no lower than 5% below stock's); every class it reserves for pays for itself; re-pricing at
another rho reuses the replays; the engine's rho is 0 without pressure; the operator's entry works on a planned
instance; bad input names the field."""

from __future__ import annotations

from pathlib import Path
import numpy as np
import pytest
from kvcore.errors import InputError
from kvcore.rules.classes import KnobClass, replay
from kvcore.rules.replay_set import ReplaySet
from kvcore.rules.reserve import MIN_GAIN, choose_reserves, class_rho, engine_rho, reserves_for_plan
from kvcore.sim import SimGroup, SimPolicy
from kvcore.sim.engine import EngineConfig, simulate_engine
from reserve_rule_world import (NO_TARGETS, classes, group)  # noqa: F401 - fixtures are found by name


@pytest.mark.slow
def test_no_pressure_reserves_nothing(traces_dir: Path) -> None:
    cls = classes(traces_dir)
    rs = ReplaySet(group(3_000_000), cls, requests=500)
    choice = choose_reserves(group(3_000_000), cls, replays=rs, search="full")
    assert choice.reserves == {"short": 0, "long": 0} and set(choice.sources.values()) == {"none"}
    assert "nothing reserved" in choice.reason
    assert engine_rho(rs) == {"short": 0.0, "long": 0.0}
    fast = choose_reserves(group(3_000_000), cls, requests=500)  # nothing to protect: stock's runs only
    assert fast.reserves == choice.reserves and "nothing to protect" in fast.reason
    assert fast.work == 2 * 500 and fast.candidates == ()


@pytest.mark.slow
@pytest.mark.parametrize("search", ["fast", "full"])
def test_pressure_reservation_pays_and_holds_on_a_fresh_replay(traces_dir: Path, search: str) -> None:
    cls = classes(traces_dir)
    g = group(20_000)
    rs = ReplaySet(g, cls, requests=1500, seed=3, **NO_TARGETS)
    choice = choose_reserves(g, cls, replays=rs, search=search)
    ys = tuple(choice.reserves[c.name] for c in cls)
    assert any(ys), choice.reason
    rho = class_rho(cls)
    zero = rs.costs((0, 0), rho)
    assert np.all(rs.costs(ys, rho) <= zero - MIN_GAIN)  # pays on every replay, by the margin
    for i in range(len(ys)):  # every class it reserves for pays for itself
        if ys[i]:
            assert rs.costs(ys[:i] + (0,) + ys[i + 1:], rho).mean() > rs.costs(ys, rho).mean()
    wl, _ = replay(g, cls, requests=1500, rng=np.random.default_rng(77))
    stock = simulate_engine(wl, [g], SimPolicy.from_arrays([0.0, 0.0], np.ones((2, 1))), rng=np.random.default_rng(0))
    gated = simulate_engine(wl, [g], SimPolicy.from_arrays([float(y) for y in ys], np.ones((2, 1))),
                            rng=np.random.default_rng(0), engine=EngineConfig(admission="gate"))
    assert stock.preemptions > 0
    assert gated.preemptions < stock.preemptions / 2
    assert gated.goodput_rps >= 0.95 * stock.goodput_rps


@pytest.mark.slow
def test_repricing_reuses_the_replays(traces_dir: Path) -> None:
    g = group(20_000)
    rs = ReplaySet(g, classes(traces_dir), requests=600)
    first = choose_reserves(g, classes(traces_dir), replays=rs)
    n = rs.simulated
    again = choose_reserves(g, classes(traces_dir), replays=rs)
    assert rs.simulated == n and again.reserves == first.reserves
    choose_reserves(g, classes(traces_dir, (1.0, 100.0)), replays=rs, engine_priced={"short"})
    assert rs.simulated >= n
    assert class_rho(classes(traces_dir, (1.0, 100.0)), {"short"}).tolist() == [1.0, 100.0]


def test_bad_input_names_the_field(traces_dir: Path) -> None:
    with pytest.raises(InputError, match="reserves.classes"):
        ReplaySet(group(20_000), [], requests=10)
    with pytest.raises(InputError, match="reserves.replays"):
        ReplaySet(group(20_000), classes(traces_dir), requests=10, replays=0)
    rs = ReplaySet(group(20_000), classes(traces_dir), requests=50)
    with pytest.raises(InputError, match="reserves.classes"):
        choose_reserves(group(20_000), classes(traces_dir)[:1], replays=rs)


def test_reserves_for_plan() -> None:
    from kvcore.planner import plan
    from kvcore.planner.synthetic import generate

    inst = generate(classes=2, configs=2, samples=300, seed=4)
    p = plan(inst)
    choices = reserves_for_plan(p, inst, requests=300)
    served = {g.name for g in p.groups if g.replicas > 0 and g.tp > 0 and g.arrival_rate > 0}
    assert set(choices) == served and served
    for name, choice in choices.items():
        assert choice.group == name and choice.work > 0 and choice.token_interval_s > 0
        assert set(choice.reserves) <= {c.name for c in inst.classes}
        assert all(y >= 0 for y in choice.reserves.values())
    with pytest.raises(InputError, match="slo_price"):
        reserves_for_plan(p, inst, slo_price="magic")
    for name in ("ttft_slo_s", "tpot_slo_s"):
        with pytest.raises(InputError) as err:
            reserves_for_plan(p, inst, **{name: 0.0})  # type: ignore[arg-type]
        assert err.value.field == f"reserves.{name}"


@pytest.mark.slow
def test_reservations_that_lose_requests_within_slo_are_not_kept(traces_dir: Path) -> None:
    """The same pressed world with the latency targets on (TTFT 2 s, TPOT 0.1 s): what pays with the targets off
    leaves more requests outside them than y = 0 on some replay, so the rule reserves nothing and says why."""
    cls, g = classes(traces_dir), group(20_000)
    off = choose_reserves(g, cls, replays=ReplaySet(g, cls, requests=1500, seed=3, **NO_TARGETS), search="full")
    ys = tuple(off.reserves[c.name] for c in cls)
    assert any(ys), off.reason
    rs = ReplaySet(g, cls, requests=1500, seed=3)
    zero = (0,) * len(cls)
    assert any(rs.measure_on(ys, k).good_share < rs.measure_on(zero, k).good_share for k in range(len(rs.runs)))
    on = choose_reserves(g, cls, replays=rs, search="full")
    assert on.reserves == {c.name: 0 for c in cls}
    assert "left more requests outside TTFT 2 s / TPOT 0.1 s than y = 0" in on.reason
