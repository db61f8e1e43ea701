"""Wasserstein DRO for one class, solved exactly without a generic solver, in O(N) after one selection.

The problem (support [0, L], radius eps, costs cp, cw >= 0; see :mod:`kvcore.reservation.objective`)::

    min_{y in [0, L], gamma >= 0}  gamma eps + sum_n w_n f_n(y, gamma)
    f_n = max( cp (xi_n - y), cw (y - xi_n), cp (L - y) - gamma (L - xi_n), cw y - gamma xi_n )

Structure used (derived here, checked against the HiGHS LP in ``tests/unit/test_reservation_exact_vs_lp.py``):

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

Edge cases: cp = 0 gives y = 0, gamma = 0 at cost 0 (no line is positive there); cw = 0 gives y = L, gamma = 0 at
cost 0. Ties in F are broken towards the smaller gamma. The reported cost is always the objective re-evaluated at
the returned (y, gamma), so it is a valid upper bound even if a derivation step were wrong; the LP tests check it
is also the minimum.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcore.reservation.objective import dro_objective
from kvcore.samples import Samples

# Relative tolerance for preferring a smaller gamma among candidates with (numerically) equal objective.
_TIE_RTOL = 1e-12


@dataclass(frozen=True)
class DroSolution:
    """A DRO optimum: reservation ``y`` (output tokens), ``gamma`` (token slots per token of transport) and the
    worst-case expected cost ``objective`` (token slots per request), re-evaluated at (y, gamma)."""

    y: float
    gamma: float
    objective: float


def _reserve_at(xq: float, gamma: float, *, cp: float, cw: float, lmax: float) -> float:
    """y*(gamma) = c(x*, gamma), steps 1-3 of the module docstring (cp, cw > 0)."""
    u = max(xq, lmax - (gamma / cp) * (lmax - xq))
    v = min(xq, (gamma / cw) * xq)
    c = (cp * u + cw * v) / (cp + cw)
    return min(max(c, 0.0), lmax)


def solve_dro_exact(samples: Samples, *, cp: float, cw: float, lmax: float, eps: float) -> DroSolution:
    """Minimise the DRO objective exactly. Inputs are assumed validated (see ``check_problem``)."""
    if cp == 0.0:
        y, g = 0.0, 0.0
        return DroSolution(y, g, dro_objective(y, g, samples, cp=cp, cw=cw, lmax=lmax, eps=eps))
    if cw == 0.0:
        y, g = lmax, 0.0
        return DroSolution(y, g, dro_objective(y, g, samples, cp=cp, cw=cw, lmax=lmax, eps=eps))
    xq = samples.quantile(cp / (cp + cw))
    best: DroSolution | None = None
    for g in sorted({0.0, min(cp, cw), max(cp, cw)}):
        y = _reserve_at(xq, g, cp=cp, cw=cw, lmax=lmax)
        obj = dro_objective(y, g, samples, cp=cp, cw=cw, lmax=lmax, eps=eps)
        if best is None or obj < best.objective - _TIE_RTOL * max(abs(best.objective), 1.0):
            best = DroSolution(y, g, obj)
    assert best is not None
    return best
