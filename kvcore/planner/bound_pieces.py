"""The pieces of the Lagrangian bound (:mod:`.bound`), each computed as a certified lower bound.

* Group pieces, per group: ``min_z [kappa phi_kz + min_{0 <= U <= umax mu} (c_slo g(U) - theta U) - beta R_kz]``,
  in closed form: the stationary point of c_slo g(U) - theta U is :func:`priced_load`, clipped to umax mu, less
  its first-order error over [0, umax mu]; R_kz = m M / t_tok is the layout's memory-time (tokens^2/s).
* Class pieces: ``min_y DRO_i(y) + theta_i y`` by :meth:`DroCurve.tilted_min`; the classes with its closed form
  are done together in one vectorised pass.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kvcore.planner.problem import Problem

FloatArray = npt.NDArray[np.float64]


def priced_load(mu: FloatArray, theta: float, c_slo: float) -> FloatArray:
    """U = mu (1 - (1 + 2 mu theta / c_slo)^(-1/2)) tokens/s: where c_slo g'(U) = theta, i.e. the load at which a
    group's marginal queueing cost equals the work price (not clipped to max_utilisation; c_slo > 0)."""
    return np.asarray(mu * (1.0 - 1.0 / np.sqrt(1.0 + 2.0 * mu * theta / c_slo)), dtype=np.float64)


class GroupPieces:
    """Every feasible (group, layout) as flat arrays, for the closed-form group pieces."""

    def __init__(self, prob: Problem) -> None:
        rows = [(k, j, c.mu, c.phi, c.memory / c.token_interval_s) for k, g in enumerate(prob.groups)
                for j, c in enumerate(g.configs) if c.feasible]
        self.k = np.array([r[0] for r in rows], dtype=np.int64)
        self.j = np.array([r[1] for r in rows], dtype=np.int64)
        self.mu = np.array([r[2] for r in rows], dtype=np.float64)
        self.fixed = prob.kappa * np.array([r[3] for r in rows], dtype=np.float64)
        self.room = np.array([r[4] for r in rows], dtype=np.float64)   # R = m M / t_tok, tokens^2/s
        self.n_groups = prob.n_groups
        self.c = prob.c_slo
        self.cap = prob.umax * self.mu

    def pieces(self, theta: float, beta: float) -> tuple[float, tuple[int, ...], FloatArray, FloatArray]:
        """(sum_k group piece, layout per group, U_k and R_k per group) at prices (theta, beta)."""
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
        total = self.fixed + h - beta * self.room
        value = 0.0
        layout = [-1] * self.n_groups
        load = np.zeros(self.n_groups)
        room = np.zeros(self.n_groups)
        order = np.lexsort((-u, total, self.k))   # per group: the cheapest piece, the larger load on ties
        first = np.ones(order.size, dtype=bool)
        first[1:] = self.k[order][1:] != self.k[order][:-1]
        for idx in order[first]:
            k = int(self.k[idx])
            layout[k] = int(self.j[idx])
            load[k] = float(u[idx])
            room[k] = float(self.room[idx])
            value += float(total[idx])
        return value, tuple(layout), load, room


class ClassPieces:
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

    def tilted(self, theta: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(min_y DRO_i(y) + theta_i y, argmin) for the closed-form classes, ``theta`` and the results in the order
        of ``self.closed``."""
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
