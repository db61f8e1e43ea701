"""The exact DRO algorithm against the HiGHS LP: same worst-case cost on many random instances.

Hypothesis draws small instances with ties, weighted samples, eps = 0, huge eps and rho from 0.1 to 1000; the
LP (kvcore.reservation.lp) is the reference. Also checks the exact solver's closed form against the direct
re-evaluation, that gamma lands in {0, min(cp, cw), max(cp, cw)}, and that eps = 0 gives the critical fractile's
cost (checked by brute force over every sample value, not by the code under test).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kvcore.reservation.radius import RadiusPolicy
from kvcore.reservation import SolverStatus, expected_cost, reserve
from kvcore.reservation.exact import solve_dro_exact
from kvcore.reservation.lp import solve_dro_lp
from kvcore.history.samples import Samples

REL = 1e-6


@st.composite
def instances(draw: st.DrawFn) -> tuple[Samples, float, float, float, float]:
    n = draw(st.integers(1, 25))
    lmax = float(draw(st.integers(1, 4000)))
    if draw(st.booleans()):  # many ties: a few distinct integer values
        pool = draw(st.lists(st.integers(0, int(lmax)), min_size=1, max_size=4))
        values = [float(draw(st.sampled_from(pool))) for _ in range(n)]
    else:
        values = draw(st.lists(st.floats(0.0, lmax, allow_nan=False), min_size=n, max_size=n))
    weights = None
    if draw(st.booleans()):
        weights = draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n))
        if sum(weights) <= 0:
            weights[0] = 1.0
    rho = 10 ** draw(st.floats(-1.0, 3.0))
    scale = 10 ** draw(st.floats(-2.0, 2.0))
    cp, cw = rho * scale, scale
    eps = draw(
        st.one_of(st.just(0.0), st.floats(0.0, lmax), st.floats(0.0, 5.0), st.just(1e7))
    )
    return Samples.from_arrays(values, weights), cp, cw, lmax, eps


def _close(a: float, b: float, *, cp: float, cw: float, lmax: float) -> bool:
    # Relative 1e-6, with an absolute floor of 1e-9 of the problem's cost scale for optima at (or near) zero.
    return abs(a - b) <= REL * max(abs(a), abs(b)) + 1e-9 * max(cp, cw) * lmax


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
# Found by hypothesis: all mass at L_max and eps = 1e7 made HiGHS call the LP infeasible (eps is now clamped to L_max).
@pytest.mark.slow
@example((Samples.from_arrays([2048.0] * 4, [1.0, 0.0, 0.0, 0.0]), 31.622776601683796, 5.623413251903491, 2048.0,
          1e7))
def test_exact_matches_lp(inst: tuple[Samples, float, float, float, float]) -> None:
    s, cp, cw, lmax, eps = inst
    ex = solve_dro_exact(s, cp=cp, cw=cw, lmax=lmax, eps=eps)
    lp = solve_dro_lp(s, cp=cp, cw=cw, lmax=lmax, eps=eps)
    assert lp.status is SolverStatus.OPTIMAL, (lp.raw_status, lp.detail)
    assert _close(ex.objective, lp.objective, cp=cp, cw=cw, lmax=lmax), (ex, lp)
    assert _close(ex.objective, lp.highs_objective, cp=cp, cw=cw, lmax=lmax), (ex, lp)
    assert _close(ex.closed_form, ex.objective, cp=cp, cw=cw, lmax=lmax), ex
    assert 0.0 <= ex.y <= lmax
    assert ex.gamma in {0.0, min(cp, cw), max(cp, cw)}


@pytest.mark.parametrize(
    ("values", "weights", "cp", "cw", "lmax", "eps"),
    [
        pytest.param([5.0], None, 10.0, 1.0, 5.0, 0.0, id="one-sample-at-lmax"),
        pytest.param([0.0, 0.0, 0.0], None, 3.0, 1.0, 100.0, 50.0, id="all-zero-lengths"),
        pytest.param([1.0, 2.0, 3.0], None, 0.0, 1.0, 10.0, 1.0, id="cp-zero"),
        pytest.param([1.0, 2.0, 3.0], None, 1.0, 0.0, 10.0, 1.0, id="cw-zero"),
        pytest.param([1.0, 2.0, 3.0, 4.0], None, 1.0, 1.0, 10.0, 0.5, id="rho-one-flat-quantile"),
        pytest.param([10.0, 20.0, 30.0], [0.0, 1.0, 0.0], 5.0, 1.0, 40.0, 2.0, id="zero-weights"),
        pytest.param([100.0, 900.0], [1.0, 3.0], 1000.0, 1.0, 1000.0, 1e9, id="huge-eps-rho-1000"),
        pytest.param([100.0, 900.0], [1.0, 3.0], 0.1, 1.0, 1000.0, 1e9, id="huge-eps-rho-0.1"),
    ],
)
def test_edge_cases_match_lp(
    values: list[float], weights: list[float] | None, cp: float, cw: float, lmax: float, eps: float
) -> None:
    s = Samples.from_arrays(values, weights)
    ex = solve_dro_exact(s, cp=cp, cw=cw, lmax=lmax, eps=eps)
    lp = solve_dro_lp(s, cp=cp, cw=cw, lmax=lmax, eps=eps)
    assert lp.status is SolverStatus.OPTIMAL
    assert _close(ex.objective, lp.objective, cp=cp, cw=cw, lmax=lmax), (ex, lp)


@settings(max_examples=200, deadline=None)
@given(instances())
@pytest.mark.slow
def test_eps_zero_is_the_critical_fractile(inst: tuple[Samples, float, float, float, float]) -> None:
    s, cp, cw, lmax, _ = inst
    zero = RadiusPolicy(kind="absolute", eps=0.0)
    dro = reserve(s, cp=cp, cw=cw, lmax=lmax, method="dro", radius=zero)
    saa = reserve(s, cp=cp, cw=cw, lmax=lmax, method="saa")
    # Brute force: the empirical E[Q] is piecewise linear with kinks at the samples, so its minimum over [0, L]
    # is at a sample value (or an end point).
    candidates = np.concatenate([s.values, [0.0, lmax]])
    best = min(expected_cost(float(y), s, cp=cp, cw=cw) for y in candidates)
    assert dro.worst_case_cost is not None
    assert _close(dro.worst_case_cost, best, cp=cp, cw=cw, lmax=lmax)
    assert _close(saa.expected_cost, best, cp=cp, cw=cw, lmax=lmax)
    if s.uniform and cw > 0:
        # numpy's inverted_cdf quantile, allowing q's last-bit round-off (q * N a hair above an integer).
        q = cp / (cp + cw)
        lo = np.quantile(s.values, max(q - 1e-9, 0.0), method="inverted_cdf")
        hi = np.quantile(s.values, q, method="inverted_cdf")
        assert lo <= saa.reserve_tokens <= hi


@settings(max_examples=100, deadline=None)
@given(instances())
def test_worst_case_cost_grows_with_eps(inst: tuple[Samples, float, float, float, float]) -> None:
    s, cp, cw, lmax, eps = inst
    small = solve_dro_exact(s, cp=cp, cw=cw, lmax=lmax, eps=eps)
    big = solve_dro_exact(s, cp=cp, cw=cw, lmax=lmax, eps=eps + 10.0)
    assert big.objective >= small.objective - 1e-9 * max(cp, cw) * lmax
    # The worst case can never cost more than the worse of the two extreme reservations' worst outcome.
    assert big.objective <= max(cp, cw) * lmax * (1 + 1e-9)
