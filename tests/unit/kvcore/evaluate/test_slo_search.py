"""The SLO-rate search (kvcore.evaluate.slo_search): on attainment curves whose crossing is known analytically the
answer is within 1% below it and measured to pass; a brute-force scan of the lattice agrees; the search is
deterministic and iteration-limited; a curve that never passes or never fails gives a reason, not a rate; a dip
below the answer (a non-monotone curve) is found by the check below and the answer moves under it."""

from __future__ import annotations

import math

import pytest

from kvcore.errors import InputError
from kvcore.evaluate.slo_search import AttainmentCurve, find_slo_rate, lattice_steps


def _step(threshold: float, low: float = 0.5) -> AttainmentCurve:
    """Attainment 1 up to ``threshold`` req/s, then ``low``: the SLO rate is ``threshold`` exactly."""
    return AttainmentCurve(lambda r: 1.0 if r <= threshold else low)


def _smooth(mu: float) -> AttainmentCurve:
    """An M/M/1-like attainment: the share of waits under 1 s, 1 - (r/mu) exp(-(mu - r)), 0 past mu."""
    return AttainmentCurve(lambda r: max(0.0, 1.0 - (r / mu) * math.exp(-(mu - r))) if r < mu else 0.0)


@pytest.mark.parametrize("threshold,start", [(1.0, 1.0), (3.7, 0.2), (0.013, 5.0), (250.0, 1.0)],
                         ids=["at-start", "above-start", "far-below-start", "far-above-start"])
def test_step_curve_found_to_one_percent(threshold: float, start: float) -> None:
    found = find_slo_rate(_step(threshold), share=0.99, start_rps=start)
    assert found.rate_rps is not None and found.fail_rps is not None
    assert found.rate_rps <= threshold < found.fail_rps
    assert found.fail_rps / found.rate_rps <= 1.01 + 1e-12
    assert threshold / found.rate_rps <= 1.01 + 1e-12


@pytest.mark.parametrize("share", [0.99, 0.9], ids=["p99", "p90"])
def test_smooth_curve_matches_analytic_crossing(share: float) -> None:
    mu = 10.0
    curve = _smooth(mu)
    # analytic crossing by a fine bisection on the closed form
    lo, hi = 0.0, mu
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if curve(mid) >= share else (lo, mid)
    found = find_slo_rate(_smooth(mu), share=share, start_rps=1.0)
    assert found.rate_rps is not None
    assert found.rate_rps <= lo and lo / found.rate_rps <= 1.01


def test_brute_force_scan_agrees() -> None:
    curve = _smooth(7.0)
    found = find_slo_rate(curve, share=0.99, start_rps=2.0)
    # every lattice point from the start up to the first failure, measured one by one
    k = 0
    while curve(2.0 * 1.01 ** (k + 1)) >= 0.99:
        k += 1
    assert found.rate_rps == pytest.approx(2.0 * 1.01 ** k, rel=1e-12)


def test_deterministic_and_bounded() -> None:
    a = find_slo_rate(_step(4.2), share=0.99, start_rps=1.0)
    b = find_slo_rate(_step(4.2), share=0.99, start_rps=1.0)
    assert a == b
    assert a.evaluations <= 2 + 12 + 40 + 10


def test_memo_shared_across_shares() -> None:
    calls: list[float] = []
    curve = AttainmentCurve(lambda r: calls.append(r) or (1.0 if r < 3 else 0.5))
    find_slo_rate(curve, share=0.99, start_rps=1.0)
    n = len(calls)
    find_slo_rate(curve, share=0.9, start_rps=1.0)
    assert len(calls) == n  # the same lattice, nothing measured twice
    assert len(set(calls)) == len(calls)


def test_never_passes_and_never_fails() -> None:
    none = find_slo_rate(AttainmentCurve(lambda r: 0.0), share=0.99, start_rps=1.0)
    assert none.rate_rps is None and "misses the share at every rate" in none.reason
    always = find_slo_rate(AttainmentCurve(lambda r: 1.0), share=0.99, start_rps=1.0)
    assert always.fail_rps is None and "lower bound" in always.reason


def test_dip_below_the_crossing_is_found() -> None:
    # passes up to 8 req/s except in a dip from 7 to 7.5: bisection from [4, 8] lands near 8, the check finds the dip
    curve = AttainmentCurve(lambda r: 0.5 if 7.0 < r < 7.5 or r > 8.0 else 1.0)
    found = find_slo_rate(curve, share=0.99, start_rps=4.0)
    assert found.rate_rps is not None and found.rate_rps <= 7.0 < found.rate_rps * 1.01


@pytest.mark.parametrize("kwargs,field", [({"share": 0.0, "start_rps": 1.0}, "share"),
                                          ({"share": 0.9, "start_rps": -1.0}, "start_rps"),
                                          ({"share": 0.9, "start_rps": 1.0, "rel_tol": 0.0}, "rel_tol")],
                         ids=["share", "start", "tolerance"])
def test_bad_arguments_name_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(InputError, match=field):
        find_slo_rate(_step(1.0), **kwargs)  # type: ignore[arg-type]


def test_lattice_doubling() -> None:
    assert lattice_steps(2.0, 0.01) == 70 and 1.01 ** 70 >= 2.0 > 1.01 ** 69
