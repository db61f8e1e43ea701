"""The (y, delta) block: with layouts z, admission a and routing x fixed, the rest is a convex program.

    min  sum_i A_i DRO_i(y_i) + c_slo sum_k F_k(s_.k)         A_i = a_i lambda_i, s_ik = L_in + y_i - delta_ik L_pre
    s.t. sum_i x_ik s_ik <= umax mu_k                            (stability)
         sum_i x_ik tau_ik s_ik + m_k sum_i delta_ik L_pre <= m_k M_k   (KV memory, Little's law + prefix cache)
         0 <= y_i <= L_max,i,  0 <= delta_ik <= 1

DRO_i is convex piecewise linear; F_k (= Lambda_k T_k) is convex in s for fixed x (see :mod:`.queueing`); the
constraints are linear. We solve it by **Kelley's cutting-plane method** on HiGHS: epigraph variables theta_i >=
DRO_i and t_k >= F_k, outer-approximated by supporting lines. Each LP value is a *lower bound*; the true objective
at each LP solution (feasible: the constraints are exact) is an *upper bound*; we stop when they are within
``tol`` (relative, default 1e-8; HiGHS runs with 1e-9 feasibility tolerances, which bound how tight a
certificate can be), so every answer carries a certificate.

Two representations of DRO_i:
* ``dro="cuts"`` (BCD): cuts from :class:`~kvcore.planner.dro.DroCurve`'s exact evaluator; the per-class cut pool
  persists across calls, so later solves start with the curve already well approximated.
* ``dro="lp"`` (exact reference): the seed's eq. 6 LP written out per sample (gamma_i, theta_in), independent of
  the knapsack evaluator, so the exact reference cross-checks it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import highspy
import numpy as np
import numpy.typing as npt

from kvcore.highs import silent_highs
from kvcore.planner.problem import Problem
from kvcore.planner.queueing import lam_t, lam_t_grad_s
from kvcore.planner.state import config_of

FloatArray = npt.NDArray[np.float64]
INF = highspy.kHighsInf
INFEASIBLE_STATUSES = frozenset({"Infeasible", "Primal infeasible or unbounded", "routed to a group without a layout"})
"""HiGHS model-status strings (and ours) that mean the (y, delta) block has no feasible point. Any other
non-optimal status is a solver failure, which BCD counts and reports instead of treating it as infeasibility."""


@dataclass(frozen=True)
class ContinuousResult:
    ok: bool
    y: FloatArray
    delta: FloatArray
    value: float        # sum_i A_i DRO_i(y_i) + c_slo sum_k F_k at (y, delta): an upper bound
    lower: float        # certified lower bound
    iterations: int
    raw_status: str
    s_floor: FloatArray | None = None  # only with ``level``: a lower bound of s_ik over the level set


def tuned_highs() -> highspy.Highs:
    """A silent ``Highs`` with the tight feasibility tolerances the cutting-plane certificate relies on."""
    h = silent_highs()
    h.setOptionValue("primal_feasibility_tolerance", 1e-9)
    h.setOptionValue("dual_feasibility_tolerance", 1e-9)
    return h


class _Lp:
    """A thin incremental wrapper over highspy (columns first, then rows; rows can be added between solves)."""

    def __init__(self) -> None:
        self.h = tuned_highs()
        self.n = 0

    def add_cols(self, cost: FloatArray, lo: FloatArray, hi: FloatArray) -> int:
        first = self.n
        m = int(cost.size)
        if m:
            self.h.addCols(m, cost, lo, hi, 0, np.zeros(m + 1, dtype=np.int32)[:m], np.empty(0, np.int32),
                           np.empty(0))
            self.n += m
        return first

    def add_rows(self, lower: FloatArray, upper: FloatArray, starts: list[int], idx: list[int], val: list[float]
                 ) -> None:
        if lower.size:
            self.h.addRows(int(lower.size), lower, upper, len(idx), np.asarray(starts, np.int32),
                           np.asarray(idx, np.int32), np.asarray(val, np.float64))

    def add_row(self, lower: float, upper: float, idx: list[int], val: list[float]) -> None:
        self.h.addRow(lower, upper, len(idx), np.asarray(idx, np.int32), np.asarray(val, np.float64))

    def solve(self) -> tuple[str, FloatArray, float]:
        self.h.run()
        status = self.h.modelStatusToString(self.h.getModelStatus())
        if status != "Optimal":
            return status, np.empty(0), math.nan
        return status, np.asarray(self.h.getSolution().col_value), float(self.h.getInfo().objective_function_value)


def solve_continuous(prob: Problem, z: tuple[int, ...], a: npt.NDArray[np.bool_], x: FloatArray, *,
                     dro: str = "cuts", tol: float = 1e-8, max_iter: int = 400,
                     hint: tuple[FloatArray, FloatArray] | None = None,
                     unrouted: FloatArray | None = None, level: float | None = None) -> ContinuousResult:
    """Solve the (y, delta) block to relative gap ``tol``; ``ok`` False when the block is infeasible.

    ``hint`` (y, delta), e.g. a neighbouring solution, seeds one tangent of each queueing term before the first
    LP; any point gives a valid tangent (F_k is convex in s), so it only saves iterations.

    ``unrouted`` (per class, requests/s; only the multi-group exact reference passes it, BCD never does): ``x``
    then holds *lower* flows that need not sum to the admitted rates, and ``unrouted[i]`` more of class i goes to
    some group(s) unknown. Every group then gets its rows (and delta columns for every admitted class), and two
    pooled rows keep the relaxation tight: total work ``sum_k x_.k . s_.k + sum_i unrouted_i m_i <= umax sum_k
    mu_k`` and total KV memory likewise, with ``m_i <= s_ik`` and ``w_i <= tau_ik s_ik`` for every k (the
    unrouted flow brings at least the least work and memory any group would see). The problem stays a relaxation
    of every routing that puts ``x + (unrouted split among groups)``, so its value is a valid lower bound.

    ``level`` (exact reference only): after the solve, ``s_floor[i, k]`` = the least s_ik over the final LP's
    points whose objective is <= ``level``. The LP is an outer approximation, so every (y, delta) whose true
    objective is <= ``level`` has s >= s_floor (a valid bound, used for the branch and bound's gradient term)."""
    C, K = prob.n_classes, prob.n_groups
    A = np.where(a, prob.lam, 0.0)
    adm = [i for i in range(C) if A[i] > 0]
    lp = _Lp()
    y_lo = np.zeros(C)
    y_hi = prob.lmax.copy()
    for i in range(C):
        if A[i] <= 0:
            y_lo[i] = y_hi[i] = prob.curves[i].y_star
    ycol = lp.add_cols(np.zeros(C), y_lo, y_hi)
    pooled = unrouted is not None
    pairs = [(i, k) for i in range(C) for k in range(K)
             if (x[i, k] > 0 or (pooled and A[i] > 0)) and prob.lpre[i] > 0]
    dcol = lp.add_cols(np.zeros(len(pairs)), np.zeros(len(pairs)), np.ones(len(pairs)))
    dindex = {p: dcol + j for j, p in enumerate(pairs)}
    theta: dict[int, int] = {}
    if dro == "cuts":
        lo = np.array([prob.curves[i].min_value for i in adm])
        first = lp.add_cols(A[adm], lo, np.full(len(adm), INF))
        theta = {i: first + j for j, i in enumerate(adm)}
        lower_b: list[float] = []
        starts: list[int] = []
        idx_b: list[int] = []
        val_b: list[float] = []
        for i in adm:
            for (yc, v, g) in prob.curves[i].pool():
                starts.append(len(idx_b))
                lower_b.append(v - g * yc)
                idx_b += [theta[i], ycol + i]
                val_b += [1.0, -g]
        lp.add_rows(np.asarray(lower_b), np.full(len(lower_b), INF), starts, idx_b, val_b)
    else:
        for i in adm:
            _add_dro_lp(lp, prob, i, ycol + i, float(A[i]))
    groups = [k for k in range(K) if x[:, k].sum() > 0 or (pooled and config_of(prob, z, k) is not None)]
    tcol = lp.add_cols(np.full(len(groups), prob.c_slo), np.zeros(len(groups)), np.full(len(groups), INF))
    tindex = {k: tcol + j for j, k in enumerate(groups)}
    # Linear constraints per group: stability and memory.
    for k in groups:
        cfg = config_of(prob, z, k)
        if cfg is None:
            return _infeasible(prob, "routed to a group without a layout")
        xk = x[:, k]
        tau = prob.residence(cfg)
        idx: list[int] = []
        val: list[float] = []
        midx: list[int] = []
        mval: list[float] = []
        for i in range(C):
            if xk[i] <= 0:
                continue
            idx.append(ycol + i)
            val.append(float(xk[i]))
            midx.append(ycol + i)
            mval.append(float(xk[i] * tau[i]))
            if (i, k) in dindex:
                idx.append(dindex[(i, k)])
                val.append(float(-xk[i] * prob.lpre[i]))
                midx.append(dindex[(i, k)])
                mval.append(float(prob.lpre[i] * (cfg.replicas - xk[i] * tau[i])))
        lp.add_row(-INF, prob.umax * cfg.mu - float(np.dot(xk, prob.lin)), idx, val)
        lp.add_row(-INF, cfg.memory - float(np.dot(xk * tau, prob.lin)), midx, mval)
    if unrouted is not None:
        _add_pooled_rows(lp, prob, z, x, unrouted, groups, ycol, dindex)
    if hint is not None and prob.c_slo > 0:
        hy = np.clip(hint[0], y_lo, y_hi)
        hs = (prob.lin + hy)[:, None] - hint[1] * prob.lpre[:, None]
        for k in groups:
            cfg = config_of(prob, z, k)
            assert cfg is not None
            f = lam_t(x[:, k], hs[:, k], cfg.mu)
            if math.isfinite(f):
                lp.add_row(*_f_cut(prob, z, x, k, hs, f, tindex[k], ycol, dindex))
    best_val = math.inf
    best_y: FloatArray = np.empty(0)
    best_d: FloatArray = np.empty((0, 0))
    lower = -math.inf
    status = ""
    for it in range(1, max_iter + 1):
        status, sol, obj = lp.solve()
        if status != "Optimal":
            if best_y.size:
                break
            return _infeasible(prob, status)
        lower = max(lower, obj)
        y = np.clip(sol[ycol:ycol + C], y_lo, y_hi)
        delta: FloatArray = np.zeros((C, K))
        for (i, k), col in dindex.items():
            delta[i, k] = min(max(sol[col], 0.0), 1.0)
        s = (prob.lin + y)[:, None] - delta * prob.lpre[:, None]
        dvals = {i: prob.curves[i].value_slope(float(y[i])) for i in adm} if dro == "cuts" else {}
        fvals = {}
        for k in groups:
            cfg = config_of(prob, z, k)
            assert cfg is not None
            fvals[k] = lam_t(x[:, k], s[:, k], cfg.mu)
        if dro == "cuts":
            value = sum(float(A[i]) * dvals[i][0] for i in adm) + prob.c_slo * sum(fvals.values())
        else:  # the LP's own DRO part (exact for the LP's y), independent of the knapsack evaluator
            value = obj - prob.c_slo * sum(float(sol[tindex[k]]) for k in groups) + prob.c_slo * sum(fvals.values())
        if value < best_val:
            best_val, best_y, best_d = value, y, delta
        if best_val - lower <= tol * max(1.0, abs(best_val)):
            break
        # Cuts where the epigraph variable is below the function.
        added = 0
        for i in adm if dro == "cuts" else ():
            v, g = dvals[i]
            if v > sol[theta[i]] + 1e-12 * max(1.0, v):
                prob.curves[i].cuts.append((float(y[i]), v, g))
                added += 1
                lp.add_row(v - g * float(y[i]), INF, [theta[i], ycol + i], [1.0, -g])
        for k in groups:
            if prob.c_slo <= 0:
                continue
            f = fvals[k]
            if not math.isfinite(f) or f <= sol[tindex[k]] + 1e-12 * max(1.0, f):
                continue
            lp.add_row(*_f_cut(prob, z, x, k, s, f, tindex[k], ycol, dindex))
            added += 1
        if not added:  # every function is met at the LP point: the gap left is the LP's own tolerance
            break
    # Only from an LP that was solved to optimality (a failed last LP says nothing about the level set).
    floor = _s_floor(lp, prob, A, ycol, dindex, level) if level is not None and status == "Optimal" else None
    return ContinuousResult(True, best_y, best_d, best_val, lower, it, status, floor)


def _s_floor(lp: _Lp, prob: Problem, A: FloatArray, ycol: int, dindex: dict[tuple[int, int], int], level: float
             ) -> FloatArray:
    """min s_ik = L_in + y_i - delta_ik L_pre over the LP's feasible set cut by objective <= level (see
    :func:`solve_continuous`); L_in - L_pre where an LP fails (always valid)."""
    C, K = prob.n_classes, prob.n_groups
    floor = np.repeat(np.maximum(prob.lin - prob.lpre, 0.0)[:, None], K, axis=1)
    h = lp.h
    cost = np.asarray(h.getLp().col_cost_, dtype=np.float64)
    nz = np.flatnonzero(cost)
    lp.add_row(-INF, level, [int(j) for j in nz], [float(c) for c in cost[nz]])
    allc = np.arange(lp.n, dtype=np.int32)
    for i in range(C):
        if A[i] <= 0:
            continue
        for k in range(K):
            c = np.zeros(lp.n)
            c[ycol + i] = 1.0
            if (i, k) in dindex:
                c[dindex[(i, k)]] = -float(prob.lpre[i])
            h.changeColsCost(lp.n, allc, c)
            status, _, obj = lp.solve()
            if status == "Optimal":
                floor[i, k] = max(floor[i, k], float(prob.lin[i]) + obj - 1e-7 * max(1.0, abs(obj)))
            elif status in INFEASIBLE_STATUSES:  # nothing in the box reaches the level
                floor[i, k] = math.inf
    return floor


def _f_cut(prob: Problem, z: tuple[int, ...], x: FloatArray, k: int, s: FloatArray, f: float, tcol: int,
           ycol: int, dindex: dict[tuple[int, int], int]) -> tuple[float, float, list[int], list[float]]:
    """The tangent t_k >= F_k(s_hat) + grad . (s - s_hat) as an LP row in (t_k, y, delta)."""
    cfg = config_of(prob, z, k)
    assert cfg is not None
    gs = lam_t_grad_s(x[:, k], s[:, k], cfg.mu)
    idx = [tcol]
    val = [1.0]
    rhs = f - float(np.dot(gs, s[:, k] - prob.lin))
    for i in range(prob.n_classes):
        if x[i, k] <= 0:
            continue
        idx.append(ycol + i)
        val.append(-float(gs[i]))
        if (i, k) in dindex:
            idx.append(dindex[(i, k)])
            val.append(float(gs[i] * prob.lpre[i]))
    return rhs, INF, idx, val


def _add_pooled_rows(lp: _Lp, prob: Problem, z: tuple[int, ...], x: FloatArray, unrouted: FloatArray,
                     groups: list[int], ycol: int, dindex: dict[tuple[int, int], int]) -> None:
    """The pooled work and memory rows of ``unrouted`` (see :func:`solve_continuous`)."""
    C = prob.n_classes
    cls = [i for i in range(C) if unrouted[i] > 0]
    mcol = lp.add_cols(np.zeros(len(cls)), np.zeros(len(cls)), np.full(len(cls), INF))
    wcol = lp.add_cols(np.zeros(len(cls)), np.zeros(len(cls)), np.full(len(cls), INF))
    taus = {}
    for k in groups:
        cfg = config_of(prob, z, k)
        assert cfg is not None
        taus[k] = prob.residence(cfg)
    for j, i in enumerate(cls):
        for k in groups:  # m_i - y_i + delta_ik L_pre <= L_in;  w_i - tau (y_i - delta_ik L_pre) <= tau L_in
            for col, scale in ((mcol + j, 1.0), (wcol + j, float(taus[k][i]))):
                idx = [col, ycol + i]
                val = [1.0, -scale]
                if (i, k) in dindex:
                    idx.append(dindex[(i, k)])
                    val.append(scale * float(prob.lpre[i]))
                lp.add_row(-INF, scale * float(prob.lin[i]), idx, val)
    cap = 0.0
    mem = 0.0
    work: dict[int, float] = {}
    memo: dict[int, float] = {}
    rhs_w = 0.0
    rhs_m = 0.0
    for k in groups:
        cfg = config_of(prob, z, k)
        assert cfg is not None
        cap += prob.umax * cfg.mu
        mem += cfg.memory
        xk = x[:, k]
        rhs_w += float(np.dot(xk, prob.lin))
        rhs_m += float(np.dot(xk * taus[k], prob.lin))
        for i in range(C):
            if xk[i] > 0:
                work[ycol + i] = work.get(ycol + i, 0.0) + float(xk[i])
                memo[ycol + i] = memo.get(ycol + i, 0.0) + float(xk[i] * taus[k][i])
            if (i, k) in dindex:
                col = dindex[(i, k)]
                work[col] = work.get(col, 0.0) - float(xk[i] * prob.lpre[i])
                memo[col] = memo.get(col, 0.0) + float(prob.lpre[i] * (cfg.replicas - xk[i] * taus[k][i]))
    for j, i in enumerate(cls):
        work[mcol + j] = float(unrouted[i])
        memo[wcol + j] = float(unrouted[i])
    lp.add_row(-INF, cap - rhs_w, list(work), list(work.values()))
    lp.add_row(-INF, mem - rhs_m, list(memo), list(memo.values()))


def _add_dro_lp(lp: _Lp, prob: Problem, i: int, ycol: int, weight: float) -> None:
    """Eq. 6 for class i, weighted by A_i: columns gamma_i, theta_in; four rows per sample."""
    c = prob.curves[i]
    xi, w = c.xi, c.w
    n = xi.size
    g = lp.add_cols(np.array([weight * c.eps]), np.zeros(1), np.full(1, INF))
    th = lp.add_cols(weight * w, np.full(n, -INF), np.full(n, INF))
    lower = np.empty(4 * n)
    starts: list[int] = []
    idx: list[int] = []
    val: list[float] = []
    L, cp, cw = c.lmax, c.cp, c.cw
    for n_ in range(n):
        t = th + n_
        x_ = float(xi[n_])
        rows = (
            ([t, ycol], [1.0, cp], cp * x_),
            ([t, ycol], [1.0, -cw], -cw * x_),
            ([t, ycol, g], [1.0, cp, L - x_], cp * L),
            ([t, ycol, g], [1.0, -cw, x_], 0.0),
        )
        for r, (ri, rv, rl) in enumerate(rows):
            starts.append(len(idx))
            idx.extend(ri)
            val.extend(rv)
            lower[4 * n_ + r] = rl
    lp.add_rows(lower, np.full(4 * n, INF), starts, idx, val)


def _infeasible(prob: Problem, raw: str) -> ContinuousResult:
    C, K = prob.n_classes, prob.n_groups
    return ContinuousResult(False, np.zeros(C), np.zeros((C, K)), math.inf, math.inf, 0, raw)
