"""The fast simulator against the step-by-step reference on small seeded cases.

Each case is replayed by both with the same seed. They must agree exactly on every discrete outcome (per-request
status, replica, preemption count and recomputed tokens; totals per class and group) and within float rounding on
times, waste and the summary metrics (the brief allows 2%; we hold them to 1e-6 relative). The cases cover light
load, heavy preemption storms, zero reservations, reservations above every output, prefix caching with pinned
memory, partial admission, oversize rejections, ties in arrival times, and a burst at time 0.
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


@pytest.mark.parametrize("case_id", sorted(CASE_EXPECTS), ids=sorted(CASE_EXPECTS))
def test_cases_exercise_what_they_claim(case_id: str) -> None:
    """Guards the table above: a case named for preemptions must actually preempt, and so on."""
    case = next(c for c in CASES if c.id == case_id)
    fast, _ = run_both(case)
    assert CASE_EXPECTS[case_id](fast)
