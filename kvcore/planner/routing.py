"""The pi block: routing with reservations and prefix fractions fixed.

With s fixed, the routing problem is ``min c_slo sum_k F_k(x_.k)`` subject to ``sum_k x_ik = a_i lambda_i`` and each
group's (linear) stability and memory constraints. F_k = (sum x)(sum x s^2) / (2 mu (mu - sum x s)) is not convex
in x in general, so no convex solver is exact. What we do: **pairwise transfers with a global 1-D search**. For a
class i and an ordered pair of groups (k, k'), moving t requests/s from k to k' changes only F_k and F_k'; the 1-D
function of t is evaluated on a grid of ``GRID`` points over its whole feasible interval and refined by golden
section in the bracket of the best grid point. Transfers are swept over all classes and pairs until no move gains
more than 1e-12 relative. Each accepted move lowers the objective, so the block never makes things worse; it is a
local method, and BCD compensates by alternating it with the (y, delta) block. With one group it does nothing.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from kvcore.planner.problem import Problem
from kvcore.planner.queueing import lam_t
from kvcore.planner.state import config_of, memory_used, work

FloatArray = npt.NDArray[np.float64]
GRID = 17
GOLDEN_STEPS = 40


def improve_routing(prob: Problem, z: tuple[int, ...], x: FloatArray, y: FloatArray, delta: FloatArray, *,
                    max_sweeps: int = 30) -> FloatArray:
    """A routing no worse than ``x`` (same admitted rates) by pairwise transfers; returns a new array."""
    K = prob.n_groups
    live = [k for k in range(K) if config_of(prob, z, k) is not None]
    x = x.copy()
    if len(live) < 2 or prob.c_slo <= 0:
        return x
    s = work(prob, y, delta)
    for _ in range(max_sweeps):
        improved = False
        for i in range(prob.n_classes):
            for k in live:
                for k2 in live:
                    if k2 == k or x[i, k] <= 0:
                        continue
                    if _transfer(prob, z, x, s, delta, i, k, k2):
                        improved = True
        if not improved:
            break
    return x


def _headroom(prob: Problem, z: tuple[int, ...], x: FloatArray, s: FloatArray, delta: FloatArray, i: int, k: int
              ) -> float:
    """How many more class-i requests/s group k can take (stability and memory)."""
    cfg = config_of(prob, z, k)
    assert cfg is not None
    load = float(np.dot(x[:, k], s[:, k]))
    mem = memory_used(prob, cfg, x[:, k], s[:, k], delta[:, k])
    room = (prob.umax * cfg.mu - load) / s[i, k] if s[i, k] > 0 else math.inf
    per = prob.residence(cfg)[i] * s[i, k]
    if per > 0:
        room = min(room, (cfg.memory - mem) / per)
    return max(room, 0.0)


def _transfer(prob: Problem, z: tuple[int, ...], x: FloatArray, s: FloatArray, delta: FloatArray, i: int, k: int,
              k2: int) -> bool:
    cfg, cfg2 = config_of(prob, z, k), config_of(prob, z, k2)
    assert cfg is not None and cfg2 is not None
    tmax = min(float(x[i, k]), _headroom(prob, z, x, s, delta, i, k2) * (1 - 1e-9))
    if tmax <= 0:
        return False
    xk, xk2 = x[:, k].copy(), x[:, k2].copy()

    def phi(t: float) -> float:
        xk[i] = x[i, k] - t
        xk2[i] = x[i, k2] + t
        return lam_t(xk, s[:, k], cfg.mu) + lam_t(xk2, s[:, k2], cfg2.mu)

    base = phi(0.0)
    ts = np.linspace(0.0, tmax, GRID)
    vals = [phi(float(t)) for t in ts]
    j = int(np.argmin(vals))
    lo, hi = float(ts[max(j - 1, 0)]), float(ts[min(j + 1, GRID - 1)])
    best_t, best_v = float(ts[j]), float(vals[j])
    g = (math.sqrt(5) - 1) / 2
    c, d = hi - g * (hi - lo), lo + g * (hi - lo)
    fc, fd = phi(c), phi(d)
    for _ in range(GOLDEN_STEPS):
        if fc < fd:
            hi, d, fd = d, c, fc
            c = hi - g * (hi - lo)
            fc = phi(c)
        else:
            lo, c, fc = c, d, fd
            d = lo + g * (hi - lo)
            fd = phi(d)
    for t, v in ((c, fc), (d, fd)):
        if v < best_v:
            best_t, best_v = t, v
    if best_t > 0 and best_v < base - 1e-12 * max(1.0, abs(base)):
        x[i, k] -= best_t
        x[i, k2] += best_t
        if x[i, k] < 1e-12 * max(1.0, float(prob.lam[i])):
            x[i, k2] += x[i, k]
            x[i, k] = 0.0
        return True
    return False
