"""A certified lower bound on the optimum of the joint problem: the Lagrangian dual of a pooled relaxation.

The proof, with units, is in ``docs/model.md`` ("A certified lower bound"); in short, for any price theta >= 0 of
work (cost units per token) and beta >= 0 of memory-time (cost units per token^2)::

    L(theta, beta) = sum_i lambda_i min(c_rej, min_y [DRO_i(y) + (theta + beta E[xi_i]) (ell_i + y)])     (classes)
                   + sum_k min_z [kappa phi_kz + min_{0 <= U <= umax mu_kz} (c_slo g_kz(U) - theta U)
                                  - beta m_kz M_kz / t_kz]                                            (groups)

with ell_i = L_in,i - L_pre,i (tokens), g(U) = U^2 / (2 mu (mu - U)) <= Lambda T (Cauchy-Schwarz) and
m M / t the KV memory of a layout over its token interval, is <= the optimum. L is concave; its supergradients are
the work and the memory-time the classes ask for at those prices minus what the groups offer. The best theta for a
given beta is found by a bracketed 1-D cutting-plane search; beta stays 0 unless memory-time is short at beta = 0,
and is then searched the same way around the inner search. Pieces: :mod:`.bound_pieces`. The dual's minimisers
(reservations, admissions, layouts, loads at the best prices) are what :mod:`.fleet` builds its plan from.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvcore.planner.bound_pieces import ClassPieces, GroupPieces, priced_load
from kvcore.planner.problem import Problem

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

__all__ = ["Dual", "DualPoint", "LowerBound", "lower_bound", "priced_load"]

ROUNDING = 1e-12
"""Relative margin taken off the bound for floating-point rounding in its sums."""


@dataclass(frozen=True)
class DualPoint:
    """L(theta, beta) and the minimisers that attain it."""

    theta: float            # cost units per token of work
    beta: float             # cost units per token^2 of memory-time
    value: float            # L, cost units per second: a lower bound on the optimum
    slope: float            # work demand - supply, tokens/s: the theta-supergradient
    mem_slope: float        # memory-time demand - supply, tokens^2/s: the beta-supergradient
    y: FloatArray           # reservation per class, tokens
    admitted: BoolArray     # a_i
    layout: tuple[int, ...]  # per group: index into its configs, -1 when it has none
    load: FloatArray        # U_k, tokens/s


@dataclass(frozen=True)
class LowerBound:
    value: float            # certified lower bound on the optimum, cost units per second
    point: DualPoint        # the best prices found
    evaluations: int


class Dual:
    """L(theta, beta) of one problem, its pieces' set-up done once."""

    def __init__(self, prob: Problem) -> None:
        self.prob = prob
        self.groups = GroupPieces(prob)
        self.classes = ClassPieces(prob)
        self.ell = np.maximum(prob.lin - prob.lpre, 0.0)
        self.evaluations = 0

    def point(self, theta: float, beta: float = 0.0) -> DualPoint:
        """L(theta, beta) with its minimisers (see the module docstring)."""
        self.evaluations += 1
        prob, classes, ell = self.prob, self.classes, self.ell
        tilt = theta + beta * prob.mean_out            # cost units per token of a class's work
        y = np.array([c.y_star for c in prob.curves])
        low = np.zeros(prob.n_classes)
        low[classes.closed], y[classes.closed] = classes.tilted(tilt[classes.closed])
        for i in classes.other:
            low[i], y[i], _ = prob.curves[i].tilted_min(float(tilt[i]))
        live = prob.lam > 0
        serve = low + tilt * ell
        admitted = ~live | (serve < prob.c_rej)
        value = float(np.dot(prob.lam[live], np.minimum(prob.c_rej, serve[live])))
        flow = np.where(admitted & live, prob.lam, 0.0)
        work = flow * (ell + y)
        gvalue, layout, load, room = self.groups.pieces(theta, beta)
        return DualPoint(theta, beta, value + gvalue, float(work.sum() - load.sum()),
                         float(np.dot(work, prob.mean_out) - room.sum()), y, admitted, layout, load)


def _maximise(f: Callable[[float], DualPoint], at: Callable[[DualPoint], float], slope: Callable[[DualPoint], float],
              first: DualPoint, start: float, factor: float, budget: Callable[[], bool], rtol: float) -> DualPoint:
    """The best of f over t >= 0 for a concave f, where ``at(p)`` is p's t and ``slope(p)`` a supergradient there,
    ``first`` = f(0): bracket the sign
    change from ``start`` (stepping by ``factor``), then step to where the tangents at the bracket's ends cross (a
    1-D cutting-plane step; bisection when that hugs an end) until they prove no t gains ``rtol`` more."""
    seen = [first]
    lo: DualPoint | None = first
    hi: DualPoint | None = None
    if slope(first) <= 0:
        return first
    p = f(start)
    seen.append(p)
    if slope(p) > 0:
        lo = p
        while budget() and slope(p) > 0:
            p = f(at(p) * factor)
            seen.append(p)
            lo, hi = (p, None) if slope(p) > 0 else (lo, p)
    else:
        hi = p
        while budget() and at(p) > 1e-15:
            p = f(at(p) / factor)
            seen.append(p)
            if slope(p) > 0:
                lo = p
                break
            hi = p
    while hi is not None and lo is not None and budget():
        best = max(seen, key=lambda q: q.value)
        den = slope(lo) - slope(hi)
        t = (hi.value - lo.value + slope(lo) * at(lo) - slope(hi) * at(hi)) / den if den > 0 else at(lo)
        top = lo.value + slope(lo) * (t - at(lo))
        width = at(hi) - at(lo)
        if top - best.value <= rtol * max(1.0, abs(best.value)) or width <= 1e-15 * at(hi):
            break
        if not at(lo) + 0.05 * width <= t <= at(hi) - 0.05 * width:
            t = 0.5 * (at(lo) + at(hi))
        p = f(t)
        seen.append(p)
        lo, hi = (p, hi) if slope(p) > 0 else (lo, p)
    return max(seen, key=lambda q: q.value)


def lower_bound(prob: Problem | Dual, *, max_evaluations: int = 400, rtol: float = 1e-9,
                start: float | None = None) -> LowerBound:
    """The best L(theta, beta) found; every evaluated L is a valid bound and the largest is returned (less
    :data:`ROUNDING`). ``start`` (e.g. the price the previous plan's reservations reveal) is where the theta search
    begins."""
    dual = prob if isinstance(prob, Dual) else Dual(prob)
    used = dual.evaluations

    def budget() -> bool:
        return dual.evaluations - used < max_evaluations

    def inner(beta: float) -> DualPoint:
        warm = start if start is not None and start > 0 else None
        first = dual.point(0.0, beta)
        return _maximise(lambda t: dual.point(t, beta), lambda q: q.theta, lambda q: q.slope, first, warm or 1e-3,
                         1.5 if warm else 8.0, budget, rtol)

    best = inner(0.0)
    if best.mem_slope > 0 and budget():
        scale = max(best.theta, 1e-3) / max(float(np.max(dual.prob.mean_out)), 1.0)
        best = _maximise(inner, lambda q: q.beta, lambda q: q.mem_slope, best, scale, 8.0, budget, rtol)
    value = best.value - ROUNDING * abs(best.value)
    return LowerBound(value if math.isfinite(value) else -math.inf, best, dual.evaluations - used)
