"""Per-class worst-case cost DRO_i(y) as a function of the reservation y, with a subgradient, at any y.

    DRO(y) = min_{gamma >= 0} gamma eps + sum_n w_n max(Q(y, xi_n), cp (L - y) - gamma (L - xi_n), cw y - gamma xi_n)

For fixed y the objective is a convex piecewise-linear function of gamma: per sample, the upper envelope of
``Q_n`` (flat), ``cp (L - y) - gamma (L - xi_n)`` and ``cw y - gamma xi_n``. Each envelope has at most two
breakpoints, where the sample's active transport distance drops (from the steeper line to the other, or to 0), so
the gamma-slope ``eps - sum_n w_n D_n(gamma)`` is a nondecreasing step function with at most 2N steps; gamma* is
the step where it crosses 0, found by one sort, and DRO(y) is the objective there: **exact**, O(N log N) per
evaluation. (Primal view: sup of E_P[Q] over the Wasserstein ball, mass moved to 0 or L — a multiple-choice
fractional knapsack.) Checked against the HiGHS LP (eq. 6 with y fixed) in
``tests/unit/kvcore/planner/test_planner_dro_queueing.py``.

**Closed form where the ball is not binding.** Moving mass w from a sample xi to a point t raises E[Q] by at
most ``max(cp, cw)`` per token of transport (Q(y, .) is Lipschitz with those slopes), and moving a sample above y to
L gains exactly cp per token (to 0 from at or below y: exactly cw). So with ``r = max(cp, cw)`` and the transport
those exact-ratio moves can absorb, ``T(y) = [cp >= cw] sum_{xi_n > y} w_n (L - xi_n) + [cw >= cp] sum_{xi_n <= y}
w_n xi_n`` tokens, every ``y`` with ``eps < T(y)`` has ``DRO(y) = SAA(y) + r eps`` and the SAA right slope there
(T only grows or stays as y moves right within a gap between samples). :class:`DroCurve` uses this O(log N) form
(prefix sums over the sorted samples) where it applies, and at y = L, where only moves to 0 gain (cw per token,
up to E[xi] tokens of transport), DRO(L) = cw (L - E[xi]) + cw min(eps, E[xi]) with slope cw; the full
evaluation elsewhere. The forms are checked
against each other in ``tests/unit/kvcore/planner/test_planner_dro_queueing.py``.

The slope returned is a true subgradient of DRO at y (Danskin for a partial minimum): at gamma*, the y-slopes of
the active lines just left and right of gamma* are combined with the weights that make the gamma-slope zero; a
sample equal to y counts as below it.

:class:`DroCurve` caches evaluations and keeps a pool of supporting lines (cuts) that the planner's LPs reuse
across iterations and configurations: DRO_i does not depend on z, routing or admission.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kvcore.reservation.exact import solve_dro_exact
from kvcore.history.samples import Samples

FloatArray = npt.NDArray[np.float64]


def dro_eval(y: float, xi: FloatArray, w: FloatArray, *, cp: float, cw: float, lmax: float, eps: float
             ) -> tuple[float, float, float]:
    """(DRO(y), a subgradient dDRO/dy at y, gamma*) by the exact minimisation over gamma described above."""
    above = xi > y
    q = np.where(above, cp * (xi - y), cw * (y - xi))
    dq = np.where(above, -cp, cw)
    if eps <= 0.0:
        return float(np.dot(w, q)), float(np.dot(w, dq)), 0.0
    d_l, d_0 = lmax - xi, xi
    g_l, g_0 = cp * (lmax - y) - q, cw * y - q
    with np.errstate(divide="ignore", invalid="ignore"):
        r_l = np.where(d_l > 0, g_l / d_l, -np.inf)
        r_0 = np.where(d_0 > 0, g_0 / d_0, -np.inf)
    # Option 1 is the steeper line (larger transport), option 2 the other.
    first_l = (d_l > d_0) | ((d_l == d_0) & (g_l >= g_0))
    d1, g1, r1, y1 = (np.where(first_l, d_l, d_0), np.where(first_l, g_l, g_0), np.where(first_l, r_l, r_0),
                      np.where(first_l, -cp, cw))
    d2, g2, r2, y2 = (np.where(first_l, d_0, d_l), np.where(first_l, g_0, g_l), np.where(first_l, r_0, r_l),
                      np.where(first_l, cw, -cp))
    one = (r1 >= r2) & (r1 > 0)                    # option 1 on (0, r1), then none
    two = (r2 > r1) & (r2 > 0)                     # option 2 on (gc, r2), option 1 on (0, gc) when gc > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        gc = np.where(two & (d1 > d2), (g1 - g2) / (d1 - d2), 0.0)
    gc = np.where(two, np.minimum(gc, r2), 0.0)
    cross = two & (gc > 0)
    # Transport and y-slope of the active line just above gamma = 0.
    d_start = np.where(one | cross, d1, np.where(two, d2, 0.0))
    y_start = np.where(one | cross, y1, np.where(two, y2, dq))
    # Events as gamma grows: (gamma, drop in transport, change in y-slope), weighted.
    ev_g = np.concatenate([r1[one], gc[cross], r2[two]])
    ev_d = np.concatenate([(w * d1)[one], (w * (d1 - d2))[cross], (w * d2)[two]])
    ev_y = np.concatenate([(w * (dq - y1))[one], (w * (y2 - y1))[cross], (w * (dq - y2))[two]])
    s0 = float(np.dot(w, d_start))
    gy0 = float(np.dot(w, y_start))
    if eps >= s0 or ev_g.size == 0:
        gamma, slope = 0.0, gy0
    else:
        order = np.argsort(ev_g, kind="stable")
        ev_g, ev_d, ev_y = ev_g[order], ev_d[order], ev_y[order]
        cum_d = np.cumsum(ev_d)
        j = int(np.searchsorted(cum_d, s0 - eps, side="left"))  # first event after which eps - S >= 0
        j = min(j, ev_g.size - 1)
        gamma = float(ev_g[j])
        lo = int(np.searchsorted(ev_g, gamma, side="left"))
        hi = int(np.searchsorted(ev_g, gamma, side="right"))
        cum_y = np.cumsum(ev_y)
        s_left = eps - (s0 - (float(cum_d[lo - 1]) if lo > 0 else 0.0))
        s_right = eps - (s0 - float(cum_d[hi - 1]))
        gy_left = gy0 + (float(cum_y[lo - 1]) if lo > 0 else 0.0)
        gy_right = gy0 + float(cum_y[hi - 1])
        lam = s_right / (s_right - s_left) if s_right - s_left > 0 else 0.0
        slope = lam * gy_left + (1.0 - lam) * gy_right
    value = gamma * eps + float(np.dot(w, np.maximum(q, np.maximum(g_l + q - gamma * d_l, g_0 + q - gamma * d_0))))
    return value, slope, gamma


@dataclass
class DroCurve:
    """DRO_i(y) for one class, with its minimiser, an evaluation cache and a pool of cuts (y, value, slope)."""

    xi: FloatArray
    w: FloatArray
    cp: float
    cw: float
    lmax: float
    eps: float
    y_star: float = 0.0
    min_value: float = 0.0
    cuts: list[tuple[float, float, float]] = field(default_factory=list)
    _xs: FloatArray = field(default_factory=lambda: np.empty(0))      # sorted samples
    _cw_le: FloatArray = field(default_factory=lambda: np.zeros(1))   # prefix sums of w, then w xi, over _xs
    _cwx_le: FloatArray = field(default_factory=lambda: np.zeros(1))
    _cache: dict[float, tuple[float, float]] = field(default_factory=dict)
    _pool: list[tuple[float, float, float]] = field(default_factory=list)
    _pooled_at: int = -1

    @classmethod
    def build(cls, samples: Samples, *, cp: float, cw: float, lmax: float, eps: float, seed_cuts: int = 12
              ) -> DroCurve:
        xi = np.minimum(np.asarray(samples.values, dtype=np.float64), lmax)
        curve = cls(xi=xi, w=np.asarray(samples.weights, dtype=np.float64), cp=cp, cw=cw, lmax=lmax, eps=eps)
        sv, sw = samples.sorted()   # cached on the samples (the radius rule sorts them too); capping keeps the order
        curve._xs = np.minimum(sv, lmax)
        curve._cw_le = np.concatenate(([0.0], np.cumsum(sw)))
        curve._cwx_le = np.concatenate(([0.0], np.cumsum(sw * curve._xs)))
        if cp > 0 and cw > 0:
            sol = solve_dro_exact(samples, cp=cp, cw=cw, lmax=lmax, eps=eps)
            curve.y_star = float(sol.y)
        else:
            curve.y_star = 0.0 if cp == 0 else lmax
        curve.min_value = curve.value(curve.y_star)
        for y in np.linspace(0.0, curve.y_star, seed_cuts):
            curve.cut(float(y))
        curve.cut(lmax)
        return curve

    def value(self, y: float) -> float:
        return self.value_slope(y)[0]

    def value_slope(self, y: float) -> tuple[float, float]:
        """(DRO(y), right slope at y); cached per y."""
        y = min(max(float(y), 0.0), self.lmax)
        hit = self._cache.get(y)
        if hit is not None:
            return hit
        fast = self._at_lmax() if y >= self.lmax else self._closed_form(y)
        if fast is None:
            v, slope, _ = dro_eval(y, self.xi, self.w, cp=self.cp, cw=self.cw, lmax=self.lmax, eps=self.eps)
            fast = (v, slope)
        self._cache[y] = fast
        return fast

    def _at_lmax(self) -> tuple[float, float]:
        """At y = L only moves to 0 gain (cw per token, up to E[xi] of transport): (cw (L - E[xi]) + cw min(eps,
        E[xi]), cw); cw bounds every slope of DRO, so the line supports it on [0, L] (dro_eval's value and slope)."""
        mean = float(self._cwx_le[-1])
        return self.cw * (self.lmax - mean) + self.cw * min(self.eps, mean), self.cw

    def _closed_form(self, y: float) -> tuple[float, float] | None:
        """(SAA(y) + max(cp, cw) eps, SAA's right slope) when eps < T(y) (module docstring), else None."""
        if self._xs.size == 0:
            return None
        j = int(np.searchsorted(self._xs, y, side="right"))   # samples <= y
        w_le, wx_le = float(self._cw_le[j]), float(self._cwx_le[j])
        w_gt, wx_gt = float(self._cw_le[-1]) - w_le, float(self._cwx_le[-1]) - wx_le
        cp, cw = self.cp, self.cw
        cap = (self.lmax * w_gt - wx_gt if cp >= cw else 0.0) + (wx_le if cw >= cp else 0.0)
        if self.eps > 0.0 and not self.eps < cap:
            return None
        saa = cp * (wx_gt - y * w_gt) + cw * (y * w_le - wx_le)
        return saa + max(cp, cw) * self.eps, cw * w_le - cp * w_gt

    def tilted_min(self, theta: float, *, rtol: float = 1e-10, max_cuts: int = 60) -> tuple[float, float, float]:
        """(lower, y, upper) for ``min_{y in [0, L]} DRO(y) + theta y`` with theta >= 0 (token slots per token):
        ``lower`` is a certified lower bound of the minimum, ``upper = DRO(y) + theta y`` at the returned y.

        Where the closed form holds on [0, y_top] with a nonnegative slope at y_top (module docstring), the minimum
        is SAA's on a tilted fractile: the smallest sample y with W(xi <= y) >= (cp - theta) / (cp + cw), or 0;
        then lower = upper. Elsewhere the cut pool's model (the upper envelope of supporting lines, <= DRO) is
        minimised exactly over its vertices, which is a lower bound, and a cut is added at its minimiser until
        the two are within ``rtol`` (or ``max_cuts`` cuts were added)."""
        closed = self._tilted_closed(theta)
        if closed is not None:
            return closed
        lower, y, upper = -math.inf, 0.0, math.inf
        for _ in range(max_cuts):
            lo, ym = self._model_min(theta)
            v, g = self.value_slope(ym)
            lower = max(lower, lo)
            if v + theta * ym < upper:
                upper, y = v + theta * ym, ym
            if upper - lower <= rtol * max(1.0, abs(upper)):
                break
            self.cuts.append((ym, v, g))
        return lower, y, upper

    def _tilted_closed(self, theta: float) -> tuple[float, float, float] | None:
        top = self._closed_form(self.y_star)
        if top is None or top[1] < 0.0 or self._xs.size == 0 or (self.eps > 0.0 and self.cp < self.cw):
            return None
        cp, cw = self.cp, self.cw
        q = (cp - theta) / (cp + cw) if cp + cw > 0 else 0.0
        j = int(np.searchsorted(self._cw_le, q, side="left"))
        y = 0.0 if j == 0 else min(float(self._xs[min(j, self._xs.size) - 1]), self.y_star)
        at = self._closed_form(y)
        if at is None:
            return None
        return at[0] + theta * y, y, at[0] + theta * y

    def _model_min(self, theta: float) -> tuple[float, float]:
        """(min, argmin) over [0, L] of max(cuts) + theta y; the cuts are supporting lines sorted by y, so the
        model's vertices are the crossings of neighbours."""
        cuts = np.asarray(self.pool(), dtype=np.float64)
        ys, vs, gs = cuts[:, 0], cuts[:, 1], cuts[:, 2]
        cand = [np.array([0.0, self.lmax]), ys]
        dg = gs[1:] - gs[:-1]
        ok = dg > 1e-15 * np.maximum(1.0, np.abs(gs[1:]))
        if ok.any():
            cross = ((vs[:-1] - gs[:-1] * ys[:-1]) - (vs[1:] - gs[1:] * ys[1:]))[ok] / dg[ok]
            cand.append(np.clip(cross, ys[:-1][ok], ys[1:][ok]))
        pts = np.concatenate(cand)
        model = np.max(vs[None, :] + gs[None, :] * (pts[:, None] - ys[None, :]), axis=1) + theta * pts
        j = int(np.argmin(model))
        return float(model[j]), float(pts[j])

    def pool(self) -> list[tuple[float, float, float]]:
        """The cut pool without near-duplicates (cuts closer than 1e-6 L in y are kept once)."""
        if len(self.cuts) > self._pooled_at:
            seen: dict[int, tuple[float, float, float]] = {}
            scale = 1e-6 * max(1.0, self.lmax)
            for c in self.cuts:
                seen.setdefault(int(round(c[0] / scale)), c)
            self._pool = sorted(seen.values())
            self._pooled_at = len(self.cuts)
        return self._pool

    def cut(self, y: float) -> tuple[float, float, float]:
        """Add (and return) the supporting line at y to the pool."""
        v, g = self.value_slope(y)
        c = (min(max(float(y), 0.0), self.lmax), v, g)
        self.cuts.append(c)
        return c
