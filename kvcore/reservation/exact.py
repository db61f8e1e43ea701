"""Wasserstein DRO for one class, solved exactly without a generic solver, in O(N) after one selection.

The problem (support [0, L], radius eps, costs cp, cw >= 0; see :mod:`kvcore.reservation.objective`)::

    min_{y in [0, L], gamma >= 0}  gamma eps + sum_n w_n f_n(y, gamma)
    f_n = max( cp (xi_n - y), cw (y - xi_n), cp (L - y) - gamma (L - xi_n), cw y - gamma xi_n )

Structure used (derived here, checked against the HiGHS LP in ``tests/unit/kvcore/reservation/test_reservation_exact_vs_lp.py``):

1. Two of the four lines have slope -cp in y and two +cw, so for cp, cw > 0
   ``f_n = max(cp (U_n - y), cw (y - V_n))`` with ``U_n = max(xi_n, L - (gamma / cp)(L - xi_n))`` and
   ``V_n = min(xi_n, (gamma / cw) xi_n)``, and ``V_n <= xi_n <= U_n``.
2. Writing ``c_n = (cp U_n + cw V_n) / (cp + cw)`` and ``h_n = cp cw (U_n - V_n) / (cp + cw)``,
   ``f_n = h_n + Q(y, c_n)``: a newsvendor cost around c_n plus a constant. So for fixed gamma the best y is the
   weighted cp / (cp + cw) quantile of the c_n.
3. U_n and V_n, hence c_n, are nondecreasing in xi_n for every gamma >= 0, and a nondecreasing map sends a
   quantile to a quantile. So with ``x*`` the weighted cp / (cp + cw) quantile of the samples,
   ``y*(gamma) = c(x*, gamma)`` for every gamma: the quantile's sample index does not depend on gamma.
4. U_n is linear in gamma on [0, cp] and constant (= xi_n) after; V_n is linear on [0, cw] and constant after.
   With the index of step 3 fixed, the sign of c_n - y* is fixed, so the objective F(gamma) = min_y (...) is
   piecewise linear with kinks only at gamma = cp and gamma = cw, and for gamma >= max(cp, cw) it is
   ``gamma eps + const``, nondecreasing. F is convex (a partial minimum of a jointly convex function), so its
   minimum over gamma >= 0 is attained in {0, min(cp, cw), max(cp, cw)}; we evaluate all three.

5. Evaluating F needs only four numbers. Split the samples at the quantile index into a low part (sorted
   index <= k*, where c_n <= y) and a high part (c_n >= y; ties sit on either side at equal cost). There
   ``f_n = cw (y - V_n)`` and ``f_n = cp (U_n - y)`` respectively, and both V_n = a xi_n (a = min(1, gamma / cw))
   and U_n = (1 - b) L + b xi_n (b = min(1, gamma / cp)) are affine in xi_n. So with W-, X- (weight and weighted
   sum of xi over the low part) and W+, X+ (the high part)::

       F(gamma) = gamma eps + cw (y W- - a X-) + cp ((1 - b) L W+ + b X+ - y W+),   y = c(x*, gamma)

   One O(N) selection (``np.partition``; one cached sort for non-uniform weights) gives all four.

Edge cases: cp = 0 gives y = 0, gamma = 0 at cost 0 (no line is positive there); cw = 0 gives y = L, gamma = 0 at
cost 0. Ties in F are broken towards the smaller gamma. The reported cost is the objective re-evaluated directly
(all four lines, every sample) at the returned (y, gamma), so it is a valid upper bound even if a derivation step
were wrong; ``closed_form`` keeps step 5's value, and the LP tests check that both equal the LP optimum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvcore.reservation.objective import dro_objective
from kvcore.history.samples import Samples, sorted_quantile_index, uniform_quantile_index

# Relative tolerance for preferring a smaller gamma among candidates with (numerically) equal objective.
_TIE_RTOL = 1e-12


@dataclass(frozen=True)
class DroSolution:
    """A DRO optimum: reservation ``y`` (output tokens), ``gamma`` (token slots per token of transport) and the
    worst-case expected cost ``objective`` (token slots per request), re-evaluated at (y, gamma);
    ``closed_form`` is the same cost from step 5 of the module docstring."""

    y: float
    gamma: float
    objective: float
    closed_form: float


@dataclass(frozen=True)
class _Split:
    """The quantile x* and the low/high part sums of step 5 (weights sum to 1 over both parts)."""

    xq: float
    w_lo: float
    x_lo: float
    w_hi: float
    x_hi: float


def _split(samples: Samples, q: float) -> _Split:
    n = len(samples)
    if samples.uniform:
        k = uniform_quantile_index(n, q)
        part = np.partition(samples.values, k)
        x_lo = float(part[: k + 1].sum()) / n
        x_all = float(part.sum()) / n
        return _Split(float(part[k]), (k + 1) / n, x_lo, (n - k - 1) / n, x_all - x_lo)
    sv, sw = samples.sorted()
    k = sorted_quantile_index(sw, q)
    w_lo = float(sw[: k + 1].sum())
    x_lo = float(np.dot(sw[: k + 1], sv[: k + 1]))
    return _Split(float(sv[k]), w_lo, x_lo, float(sw[k + 1 :].sum()), float(np.dot(sw[k + 1 :], sv[k + 1 :])))


def _reserve_at(xq: float, gamma: float, *, cp: float, cw: float, lmax: float) -> float:
    """y*(gamma) = c(x*, gamma), steps 1-3 of the module docstring (cp, cw > 0)."""
    u = max(xq, lmax - (gamma / cp) * (lmax - xq))
    v = min(xq, (gamma / cw) * xq)
    c = (cp * u + cw * v) / (cp + cw)
    return min(max(c, 0.0), lmax)


def _closed_form(sp: _Split, y: float, gamma: float, *, cp: float, cw: float, lmax: float, eps: float) -> float:
    """F(gamma) at y, step 5 of the module docstring."""
    a = min(1.0, gamma / cw)
    b = min(1.0, gamma / cp)
    low = cw * (y * sp.w_lo - a * sp.x_lo)
    high = cp * ((1.0 - b) * lmax * sp.w_hi + b * sp.x_hi - y * sp.w_hi)
    return gamma * eps + low + high


def solve_dro_exact(samples: Samples, *, cp: float, cw: float, lmax: float, eps: float) -> DroSolution:
    """Minimise the DRO objective exactly. Inputs are assumed validated (see ``check_problem``)."""
    if cp == 0.0 or cw == 0.0:
        y = 0.0 if cp == 0.0 else lmax
        obj = dro_objective(y, 0.0, samples, cp=cp, cw=cw, lmax=lmax, eps=eps)
        return DroSolution(y, 0.0, obj, 0.0)
    sp = _split(samples, cp / (cp + cw))
    best: tuple[float, float, float] | None = None  # (F, y, gamma)
    for g in sorted({0.0, min(cp, cw), max(cp, cw)}):
        y = _reserve_at(sp.xq, g, cp=cp, cw=cw, lmax=lmax)
        f = _closed_form(sp, y, g, cp=cp, cw=cw, lmax=lmax, eps=eps)
        if best is None or f < best[0] - _TIE_RTOL * max(abs(best[0]), 1.0):
            best = (f, y, g)
    assert best is not None
    f, y, g = best
    return DroSolution(y, g, dro_objective(y, g, samples, cp=cp, cw=cw, lmax=lmax, eps=eps), f)
