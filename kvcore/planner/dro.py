"""Per-class worst-case cost DRO_i(y) as a function of the reservation y, with a subgradient, at any y.

    DRO(y) = min_{gamma >= 0} gamma eps + sum_n w_n max(Q(y, xi_n), cp (L - y) - gamma (L - xi_n), cw y - gamma xi_n)

By Wasserstein-1 duality this equals the primal ``sup { E_P[Q(y, xi)] : W1(P, P_hat) <= eps, supp P in [0, L] }``.
Because Q(y, .) is convex in xi, moving mass from a sample to the interior never beats moving it to an end of the
support, so the primal is a **fractional knapsack**: sample n may move (part of) its weight w_n to L (gain
``cp (L - y) - Q(y, xi_n)``, transport ``L - xi_n``) or to 0 (gain ``cw y - Q(y, xi_n)``, transport ``xi_n``);
fill the budget eps greedily by gain per unit of transport. The value is ``E_P_hat[Q] + knapsack``; the
marginal ratio is the optimal gamma. This is exact, O(N log N) per evaluation, and is checked against the HiGHS LP
(eq. 6 with y fixed) in ``tests/unit/test_planner_dro.py``.

The slope returned is Danskin's derivative with a sample equal to y counted below it: the right derivative, a
subgradient, except where two samples tie in gain ratio exactly at y (a set of measure zero).

:class:`DroCurve` caches evaluations and keeps a pool of supporting lines (cuts) that the planner's LPs reuse
across iterations and configurations: DRO_i does not depend on z, routing or admission.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kvcore.reservation.exact import solve_dro_exact
from kvcore.samples import Samples

FloatArray = npt.NDArray[np.float64]


def dro_eval(y: float, xi: FloatArray, w: FloatArray, *, cp: float, cw: float, lmax: float, eps: float
             ) -> tuple[float, float, float]:
    """(DRO(y), right slope dDRO/dy at y, gamma*) by the fractional knapsack of the module docstring.

    The slope is Danskin's: the knapsack's fractions held fixed, each gain differentiated, with a sample equal to
    y counted as below it (the right derivative of Q)."""
    above = xi > y
    q = np.where(above, cp * (xi - y), cw * (y - xi))
    dq = np.where(above, -cp, cw)
    base = float(np.dot(w, q))
    dbase = float(np.dot(w, dq))
    if eps <= 0.0:
        return base, dbase, 0.0
    d_l = lmax - xi
    d_0 = xi
    with np.errstate(divide="ignore", invalid="ignore"):
        r_l = np.where(d_l > 0, (cp * (lmax - y) - q) / d_l, -np.inf)
        r_0 = np.where(d_0 > 0, (cw * y - q) / d_0, -np.inf)
    use_l = r_l >= r_0
    r = np.where(use_l, r_l, r_0)
    pos = r > 0
    if not pos.any():
        return base, dbase, 0.0
    d = np.where(use_l, d_l, d_0)[pos]
    dg = np.where(use_l, -cp - dq, cw - dq)[pos]
    r, wp = r[pos], w[pos]
    order = np.argsort(-r, kind="stable")
    r, d, dg, wp = r[order], d[order], dg[order], wp[order]
    cost = wp * d
    cum = np.cumsum(cost)
    if cum[-1] <= eps:
        return base + float(np.dot(r, cost)), dbase + float(np.dot(wp, dg)), 0.0
    j = int(np.searchsorted(cum, eps, side="left"))
    before = float(cum[j - 1]) if j > 0 else 0.0
    value = base + float(np.dot(r[:j], cost[:j])) + (eps - before) * float(r[j])
    slope = dbase + float(np.dot(wp[:j], dg[:j])) + (eps - before) / float(d[j]) * float(dg[j])
    return value, slope, float(r[j])


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
    _cache: dict[float, tuple[float, float]] = field(default_factory=dict)

    @classmethod
    def build(cls, samples: Samples, *, cp: float, cw: float, lmax: float, eps: float, seed_cuts: int = 12
              ) -> DroCurve:
        xi = np.minimum(np.asarray(samples.values, dtype=np.float64), lmax)
        curve = cls(xi=xi, w=np.asarray(samples.weights, dtype=np.float64), cp=cp, cw=cw, lmax=lmax, eps=eps)
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
        v, slope, _ = dro_eval(y, self.xi, self.w, cp=self.cp, cw=self.cw, lmax=self.lmax, eps=self.eps)
        self._cache[y] = (v, slope)
        return v, slope

    def cut(self, y: float) -> tuple[float, float, float]:
        """Add (and return) the supporting line at y to the pool."""
        v, g = self.value_slope(y)
        c = (min(max(float(y), 0.0), self.lmax), v, g)
        self.cuts.append(c)
        return c
