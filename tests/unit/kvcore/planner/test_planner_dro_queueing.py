"""The planner's DRO_i(y) evaluator (fractional knapsack) against the seed's eq. 6 LP with y fixed, its convexity
and slope, and the P-K queueing formula (units, monotonicity in load, M/D/1 check, non-convexity in routing)."""

from __future__ import annotations

import highspy
import numpy as np
import pytest

from kvcore.planner.dro import DroCurve, dro_eval
from kvcore.planner.queueing import lam_t, lam_t_grad_s, waiting_time
from kvcore.reservation.exact import solve_dro_exact
from kvcore.history.samples import Samples


def _lp_value(y: float, xi: np.ndarray, w: np.ndarray, cp: float, cw: float, lmax: float, eps: float) -> float:
    """Eq. 6 with y fixed, by HiGHS: min gamma eps + sum w_n theta_n (independent reference)."""
    n = xi.size
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    inf = highspy.kHighsInf
    h.addVars(n + 1, np.zeros(n + 1), np.full(n + 1, inf))
    h.changeColsCost(n + 1, np.arange(n + 1, dtype=np.int32), np.concatenate([[eps], w]))
    for k in range(n):
        t, x = k + 1, float(xi[k])
        h.addRow(cp * (x - y), inf, 1, np.array([t], np.int32), np.array([1.0]))
        h.addRow(cw * (y - x), inf, 1, np.array([t], np.int32), np.array([1.0]))
        h.addRow(cp * (lmax - y), inf, 2, np.array([t, 0], np.int32), np.array([1.0, lmax - x]))
        h.addRow(cw * y, inf, 2, np.array([t, 0], np.int32), np.array([1.0, x]))
    h.run()
    return float(h.getInfo().objective_function_value)


CASES = [
    ("rho10", 10.0, 1.0, 0.15, 0),
    ("rho2", 2.0, 1.0, 0.15, 1),
    ("rho100", 100.0, 1.0, 0.3, 2),
    ("cw-heavy", 1.0, 5.0, 0.15, 3),
    ("no-radius", 10.0, 1.0, 0.0, 4),
    ("big-radius", 10.0, 1.0, 2.0, 5),
]


@pytest.mark.parametrize("name,cp,cw,frac,seed", CASES, ids=[c[0] for c in CASES])
def test_knapsack_matches_lp(name: str, cp: float, cw: float, frac: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    lmax = 2000.0
    xi = np.minimum(rng.lognormal(5, 1, 60), lmax)
    w = rng.random(60)
    w /= w.sum()
    eps = frac * float(np.dot(w, xi))
    for y in [0.0, 37.5, float(np.median(xi)), 1500.0, lmax]:
        v, _, _ = dro_eval(y, xi, w, cp=cp, cw=cw, lmax=lmax, eps=eps)
        assert v == pytest.approx(_lp_value(y, xi, w, cp, cw, lmax, eps), rel=1e-7, abs=1e-7)


@pytest.mark.parametrize("name,cp,cw,frac,seed", CASES, ids=[c[0] for c in CASES])
def test_curve_is_convex_with_consistent_slopes(name: str, cp: float, cw: float, frac: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    samples = Samples.from_arrays(rng.integers(1, 1800, 300).astype(float))
    curve = DroCurve.build(samples, cp=cp, cw=cw, lmax=2000.0, eps=frac * samples.mean())
    ys = np.linspace(0, 2000, 201)
    vals = [curve.value_slope(float(y)) for y in ys]
    for (y0, (v0, g0)), y1 in zip(zip(ys, vals), ys[1:]):
        v1 = curve.value(float(y1))
        assert v1 >= v0 + g0 * (y1 - y0) - 1e-6 * max(1.0, abs(v1))  # supporting line below the curve
    assert curve.min_value <= min(v for v, _ in vals) + 1e-9
    if cp > 0 and cw > 0:
        sol = solve_dro_exact(samples, cp=cp, cw=cw, lmax=2000.0, eps=frac * samples.mean())
        assert curve.min_value == pytest.approx(sol.objective, rel=1e-9)


def test_waiting_time_is_md1_for_one_class() -> None:
    # M/D/1: W = rho / (2 mu_req (1 - rho)), mu_req = mu / s requests/s.
    lam, s, mu = 3.0, 500.0, 2000.0
    rho, mu_req = lam * s / mu, mu / s
    assert waiting_time(np.array([lam]), np.array([s]), mu) == pytest.approx(rho / (2 * mu_req * (1 - rho)))


LOADS = [
    ("more-arrivals", np.array([1.0, 2.0]), np.array([1.5, 2.0])),
    ("one-class-more", np.array([1.0, 0.0]), np.array([1.0, 0.5])),
    ("new-class", np.array([2.0, 0.0]), np.array([2.0, 0.1])),
]


@pytest.mark.parametrize("name,x0,x1", LOADS, ids=[c[0] for c in LOADS])
def test_more_load_never_lowers_waiting(name: str, x0: np.ndarray, x1: np.ndarray) -> None:
    s, mu = np.array([400.0, 900.0]), 4000.0
    assert waiting_time(x1, s, mu) >= waiting_time(x0, s, mu)
    assert lam_t(x1, s, mu) >= lam_t(x0, s, mu)
    # more work per request, same arrivals
    assert waiting_time(x1, s * 1.2, mu) >= waiting_time(x1, s, mu)


def test_unstable_group_has_infinite_waiting() -> None:
    assert lam_t(np.array([10.0]), np.array([500.0]), 4000.0) == float("inf")


def test_gradient_matches_finite_differences() -> None:
    x, s, mu = np.array([1.0, 2.0, 0.5]), np.array([300.0, 800.0, 1500.0]), 6000.0
    g = lam_t_grad_s(x, s, mu)
    for i in range(3):
        e = np.zeros(3)
        e[i] = 1e-3
        fd = (lam_t(x, s + e, mu) - lam_t(x, s - e, mu)) / 2e-3
        assert g[i] == pytest.approx(fd, rel=1e-5)


def test_lambda_t_is_not_convex_in_routing() -> None:
    """The documented reason the pi block is not a convex program: a midpoint above the chord."""
    s, mu = np.array([10.0, 1000.0]), 1100.0
    a, b = np.array([0.0, 0.9]), np.array([40.0, 0.0])
    mid = (a + b) / 2
    assert lam_t(mid, s, mu) > (lam_t(a, s, mu) + lam_t(b, s, mu)) / 2


CLOSED_FORM_COSTS = [(10.0, 1.0), (1.0, 10.0), (3.0, 3.0), (2.0, 1.0), (0.0, 1.0), (1.0, 0.0)]


@pytest.mark.slow
@pytest.mark.parametrize("cp,cw", CLOSED_FORM_COSTS, ids=[f"cp{cp:g}-cw{cw:g}" for cp, cw in CLOSED_FORM_COSTS])
def test_closed_form_matches_full_evaluation(cp: float, cw: float) -> None:
    # DroCurve's O(log N) form (SAA + max(cp, cw) eps where the ball is not binding) against dro_eval: the same
    # value, and a slope that supports the curve on both sides; it must apply often and not everywhere.
    rng = np.random.default_rng(7)
    lmax, used, skipped = 2000.0, 0, 0
    for trial in range(60):
        n = int(rng.integers(1, 80))
        xi = np.minimum(np.round(rng.lognormal(5, 1, n)), lmax)
        samples = Samples.from_arrays(xi, rng.random(n) if trial % 2 else None)
        eps = float(rng.choice([0.0, 0.01, 1.0, 10.0, 100.0, 1000.0]))
        curve = DroCurve.build(samples, cp=cp, cw=cw, lmax=lmax, eps=eps)
        for y in [*rng.uniform(0, lmax, 15), *xi[:5], 0.0, lmax]:
            fast = curve._closed_form(float(y))
            if fast is None:
                skipped += 1
                continue
            used += 1
            v, _, _ = dro_eval(float(y), curve.xi, curve.w, cp=cp, cw=cw, lmax=lmax, eps=eps)
            assert fast[0] == pytest.approx(v, rel=1e-9, abs=1e-9)
            for h in (-1e-3, 1e-3):
                if 0.0 <= y + h <= lmax:
                    vh, _, _ = dro_eval(float(y + h), curve.xi, curve.w, cp=cp, cw=cw, lmax=lmax, eps=eps)
                    assert vh >= fast[0] + fast[1] * h - 1e-7 * max(1.0, abs(vh))
        at_l = dro_eval(lmax, curve.xi, curve.w, cp=cp, cw=cw, lmax=lmax, eps=eps)
        assert curve.value_slope(lmax) == pytest.approx(at_l[:2], rel=1e-9, abs=1e-9)
    assert used > 100 and skipped > 10
