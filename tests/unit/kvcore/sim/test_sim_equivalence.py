"""The fast simulator against the step-by-step reference on small seeded cases.

Each case is replayed by both with the same seed. They must agree exactly on every discrete outcome (per-request
status, replica, preemption count and recomputed tokens; totals per class and group) and within float rounding on
times, waste and the summary metrics (the brief allows 2%; we hold them to 1e-6 relative). The cases cover light
load, heavy preemption storms, zero reservations, reservations above every output, prefix caching with pinned
memory, partial admission, oversize rejections, ties in arrival times, and a burst at time 0; then 30 random
small instances (1-3 classes and groups, random capacities, step times, reserves, routing and prefix caching).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from kvcore.sim import SimConfig, SimGroup, SimPolicy, SimResult, Workload, simulate, simulate_reference


@dataclass(frozen=True)
class Case:
    id: str
    n: int
    mean_gap_s: float
    reserve: tuple[int, ...]
    capacity: tuple[int, ...]
    replicas: tuple[int, ...] = (2, 1)
    out_max: int = 300
    in_max: int = 200
    admission: tuple[float, ...] | None = None
    prefix_fraction: float = 0.0
    integer_arrivals: bool = False
    burst: bool = False
    seed: int = 0


CASES = [
    Case("light", 300, 0.5, (100, 100), (20_000, 20_000)),
    Case("moderate", 600, 0.05, (50, 150), (3_000, 5_000)),
    Case("preemption-storm", 400, 0.01, (0, 10), (1_500, 2_000), out_max=400),
    Case("zero-reserve", 400, 0.02, (0, 0), (2_500, 2_500), seed=3),
    Case("over-reserve", 400, 0.02, (400, 400), (5_000, 8_000), seed=4),
    Case("prefix-pinned", 400, 0.02, (30, 60), (2_500, 3_000), prefix_fraction=0.6, seed=5),
    Case("partial-admission", 500, 0.01, (20, 40), (2_000, 2_500), admission=(0.7, 0.0), seed=6),
    Case("oversize", 400, 0.02, (20, 600), (700, 900), in_max=400, seed=7),
    Case("integer-ties", 500, 0.0, (10, 50), (2_000, 3_000), integer_arrivals=True, seed=8),
    Case("burst-at-zero", 300, 0.0, (5, 5), (1_200, 1_200), burst=True, seed=9),
    Case("one-replica", 300, 0.01, (0, 20), (1_000,), replicas=(1,), seed=10),
    Case("many-replicas", 800, 0.005, (10, 80), (1_500, 2_500), replicas=(5, 3), seed=11),
]


def build(case: Case) -> tuple[Workload, list[SimGroup], SimPolicy]:
    rng = np.random.default_rng(case.seed)
    if case.burst:
        arrival = np.zeros(case.n)
    elif case.integer_arrivals:
        arrival = np.sort(rng.integers(0, case.n // 20 + 1, size=case.n)).astype(float)
    else:
        arrival = np.cumsum(rng.exponential(case.mean_gap_s, size=case.n))
    cls = rng.integers(0, 2, size=case.n)
    inp = rng.integers(0, case.in_max, size=case.n)
    out = rng.integers(1, case.out_max, size=case.n)
    workload = Workload.from_arrays(arrival, cls, inp, out, n_classes=2)
    groups = [
        SimGroup(name=f"g{k}", replicas=m, kv_capacity_tokens=cap, step_time_base_s=0.01 * (k + 1),
                 step_time_per_seq_s=0.0007 / (k + 1), prefill_tokens_per_s=5_000.0 * (k + 1))
        for k, (m, cap) in enumerate(zip(case.replicas, case.capacity))
    ]  # fmt: skip
    k = len(groups)
    routing = np.full((2, k), 1.0 / k)
    if k == 2:
        routing = np.array([[0.7, 0.3], [0.2, 0.8]])
    policy = SimPolicy.from_arrays(
        case.reserve,
        routing,
        prefix_fraction=np.full((2, k), case.prefix_fraction),
        prefix_tokens=[40, 120],
        admission=case.admission,
        ttft_slo_s=[0.5, 1.0],
        e2e_slo_s=[5.0, 8.0],
        cp=[10.0, 4.0],
    )
    return workload, groups, policy


def run_both(case: Case) -> tuple[SimResult, SimResult]:
    workload, groups, policy = build(case)
    config = SimConfig(keep_requests=True, c_preempt=50.0, c_reject=100.0, c_slo=20.0)
    fast = simulate(workload, groups, policy, rng=np.random.default_rng(case.seed + 100), config=config)
    ref = simulate_reference(workload, groups, policy, rng=np.random.default_rng(case.seed + 100), config=config)
    return fast, ref


def _close(a: Any, b: Any, path: str) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            _close(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, bool) or a is None or isinstance(a, (int, str)):
        assert a == b, f"{path}: fast {a!r} != reference {b!r}"
    else:
        assert a == pytest.approx(b, rel=1e-6, abs=1e-9), f"{path}: fast {a!r} vs reference {b!r}"


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_fast_matches_reference(case: Case) -> None:
    fast, ref = run_both(case)
    assert fast.simulator == "fast" and ref.simulator == "reference"
    fo, ro = fast.outcomes, ref.outcomes
    assert fo is not None and ro is not None
    np.testing.assert_array_equal(fo.status, ro.status)
    np.testing.assert_array_equal(fo.replica, ro.replica)
    np.testing.assert_array_equal(fo.preemptions, ro.preemptions)
    np.testing.assert_array_equal(fo.recomputed_tokens, ro.recomputed_tokens)
    for name in ("admit_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(getattr(fo, name), getattr(ro, name), rtol=1e-9, atol=1e-9, err_msg=name)
    np.testing.assert_allclose(fo.waste_by_group, ro.waste_by_group, rtol=1e-9)
    summary_f = json.loads(fast.to_json())
    summary_r = json.loads(ref.to_json())
    summary_f.pop("simulator")
    summary_r.pop("simulator")
    _close(summary_f, summary_r, "result")


CASE_EXPECTS = {
    "preemption-storm": lambda r: r.preemptions > 50,
    "zero-reserve": lambda r: r.preemptions > 0,
    "over-reserve": lambda r: r.preemptions == 0 and r.wasted_token_slot_seconds > 0,
    "partial-admission": lambda r: r.classes[1].rejected_admission == r.classes[1].arrived > 0
    and r.classes[0].rejected_admission > 0,
    "oversize": lambda r: r.rejected_oversize > 0,
    "prefix-pinned": lambda r: r.outcomes is not None and int(r.outcomes.prefix_hit.sum()) > 0,
}


@pytest.mark.slow
@pytest.mark.parametrize("case_id", sorted(CASE_EXPECTS), ids=sorted(CASE_EXPECTS))
def test_cases_exercise_what_they_claim(case_id: str) -> None:
    """Guards the table above: a case named for preemptions must actually preempt, and so on."""
    case = next(c for c in CASES if c.id == case_id)
    fast, _ = run_both(case)
    assert CASE_EXPECTS[case_id](fast)


def random_case(seed: int) -> tuple[Workload, list[SimGroup], SimPolicy, SimConfig]:
    """A random small instance: 1-3 classes and groups, bursts / integer ties / Poisson, any reserve."""
    g = np.random.default_rng(seed)
    n, n_cls, n_grp = int(g.integers(1, 200)), int(g.integers(1, 4)), int(g.integers(1, 4))
    mode = int(g.integers(0, 3))
    if mode == 0:
        arrival = np.zeros(n)
    elif mode == 1:
        arrival = np.sort(g.integers(0, 20, n)).astype(float)
    else:
        arrival = np.cumsum(g.exponential(g.uniform(0.001, 0.2), n))
    workload = Workload.from_arrays(arrival, g.integers(0, n_cls, n), g.integers(0, int(g.integers(1, 500)), n),
                                    g.integers(1, int(g.integers(2, 500)), n), n_classes=n_cls)  # fmt: skip
    groups = [
        SimGroup(name=f"g{k}", replicas=int(g.integers(1, 4)), kv_capacity_tokens=int(g.integers(300, 5000)),
                 step_time_base_s=float(g.uniform(0.001, 0.05)),
                 step_time_per_seq_s=float(g.choice([0.0, g.uniform(0, 0.003)])),
                 prefill_tokens_per_s=float(g.uniform(500, 20000)))
        for k in range(n_grp)
    ]  # fmt: skip
    policy = SimPolicy.from_arrays(
        g.integers(0, 300, n_cls) * g.integers(0, 2, n_cls),
        g.dirichlet(np.ones(n_grp), size=n_cls),
        prefix_fraction=g.uniform(0, 1, (n_cls, n_grp)) * g.integers(0, 2, (n_cls, n_grp)),
        prefix_tokens=g.integers(0, 50, n_cls),
        admission=g.choice([1.0, 0.5], n_cls),
    )
    return workload, groups, policy, SimConfig(keep_requests=True, pin_prefix_memory=bool(g.integers(0, 2)))


RANDOM_SEEDS = list(range(1000, 1030))


@pytest.mark.parametrize("seed", RANDOM_SEEDS, ids=[f"random-{s}" for s in RANDOM_SEEDS])
def test_fast_matches_reference_random(seed: int) -> None:
    workload, groups, policy, config = random_case(seed)
    fast = simulate(workload, groups, policy, rng=np.random.default_rng(seed), config=config)
    ref = simulate_reference(workload, groups, policy, rng=np.random.default_rng(seed), config=config)
    assert fast.outcomes is not None and ref.outcomes is not None
    np.testing.assert_array_equal(fast.outcomes.preemptions, ref.outcomes.preemptions)
    np.testing.assert_array_equal(fast.outcomes.replica, ref.outcomes.replica)
    np.testing.assert_allclose(fast.outcomes.finish_s, ref.outcomes.finish_s, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fast.outcomes.first_token_s, ref.outcomes.first_token_s, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fast.wasted_token_slot_seconds, ref.wasted_token_slot_seconds, rtol=1e-9, atol=1e-6)
    assert fast.finished + fast.rejected == fast.requests
