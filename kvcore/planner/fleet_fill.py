"""The fleet method's routing (:mod:`.fleet`, steps 2-3): group loads at an equal marginal queueing cost, and a
routing that fills the groups with the classes' work in order of work per request, within every group's stability
and KV-memory rows.

The fill accounts memory as the model does with every prefix cached (delta = 1): a class arriving at group k
brings one prefix copy per replica (m_k L_pre,i tokens) and each request/s of it holds tau_ik s_i tokens (Little's
law), so a routing it returns is feasible for the (y, delta) block at the reservations it was given.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from kvcore.planner.bound import priced_load
from kvcore.planner.problem import Problem
from kvcore.planner.state import config_of

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

MARGIN = 1e-9
"""Relative headroom kept below each group's stability and memory limits (the (y, delta) block's LP tolerances)."""


def group_loads(prob: Problem, z: tuple[int, ...], work: float) -> FloatArray | None:
    """Loads U_k (tokens/s) summing to ``work`` with equal marginal queueing cost c g'(U_k); None if the layouts
    cannot carry it at max_utilisation."""
    K = prob.n_groups
    mu = np.array([c.mu if (c := config_of(prob, z, k)) is not None else 0.0 for k in range(K)])
    cap = prob.umax * mu
    if work > cap.sum() * (1 - 1e-9):
        return None
    if work <= 0:
        return np.zeros(K)
    if prob.c_slo <= 0:
        return np.asarray(cap * (work / cap.sum()), dtype=np.float64)
    live = mu > 0

    def loads(theta: float) -> FloatArray:
        u = np.zeros(K)
        u[live] = priced_load(mu[live], theta, prob.c_slo)
        return np.minimum(u, cap)

    lo, hi = 0.0, 1e-6
    while loads(hi).sum() < work and hi < 1e30:
        lo, hi = hi, hi * 4.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if loads(mid).sum() < work:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-14 * hi:
            break
    u = loads(hi)
    return np.asarray(u * (work / u.sum()), dtype=np.float64)


def fill_routing(prob: Problem, z: tuple[int, ...], a: BoolArray, s: FloatArray, loads: FloatArray
                 ) -> FloatArray | None:
    """x (requests/s) carrying each admitted class's lambda_i requests/s of s_i tokens each: classes in order of s,
    groups in index order up to their target ``loads`` (tokens/s), each group closed when its work or its memory is
    used up; what is left then goes to the groups with the most work room, up to max_utilisation. None when some
    class cannot be placed at all."""
    C, K = prob.n_classes, prob.n_groups
    cfgs = [config_of(prob, z, k) for k in range(K)]
    cap = np.array([prob.umax * c.mu if c is not None else 0.0 for c in cfgs]) * (1 - MARGIN)
    mem = np.array([c.memory if c is not None else 0.0 for c in cfgs]) * (1 - MARGIN)
    reps = np.array([c.replicas if c is not None else 0 for c in cfgs], dtype=np.float64)
    tok = np.array([c.token_interval_s if c is not None else 0.0 for c in cfgs])
    x = np.zeros((C, K))
    room = np.minimum(loads, cap)

    def place(i: int, k: int, left: float) -> float:
        copy = 0.0 if x[i, k] > 0 else reps[k] * float(prob.lpre[i])
        if mem[k] <= copy:
            return 0.0
        per = float(prob.mean_out[i]) * tok[k] * float(s[i])    # KV tokens held per request/s (Little's law)
        take = min(left, room[k] / s[i] if s[i] > 0 else math.inf, (mem[k] - copy) / per if per > 0 else math.inf)
        if take <= 1e-12 * max(1.0, left):
            return 0.0
        x[i, k] += take
        room[k] -= take * s[i]
        mem[k] -= copy + take * per
        return take

    order = [int(i) for i in np.argsort(s, kind="stable") if a[i] and prob.lam[i] > 0]
    live = [k for k in range(K) if cfgs[k] is not None]
    left = {i: float(prob.lam[i]) for i in order}
    g = 0
    for i in order:
        while left[i] > 1e-12 * float(prob.lam[i]) and g < len(live):
            left[i] -= place(i, live[g], left[i])
            if left[i] > 1e-12 * float(prob.lam[i]):   # group g is full (work or memory) for this class
                g += 1
    room = cap - (x * s[:, None]).sum(axis=0)   # second pass: anything left, up to max_utilisation
    for i in order:
        for k in sorted(live, key=lambda k: -room[k]):
            if left[i] <= 1e-12 * float(prob.lam[i]):
                break
            left[i] -= place(i, k, left[i])
        if left[i] > 1e-9 * float(prob.lam[i]):
            return None
        if left[i] > 0:   # round-off: rescale the class's row to its exact rate
            x[i] *= float(prob.lam[i]) / float(x[i].sum())
    return x


CUT_FRACTIONS = (0.3, 0.6, 0.8, 0.9, 0.95, 1.0)
"""Where (as a fraction of max_utilisation x mu) :func:`lp_routing` outer-approximates each group's g(U)."""


def lp_routing(prob: Problem, z: tuple[int, ...], a: BoolArray, y: FloatArray) -> FloatArray | None:
    """The routing LP, for when filling fails (KV memory short where the work was sent): x >= 0 with every admitted
    class's rate routed, each group's work sum_i x_ik s_i <= max_utilisation mu_k and KV memory
    sum_i x_ik (tau_ik s_i + m_k L_pre,i / lambda_i) <= m_k M_k, minimising a piecewise-linear outer approximation
    of sum_k c_slo g_k(U_k) (tangents at :data:`CUT_FRACTIONS`). Prefixes are cached (s_i = ell_i + y_i) and each
    group's prefix copies are charged in proportion to the share of the class it takes (exact when a class is not
    split; the (y, delta) block that follows holds the exact row and may lower y or delta to meet it). None when
    the LP is infeasible."""
    from kvcore.planner.continuous import tuned_highs
    import highspy

    cls = [i for i in range(prob.n_classes) if a[i] and prob.lam[i] > 0]
    cfgs = [(k, c) for k in range(prob.n_groups) if (c := config_of(prob, z, k)) is not None]
    n_c, n_g, n_j = len(cls), len(cfgs), len(CUT_FRACTIONS)
    if not cls:
        return np.zeros((prob.n_classes, prob.n_groups))
    s0 = (np.maximum(prob.lin - prob.lpre, 0.0) + y)[cls]            # tokens per request, prefix cached
    mu = np.array([c.mu for _, c in cfgs])
    tau = np.outer(prob.mean_out[cls], [c.token_interval_s for _, c in cfgs])   # C' x K' seconds
    cap = prob.umax * mu * (1 - MARGIN)
    u = cap[:, None] * np.array(CUT_FRACTIONS)[None, :]              # K' x J tangent points, tokens/s
    cs = prob.c_slo
    g = u * u / (2 * mu[:, None] * (mu[:, None] - u))
    dg = u * (2 * mu[:, None] - u) / (2 * mu[:, None] * (mu[:, None] - u) ** 2)
    # Rows: classes (n_c), work (n_g), memory (n_g), cuts (n_g x n_j). Columns: x (n_c x n_g, class-major), t (n_g).
    per = 3 + n_j
    rows = np.empty((n_c, n_g, per), dtype=np.int32)
    vals = np.empty((n_c, n_g, per))
    gk = np.arange(n_g)
    rows[:, :, 0] = np.arange(n_c)[:, None]
    rows[:, :, 1] = n_c + gk[None, :]
    rows[:, :, 2] = n_c + n_g + gk[None, :]
    rows[:, :, 3:] = (n_c + 2 * n_g + gk[:, None] * n_j + np.arange(n_j)[None, :])[None, :, :]
    vals[:, :, 0] = 1.0
    vals[:, :, 1] = s0[:, None]
    reps = np.array([float(c.replicas) for _, c in cfgs])
    vals[:, :, 2] = tau * s0[:, None] + np.outer(prob.lpre[cls] / prob.lam[cls], reps)
    vals[:, :, 3:] = -cs * dg[None, :, :] * s0[:, None, None]
    t_rows = (n_c + 2 * n_g + gk[:, None] * n_j + np.arange(n_j)[None, :]).astype(np.int32)
    index = np.concatenate([rows.reshape(-1), t_rows.reshape(-1)])
    value = np.concatenate([vals.reshape(-1), np.ones(n_g * n_j)])
    n_x = n_c * n_g
    start = np.concatenate([np.arange(n_x) * per, n_x * per + np.arange(n_g) * n_j, [n_x * per + n_g * n_j]])
    inf = highspy.kHighsInf
    mem = np.array([cc.memory for _, cc in cfgs]) * (1 - MARGIN)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n_x + n_g, n_c + 2 * n_g + n_g * n_j
    lp.col_cost_ = np.concatenate([np.zeros(n_x), np.ones(n_g)])
    lp.col_lower_ = np.zeros(n_x + n_g)
    lp.col_upper_ = np.full(n_x + n_g, inf)
    lam = prob.lam[cls]
    lp.row_lower_ = np.concatenate([lam, np.full(2 * n_g, -inf), (cs * (g - dg * u)).reshape(-1)])
    lp.row_upper_ = np.concatenate([lam, cap, mem, np.full(n_g * n_j, inf)])
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = lp.num_col_, lp.num_row_
    lp.a_matrix_.start_ = start.astype(np.int32)
    lp.a_matrix_.index_ = index
    lp.a_matrix_.value_ = value
    h = tuned_highs()
    h.passModel(lp)
    h.run()
    if h.modelStatusToString(h.getModelStatus()) != "Optimal":
        return None
    sol = np.maximum(np.asarray(h.getSolution().col_value[:n_x], dtype=np.float64), 0.0).reshape(n_c, n_g)
    sol[sol < 1e-12 * lam[:, None]] = 0.0
    sol *= (lam / sol.sum(axis=1))[:, None]
    x = np.zeros((prob.n_classes, prob.n_groups))
    x[np.ix_(cls, [k for k, _ in cfgs])] = sol
    return x
