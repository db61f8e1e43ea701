"""The simulator's model on cases whose answer is known, run through both simulators.

Covers: a single request's TTFT, end-to-end latency and waste computed by hand; a two-request preemption by
recompute traced step by step (who is preempted, where it re-queues, what re-admission needs and costs);
join-shortest-queue placement; the cost terms; properties that must hold on any load (reservations covering every
output never preempt; capacity for everything at once never preempts nor queues beyond one step; more capacity in
that regime changes nothing); conservation under preemption storms; determinism under a seed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from kvcore.sim import SimConfig, SimGroup, SimPolicy, SimResult, Workload, simulate, simulate_reference

SIMULATORS: list[Callable[..., SimResult]] = [simulate, simulate_reference]
SIM_IDS = ["fast", "reference"]


def group(m: int = 1, cap: int = 1000, t0: float = 0.1, t1: float = 0.01, rate: float = 100.0) -> SimGroup:
    return SimGroup(name="g", replicas=m, kv_capacity_tokens=cap, step_time_base_s=t0, step_time_per_seq_s=t1,
                    prefill_tokens_per_s=rate)  # fmt: skip


def run(sim: Callable[..., SimResult], w: Workload, groups: list[SimGroup], p: SimPolicy, **cfg: object) -> SimResult:
    return sim(w, groups, p, rng=np.random.default_rng(7), config=SimConfig(keep_requests=True, **cfg))  # type: ignore[arg-type]


@pytest.mark.parametrize("sim", SIMULATORS, ids=SIM_IDS)
def test_single_request_by_hand(sim: Callable[..., SimResult]) -> None:
    # admitted at t=2 on an idle replica: step 1 = t0 + t1 + 50/100 = 0.61 s, then 3 steps of 0.11 s
    w = Workload.from_arrays([2.0], [0], [50], [4])
    r = run(sim, w, [group()], SimPolicy.from_arrays([10], [[1.0]]))
    assert r.queueing_delay.p50 == pytest.approx(0.0)
    assert r.ttft.p50 == pytest.approx(0.61)
    assert r.e2e.p50 == pytest.approx(0.94)
    # 10 reserved output slots; empty at the end of each step: 9, 8, 7, 6
    assert r.wasted_token_slot_seconds == pytest.approx(9 * 0.61 + (8 + 7 + 6) * 0.11)
    assert r.costs.reservation == pytest.approx(6.0)  # cw (y - xi) = 1 * (10 - 4)
    assert (r.finished, r.preemptions, r.duration_s) == (1, 0, pytest.approx(0.94))


@pytest.mark.parametrize("sim", SIMULATORS, ids=SIM_IDS)
def test_preemption_by_recompute_traced(sim: Callable[..., SimResult]) -> None:
    """M = 10, t0 = 1, t1 = 0, prefill 10 tok/s; A and B (input 2, output 5, y = 1) both arrive at t = 0.

    A is admitted at once (3 slots) and runs alone (step 1.2 s). At 1.2 A grows to 2 slots, B is admitted
    (3 slots; step 1 + 0.2). At 2.4 both grow (free 1). At 3.4 A takes the last slot, B finds none and is
    preempted (frees 4) to the queue front; re-admission needs 2 + max(1, 2 + 1) = 5 > 4. A finishes at 5.4,
    B is re-admitted with a recompute prefill of 4 tokens (step 1.4 s) and finishes at 6.8 + 2 = 8.8.
    """
    w = Workload.from_arrays([0.0, 0.0], [0, 0], [2, 2], [5, 5])
    g = group(cap=10, t0=1.0, t1=0.0, rate=10.0)
    r = run(sim, w, [g], SimPolicy.from_arrays([1], [[1.0]]))
    o = r.outcomes
    assert o is not None
    assert o.preemptions.tolist() == [0, 1]
    assert o.recomputed_tokens.tolist() == [0, 4]
    np.testing.assert_allclose(o.admit_s, [0.0, 1.2])
    np.testing.assert_allclose(o.first_token_s, [1.2, 2.4])
    np.testing.assert_allclose(o.finish_s, [5.4, 8.8])
    assert r.wasted_token_slot_seconds == pytest.approx(0.0)
    assert r.costs.reservation == pytest.approx(2 * 4.0)  # cp (xi - y) = 1 * (5 - 1) each


@pytest.mark.parametrize("sim", SIMULATORS, ids=SIM_IDS)
def test_join_shortest_queue(sim: Callable[..., SimResult]) -> None:
    w = Workload.from_arrays([0.0, 0.0, 0.0, 0.05], [0, 0, 0, 0], [10, 10, 10, 10], [100, 100, 100, 100])
    r = run(sim, w, [group(m=3)], SimPolicy.from_arrays([100], [[1.0]]))
    assert r.outcomes is not None
    assert r.outcomes.replica.tolist() == [0, 1, 2, 0]


@pytest.mark.parametrize("sim", SIMULATORS, ids=SIM_IDS)
def test_cost_terms(sim: Callable[..., SimResult]) -> None:
    w = Workload.from_arrays([0.0, 1.0, 2.0, 3.0], [0, 1, 0, 1], [10, 10, 10, 10000], [5, 30, 25, 5])
    p = SimPolicy.from_arrays([20, 10], [[1.0], [1.0]], cp=[3.0, 7.0], cw=[1.0, 2.0], e2e_slo_s=[1.0, 100.0])
    r = run(sim, w, [group()], p, c_preempt=11.0, c_reject=13.0, c_slo=17.0)
    # finished: #0 over-reserved by 15 (cw 1), #1 under by 20 (cp 7), #2 under by 5 (cp 3); #3 is oversize
    assert r.rejected_oversize == 1
    assert r.costs.reservation == pytest.approx(15 * 1.0 + 20 * 7.0 + 5 * 3.0)
    assert r.costs.rejection == pytest.approx(13.0)
    assert r.costs.slo == pytest.approx(17.0 * r.slo_violations)
    # class 0 needs e2e <= 1 s: #0 (5 tokens: 0.21 + 4 x 0.11 = 0.65 s) meets it, #2 (0.21 + 24 x 0.11) misses
    assert r.slo_violations == 1 and r.classes[0].slo_violations == 1
    assert r.costs.total == pytest.approx(
        r.costs.reservation + r.costs.preemption + r.costs.rejection + r.costs.slo
    )


def _random_workload(n: int, seed: int, gap: float, out_max: int) -> Workload:
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(gap, size=n))
    return Workload.from_arrays(arrival, rng.integers(0, 2, n), rng.integers(0, 300, n), rng.integers(1, out_max, n))


PROPERTY_LOADS = [("light", 0.2), ("heavy", 0.005), ("burst", 0.0)]


@pytest.mark.parametrize(("load", "gap"), PROPERTY_LOADS, ids=[x[0] for x in PROPERTY_LOADS])
@pytest.mark.parametrize("sim", SIMULATORS, ids=SIM_IDS)
def test_reservation_covering_every_output_never_preempts(sim: Callable[..., SimResult], load: str, gap: float) -> None:
    w = _random_workload(300, 1, gap, 200)
    r = run(sim, w, [group(m=2, cap=2500)], SimPolicy.from_arrays([200, 250], [[1.0], [1.0]]))
    assert r.preemptions == 0 and r.finished == 300


@pytest.mark.parametrize(("load", "gap"), PROPERTY_LOADS, ids=[x[0] for x in PROPERTY_LOADS])
def test_capacity_for_everything_never_preempts_nor_queues(load: str, gap: float) -> None:
    """With room for every request's peak at once, more capacity must change nothing and nothing waits."""
    w = _random_workload(200, 2, gap, 200)
    peak_all = int((w.input_tokens + w.output_tokens).sum())
    p = SimPolicy.from_arrays([0, 5], [[1.0], [1.0]])
    small = run(simulate, w, [group(cap=1500)], p)
    results = [run(simulate, w, [group(cap=peak_all * f)], p) for f in (1, 2, 4)]
    max_step = 0.1 + 0.01 * 200 + 300 * 200 / 100.0
    for r in results:
        assert r.preemptions == 0 <= small.preemptions
        assert r.queueing_delay.max is not None and r.queueing_delay.max <= max_step
        assert r.to_json() == results[0].to_json()


STORMS = [("no-reserve", 0, 800), ("tiny-memory", 2, 600), ("all-at-once", 0, 5000)]


@pytest.mark.parametrize(("name", "reserve", "cap"), STORMS, ids=[s[0] for s in STORMS])
@pytest.mark.parametrize("sim", SIMULATORS, ids=SIM_IDS)
def test_conservation_under_preemption_storm(sim: Callable[..., SimResult], name: str, reserve: int, cap: int) -> None:
    w = _random_workload(250, 3, 0.0 if name == "all-at-once" else 0.002, 300)
    p = SimPolicy.from_arrays([reserve, reserve], [[1.0], [1.0]], admission=[1.0, 0.5])
    r = run(sim, w, [group(m=2, cap=cap)], p)
    assert r.preemptions > 20
    assert r.finished + r.rejected_admission + r.rejected_oversize == r.requests == 250
    for c in r.classes:
        assert c.finished + c.rejected_admission + c.rejected_oversize == c.arrived
    o = r.outcomes
    assert o is not None
    done = o.status == 0
    assert np.all(np.isfinite(o.finish_s[done])) and np.all(np.isnan(o.finish_s[~done]))
    assert np.all(o.admit_s[done] <= o.first_token_s[done]) and np.all(o.first_token_s[done] <= o.finish_s[done])


@pytest.mark.parametrize("sim", SIMULATORS, ids=SIM_IDS)
def test_same_seed_same_result_other_seed_other_routing(sim: Callable[..., SimResult]) -> None:
    w = _random_workload(300, 4, 0.01, 200)
    groups = [group(m=2, cap=2000), group(m=1, cap=3000).model_copy(update={"name": "h"})]
    p = SimPolicy.from_arrays([20, 40], [[0.5, 0.5], [0.5, 0.5]], prefix_fraction=[[0.5, 0.5], [0.5, 0.5]],
                              prefix_tokens=[10, 10])  # fmt: skip
    cfg = SimConfig(keep_requests=True)
    a = sim(w, groups, p, rng=np.random.default_rng(11), config=cfg)
    b = sim(w, groups, p, rng=np.random.default_rng(11), config=cfg)
    c = sim(w, groups, p, rng=np.random.default_rng(12), config=cfg)
    assert a.to_json() == b.to_json()
    assert a.outcomes is not None and c.outcomes is not None
    assert not np.array_equal(a.outcomes.group, c.outcomes.group)


@pytest.mark.parametrize("sim", SIMULATORS, ids=SIM_IDS)
def test_empty_workload(sim: Callable[..., SimResult]) -> None:
    w = Workload.from_arrays([], [], [], [], n_classes=2)
    r = run(sim, w, [group()], SimPolicy.from_arrays([1, 2], [[1.0], [1.0]]))
    assert (r.requests, r.finished, r.goodput_rps, r.e2e.p99, r.classes[1].slo_violation_rate) == (0, 0, 0.0, None, None)
