"""The pi block: routing with reservations and prefix fractions fixed.

With s fixed, the routing problem is ``min c_slo sum_k F_k(x_.k)`` subject to ``sum_k x_ik = a_i lambda_i`` and each
group's (linear) stability and memory constraints. F_k = (sum x)(sum x s^2) / (2 mu (mu - sum x s)) is not convex
in x in general, so no convex solver is exact. What we do: **pairwise transfers with a global 1-D search**. For a
class i and an ordered pair of groups (k, k'), moving t requests/s from k to k' changes only F_k and F_k'; the 1-D
function of t is a sum of two rational functions whose stationary points are the roots of a polynomial of degree
<= 4, so the best move on its whole feasible interval is found exactly (roots and endpoints). Transfers are swept over all classes and pairs until no move gains
more than 1e-12 relative. Each accepted move lowers the objective, so the block never makes things worse; it is a
local method, and BCD compensates by alternating it with the (y, delta) block. With one group it does nothing.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from scipy.optimize import minimize

from kvcore.planner.problem import Problem
from kvcore.planner.state import config_of, memory_used, work

FloatArray = npt.NDArray[np.float64]


SWEEP_RTOL = 1e-9
"""Stop sweeping when one full sweep lowers sum_k F_k by less than this fraction of it. Pairwise moves crawl along
degenerate valleys (F_k depends on x only through three aggregates, so many routings tie); without this the block
spent thousands of moves on relative gains of 1e-12 (15 classes x 4 groups: 93k moves, 32 s)."""


def _queue_total(prob: Problem, z: tuple[int, ...], x: FloatArray, s: FloatArray, live: list[int]) -> float:
    total = 0.0
    for k in live:
        cfg = config_of(prob, z, k)
        assert cfg is not None
        total += _Agg.of(x[:, k], s[:, k], cfg.mu, 0.0, 0.0).value(0.0)
    return total


def improve_routing(prob: Problem, z: tuple[int, ...], x: FloatArray, y: FloatArray, delta: FloatArray, *,
                    max_sweeps: int = 30) -> FloatArray:
    """A routing no worse than ``x`` (same admitted rates) by pairwise transfers; returns a new array."""
    K = prob.n_groups
    live = [k for k in range(K) if config_of(prob, z, k) is not None]
    x = x.copy()
    if len(live) < 2 or prob.c_slo <= 0:
        return x
    s = work(prob, y, delta)
    before = _queue_total(prob, z, x, s, live)
    for _ in range(max_sweeps):
        improved = False
        for i in range(prob.n_classes):
            for k in live:
                for k2 in live:
                    if k2 == k or x[i, k] <= 0:
                        continue
                    if _transfer(prob, z, x, s, delta, i, k, k2):
                        improved = True
        after = _queue_total(prob, z, x, s, live)
        if not improved or before - after <= SWEEP_RTOL * after:
            break
        before = after
    return polish_routing(prob, z, x, s, delta, live)


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
    """Move the best amount t in [0, tmax] of class i from group k to k2; True if the objective dropped.

    Moving t requests/s changes only the two groups' aggregates, linearly: n -> n -/+ t, u -> u -/+ t s_i,
    q -> q -/+ t s_i^2. So ``phi(t) = F_k(t) + F_k2(t)`` is a sum of two (quadratic / linear) rational functions,
    and its stationary points are the real roots of one polynomial of degree <= 4. The global minimum on the
    interval is at a root or an endpoint: the 1-D search is exact, not a grid.
    """
    cfg, cfg2 = config_of(prob, z, k), config_of(prob, z, k2)
    assert cfg is not None and cfg2 is not None
    tmax = min(float(x[i, k]), _headroom(prob, z, x, s, delta, i, k2) * (1 - 1e-9))
    if tmax <= 0:
        return False
    best_t, best_v, base = _best_move(_Agg.of(x[:, k], s[:, k], cfg.mu, -1.0, float(s[i, k])),
                                      _Agg.of(x[:, k2], s[:, k2], cfg2.mu, 1.0, float(s[i, k2])), tmax)
    if best_t > 0 and best_v < base - 1e-12 * max(1.0, abs(base)):
        x[i, k] -= best_t
        x[i, k2] += best_t
        if x[i, k] < 1e-12 * max(1.0, float(prob.lam[i])):
            x[i, k2] += x[i, k]
            x[i, k] = 0.0
        return True
    return False


class _Agg:
    """One group's F = n q / (2 mu (mu - u)) along a move of t requests/s of one class (sign -1 out, +1 in)."""

    __slots__ = ("n", "u", "q", "mu", "dn", "du", "dq")

    def __init__(self, n: float, u: float, q: float, mu: float, dn: float, du: float, dq: float) -> None:
        self.n, self.u, self.q, self.mu, self.dn, self.du, self.dq = n, u, q, mu, dn, du, dq

    @classmethod
    def of(cls, xk: FloatArray, sk: FloatArray, mu: float, sign: float, si: float) -> _Agg:
        return cls(float(xk.sum()), float(np.dot(xk, sk)), float(np.dot(xk, sk * sk)), mu,
                   sign, sign * si, sign * si * si)

    def value(self, t: float) -> float:
        n = self.n + self.dn * t
        if n <= 0:
            return 0.0
        gap = self.mu - (self.u + self.du * t)
        if gap <= 0:
            return math.inf
        return n * (self.q + self.dq * t) / (2.0 * self.mu * gap)

    def slope_terms(self) -> tuple[float, float, float, float, float]:
        """(c2, c1, c0, d1, d0): d/dt F = (c2 t^2 + c1 t + c0) / (d1 t + d0)^2 up to the common factor 2 mu.

        With P(t) = n(t) q(t) = p2 t^2 + p1 t + p0 and Q(t) = mu - u(t) = d1 t + d0:
        P'Q - PQ' = p2 d1 t^2 + 2 p2 d0 t + (p1 d0 - p0 d1).
        """
        p2 = self.dn * self.dq
        p1 = self.n * self.dq + self.q * self.dn
        p0 = self.n * self.q
        d1, d0 = -self.du, self.mu - self.u
        return p2 * d1, 2.0 * p2 * d0, p1 * d0 - p0 * d1, d1, d0


def _best_move(a: _Agg, b: _Agg, tmax: float) -> tuple[float, float, float]:
    """(argmin t, min value, value at 0) of a.value(t) + b.value(t) over [0, tmax]."""
    # phi'(t) = 0  <=>  Na(t) Qb(t)^2 / mu_a + Nb(t) Qa(t)^2 / mu_b = 0  (Qa, Qb > 0 on the interval), a quartic.
    a2, a1, a0, ad1, ad0 = a.slope_terms()
    b2, b1, b0, bd1, bd0 = b.slope_terms()
    ia, ib = 1.0 / a.mu, 1.0 / b.mu
    qa = (ad1 * ad1, 2.0 * ad1 * ad0, ad0 * ad0)
    qb = (bd1 * bd1, 2.0 * bd1 * bd0, bd0 * bd0)
    na, nb = (a2, a1, a0), (b2, b1, b0)
    poly = [0.0] * 5
    for i in range(3):
        for j in range(3):
            poly[i + j] += ia * na[i] * qb[j] + ib * nb[i] * qa[j]
    candidates = [0.0, tmax]
    while poly and poly[0] == 0.0:
        poly.pop(0)
    if len(poly) > 1 and all(math.isfinite(c) for c in poly):
        for root in np.roots(poly):
            if abs(root.imag) <= 1e-9 * max(1.0, abs(root.real)) and 0.0 < root.real < tmax:
                candidates.append(float(root.real))
    values = [a.value(t) + b.value(t) for t in candidates]
    j = int(np.argmin(values))
    return candidates[j], values[j], values[0]


def polish_routing(prob: Problem, z: tuple[int, ...], x: FloatArray, s: FloatArray, delta: FloatArray,
                   live: list[int]) -> FloatArray:
    """A local smooth polish of the pairwise result: SLSQP on sum_k F_k over all live x_ik at once.

    Pairwise moves change one class and two groups at a time, so along a curved valley of the (smooth, non-convex)
    objective they zig-zag with gains that shrink slowly; SLSQP moves every coordinate together, with the exact
    gradient dF/dx_i = (q + n s_i^2) / (2 mu (mu - u)) + n q s_i / (2 mu (mu - u)^2). Constraints are the block's:
    row sums fixed (sum_k x_ik = admitted rate), x >= 0, stability u_k <= umax mu_k, and the Little's-law memory
    bound. The result is kept only if it is feasible (re-checked here) and strictly better; else ``x`` is returned.
    """
    C, L = prob.n_classes, len(live)
    cfgs = [config_of(prob, z, k) for k in live]
    assert all(c is not None for c in cfgs)
    mus = np.array([c.mu for c in cfgs if c is not None])
    sk = s[:, live]                                            # C x L tokens
    tau = np.stack([prob.residence(c) for c in cfgs if c is not None], axis=1)  # C x L seconds
    fixed_mem = np.array([c.replicas * float(np.dot(delta[:, k], prob.lpre)) for c, k in zip(cfgs, live)
                          if c is not None])
    mem_cap = np.array([c.memory for c in cfgs if c is not None]) - fixed_mem
    load_cap = prob.umax * mus
    rows = x[:, live].sum(axis=1)

    def unpack(v: FloatArray) -> FloatArray:
        return v.reshape(C, L)

    def fun(v: FloatArray) -> float:
        xv = unpack(v)
        n, u, q = xv.sum(axis=0), (xv * sk).sum(axis=0), (xv * sk * sk).sum(axis=0)
        gap = mus - u
        if np.any(gap <= 0):
            return math.inf
        return float(np.sum(n * q / (2.0 * mus * gap)))

    def jac(v: FloatArray) -> FloatArray:
        xv = unpack(v)
        n, u, q = xv.sum(axis=0), (xv * sk).sum(axis=0), (xv * sk * sk).sum(axis=0)
        gap = np.maximum(mus - u, 1e-300)
        g = (q + n * sk * sk) / (2.0 * mus * gap) + n * q * sk / (2.0 * mus * gap * gap)
        return np.asarray(g.ravel(), dtype=np.float64)

    a_eq = np.kron(np.eye(C), np.ones((1, L)))                # row sums
    a_load = np.zeros((L, C * L))
    a_mem = np.zeros((L, C * L))
    for j in range(L):
        a_load[j, j::L] = sk[:, j]
        a_mem[j, j::L] = tau[:, j] * sk[:, j]
    a_ub = np.vstack([a_load, a_mem])
    b_ub = np.concatenate([load_cap * (1 - 1e-9), mem_cap])
    v0 = x[:, live].ravel().astype(np.float64)
    f0 = fun(v0)
    if not math.isfinite(f0) or f0 <= 0:
        return x
    res = minimize(fun, v0, jac=jac, method="SLSQP", bounds=[(0.0, None)] * (C * L),
                   constraints=[{"type": "eq", "fun": lambda v: a_eq @ v - rows, "jac": lambda v: a_eq},
                                {"type": "ineq", "fun": lambda v: b_ub - a_ub @ v, "jac": lambda v: -a_ub}],
                   options={"maxiter": 200, "ftol": 1e-14})
    v = np.maximum(np.asarray(res.x, dtype=np.float64), 0.0)
    xv = unpack(v)
    # Re-check feasibility ourselves (SLSQP's own tolerance is loose); fix tiny row-sum drift proportionally.
    sums = xv.sum(axis=1)
    scale = np.divide(rows, sums, out=np.ones_like(rows), where=sums > 0)
    xv = xv * scale[:, None]
    v = xv.ravel()
    slack_ok = bool(np.all(a_ub @ v <= b_ub * (1 + 1e-12) + 1e-9))
    rows_ok = bool(np.allclose(xv.sum(axis=1), rows, rtol=1e-12, atol=1e-12))
    if not (slack_ok and rows_ok) or not fun(v) < f0 * (1 - 1e-12):
        return x
    out = x.copy()
    out[:, live] = xv
    return out
