"""A certified lower bound on the optimum of the joint problem: the Lagrangian dual of a pooled-work relaxation.

The proof, with units, is in ``docs/model.md`` ("A certified lower bound"); in short, for any work price
theta >= 0 (cost units per token of work)::

    L(theta) = sum_i lambda_i min(c_rej, min_y [DRO_i(y) + theta (ell_i + y)])              (classes)
             + sum_k min_z min_{0 <= U <= umax mu_kz} [kappa phi_kz + c_slo g_kz(U) - theta U]   (groups)

with ell_i = L_in,i - L_pre,i (tokens) and g(U) = U^2 / (2 mu (mu - U)) <= Lambda T (Cauchy-Schwarz) is <= the
optimum. L is concave in theta; its supergradient is the work the classes ask for at that price minus the work the
groups offer, so the best theta is found by bisection on the sign of that difference.

Each piece is computed as a certified lower bound: the class piece by :meth:`DroCurve.tilted_min`, the group piece
in closed form (the stationary point of c g(U) - theta U is U = mu (1 - 1/sqrt(1 + 2 mu theta / c))) less its
first-order error over [0, umax mu]. The dual's minimisers (reservations, admissions, layouts and group loads at
the best price) are also what :mod:`.fleet` builds its plan from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvcore.planner.problem import Problem

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

ROUNDING = 1e-12
"""Relative margin taken off the bound for floating-point rounding in its sums."""


@dataclass(frozen=True)
class DualPoint:
    """L(theta) and the minimisers that attain it."""

    theta: float            # cost units per token of work
    value: float            # L(theta), cost units per second: a lower bound on the optimum
    slope: float            # demand - supply, tokens/s: a supergradient of L at theta
    y: FloatArray           # reservation per class at theta, tokens
    admitted: BoolArray     # a_i at theta
    layout: tuple[int, ...]  # per group: index into its configs, -1 when it has none
    load: FloatArray        # U_k at theta, tokens/s

    @property
    def demand(self) -> float:
        return float(self.load.sum()) + self.slope


@dataclass(frozen=True)
class LowerBound:
    value: float            # certified lower bound on the optimum, cost units per second
    point: DualPoint        # the best price found
    evaluations: int


def priced_load(mu: FloatArray, theta: float, c_slo: float) -> FloatArray:
    """U = mu (1 - (1 + 2 mu theta / c_slo)^(-1/2)) tokens/s: where c_slo g'(U) = theta, i.e. the load at which a
    group's marginal queueing cost equals the work price (not clipped to max_utilisation; c_slo > 0)."""
    return np.asarray(mu * (1.0 - 1.0 / np.sqrt(1.0 + 2.0 * mu * theta / c_slo)), dtype=np.float64)


class _Groups:
    """Every feasible (group, layout) as flat arrays, for the closed-form group pieces."""

    def __init__(self, prob: Problem) -> None:
        rows = [(k, j, c.mu, c.phi) for k, g in enumerate(prob.groups) for j, c in enumerate(g.configs)
                if c.feasible]
        self.k = np.array([r[0] for r in rows], dtype=np.int64)
        self.j = np.array([r[1] for r in rows], dtype=np.int64)
        self.mu = np.array([r[2] for r in rows], dtype=np.float64)
        self.fixed = prob.kappa * np.array([r[3] for r in rows], dtype=np.float64)
        self.n_groups = prob.n_groups
        self.c = prob.c_slo
        self.cap = prob.umax * self.mu

    def pieces(self, theta: float) -> tuple[float, tuple[int, ...], FloatArray]:
        """(sum_k group piece, layout per group, U_k per group) at theta."""
        mu, c, cap = self.mu, self.c, self.cap
        if c > 0:
            u = np.minimum(priced_load(mu, theta, c), cap)
            gap = mu - u
            h = c * u * u / (2.0 * mu * gap) - theta * u
            dh = c * u * (2.0 * mu - u) / (2.0 * mu * gap * gap) - theta
            h = h + np.minimum(0.0, np.minimum(-dh * u, dh * (cap - u)))   # certified: first-order error on [0, cap]
        else:
            u = cap if theta > 0 else np.zeros_like(cap)
            h = -theta * u
        total = self.fixed + h
        value = 0.0
        layout = [-1] * self.n_groups
        load = np.zeros(self.n_groups)
        order = np.lexsort((-u, total, self.k))   # per group: the cheapest piece, the larger load on ties
        first = np.ones(order.size, dtype=bool)
        first[1:] = self.k[order][1:] != self.k[order][:-1]
        for idx in order[first]:
            k = int(self.k[idx])
            layout[k] = int(self.j[idx])
            load[k] = float(u[idx])
            value += float(total[idx])
        return value, tuple(layout), load


class _Classes:
    """The class pieces. Classes whose tilted minimum has the closed form of :meth:`DroCurve.tilted_min` (the
    same test) are done together: their sorted samples and prefix sums are laid end to end, row i shifted by 2i
    (cumulative weights) and by (L + 1) i (samples), so one ``searchsorted`` finds every class's tilted
    fractile; the others go through :meth:`DroCurve.tilted_min` one by one."""

    def __init__(self, prob: Problem) -> None:
        self.prob = prob
        live = [i for i in range(prob.n_classes) if prob.lam[i] > 0]
        self.closed = np.array([i for i in live if prob.curves[i]._tilted_closed(0.0) is not None], dtype=np.int64)
        self.other = [i for i in live if i not in set(self.closed.tolist())]
        curves = [prob.curves[i] for i in self.closed]
        span = max((c.lmax for c in curves), default=0.0) + 1.0
        sizes = np.array([c._xs.size for c in curves], dtype=np.int64)
        self.start_w = np.concatenate(([0], np.cumsum(sizes + 1)))[:-1]     # rows of n + 1 prefix sums
        self.start_x = np.concatenate(([0], np.cumsum(sizes)))[:-1]         # rows of n samples
        self.size = sizes
        self.flat_w = np.concatenate([c._cw_le + 2.0 * r for r, c in enumerate(curves)]) if curves else np.zeros(0)
        self.cum_w = np.concatenate([c._cw_le for c in curves]) if curves else np.zeros(0)
        self.cum_wx = np.concatenate([c._cwx_le for c in curves]) if curves else np.zeros(0)
        self.flat_x = np.concatenate([c._xs + span * r for r, c in enumerate(curves)]) if curves else np.zeros(0)
        self.xs = np.concatenate([c._xs for c in curves]) if curves else np.zeros(0)
        self.span = span
        self.cp = np.array([c.cp for c in curves])
        self.cw = np.array([c.cw for c in curves])
        self.ystar = np.array([c.y_star for c in curves])
        self.robust = np.maximum(self.cp, self.cw) * np.array([c.eps for c in curves])

    def tilted(self, theta: float) -> tuple[FloatArray, FloatArray]:
        """(min_y DRO_i(y) + theta y, argmin) for the closed-form classes, in the order of ``self.closed``."""
        rows = np.arange(self.closed.size)
        denom = self.cp + self.cw
        q = np.clip(np.where(denom > 0, (self.cp - theta) / np.where(denom > 0, denom, 1.0), 0.0), 0.0, 1.0)
        j = np.searchsorted(self.flat_w, q + 2.0 * rows, side="left") - self.start_w
        j = np.minimum(j, self.size)
        pick = self.start_x + np.maximum(j - 1, 0)
        y = np.where(j == 0, 0.0, np.minimum(self.xs[np.minimum(pick, self.xs.size - 1)], self.ystar))
        le = np.searchsorted(self.flat_x, y + self.span * rows, side="right") - self.start_x   # samples <= y
        base = self.start_w + le
        w_le, wx_le = self.cum_w[base], self.cum_wx[base]
        last = self.start_w + self.size
        w_gt, wx_gt = self.cum_w[last] - w_le, self.cum_wx[last] - wx_le
        saa = self.cp * (wx_gt - y * w_gt) + self.cw * (y * w_le - wx_le)
        return saa + self.robust + theta * y, y


class Dual:
    """L(theta) of one problem, its pieces' set-up done once."""

    def __init__(self, prob: Problem) -> None:
        self.prob = prob
        self.groups = _Groups(prob)
        self.classes = _Classes(prob)
        self.ell = np.maximum(prob.lin - prob.lpre, 0.0)
        self.evaluations = 0

    def point(self, theta: float) -> DualPoint:
        """L(theta) with its minimisers (see the module docstring)."""
        self.evaluations += 1
        prob, classes, ell = self.prob, self.classes, self.ell
        y = np.array([c.y_star for c in prob.curves])
        low = np.zeros(prob.n_classes)
        low[classes.closed], y[classes.closed] = classes.tilted(theta)
        for i in classes.other:
            low[i], y[i], _ = prob.curves[i].tilted_min(theta)
        live = prob.lam > 0
        serve = low + theta * ell
        admitted = ~live | (serve < prob.c_rej)
        value = float(np.dot(prob.lam[live], np.minimum(prob.c_rej, serve[live])))
        demand = float(np.dot(np.where(admitted & live, prob.lam, 0.0), ell + y))
        gvalue, layout, load = self.groups.pieces(theta)
        return DualPoint(theta, value + gvalue, demand - float(load.sum()), y, admitted, layout, load)


def lower_bound(prob: Problem | Dual, *, max_evaluations: int = 80, rtol: float = 1e-9,
                start: float | None = None) -> LowerBound:
    """The best L(theta) over theta >= 0. Every evaluated L(theta) is a valid bound; the largest is returned (less
    :data:`ROUNDING`). The search brackets the price where the supergradient changes sign (from ``start``, e.g. the
    price the previous plan's reservations reveal, else 1e-3), then steps to where the tangents at the bracket's
    ends cross (a 1-D cutting-plane step, bisection when that point hugs an end) until those tangents prove that
    no price gains more than ``rtol`` of the bound."""
    dual = prob if isinstance(prob, Dual) else Dual(prob)
    seen: list[DualPoint] = []

    def at(theta: float) -> DualPoint:
        p = dual.point(theta)
        seen.append(p)
        return p

    lo = at(0.0)
    hi: DualPoint | None = None
    if lo.slope > 0:
        theta = start if start is not None and start > 0 else 1e-3
        factor = 1.5 if start is not None and start > 0 else 8.0
        p = at(theta)
        if p.slope > 0:
            lo = p
            while len(seen) < max_evaluations and p.slope > 0:
                p = at(p.theta * factor)
                lo, hi = (p, None) if p.slope > 0 else (lo, p)
        else:
            hi = p
            while len(seen) < max_evaluations and p.theta > 1e-15:
                p = at(p.theta / factor)
                if p.slope > 0:
                    lo = p
                    break
                hi = p
    while hi is not None and len(seen) < max_evaluations:
        best = max(seen, key=lambda q: q.value)
        # the tangents at lo and hi bound L on [lo, hi] from above; they cross at t
        den = lo.slope - hi.slope
        t = (hi.value - lo.value + lo.slope * lo.theta - hi.slope * hi.theta) / den if den > 0 else lo.theta
        top = lo.value + lo.slope * (t - lo.theta)
        if top - best.value <= rtol * max(1.0, abs(best.value)) or hi.theta - lo.theta <= 1e-15 * hi.theta:
            break
        width = hi.theta - lo.theta
        if not lo.theta + 0.05 * width <= t <= hi.theta - 0.05 * width:
            t = 0.5 * (lo.theta + hi.theta)
        p = at(t)
        if p.slope > 0:
            lo = p
        else:
            hi = p
    best = max(seen, key=lambda q: q.value)
    value = best.value - ROUNDING * abs(best.value)
    return LowerBound(value if math.isfinite(value) else -math.inf, best, len(seen))
