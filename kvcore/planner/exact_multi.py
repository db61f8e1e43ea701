"""Exact reference for **several groups** (K >= 2) on small instances: a certified spatial branch and bound.

The routing block is non-convex (:mod:`.queueing`), so no convex solver is exact. We enumerate the layouts z and
the admission vector a (as the one-group reference does) and, for each pair, branch over the routing box
``pi_ik in [lo_ik, hi_ik]`` for the admitted classes and the first K-1 groups (the last group takes the rest,
``pi_iK = 1 - sum_k pi_ik``). One best-first queue holds every (z, a, box) node.

**Lower bound of a node** (valid for every point of its box with objective below the incumbent):

1. *Lowest loads.* Each group's queueing term ``F_k = n q / (2 mu (mu - u))`` is nondecreasing in every flow
   ``x_ik`` (for s >= 0), and the stability and memory rows are linear in x with nonnegative coefficients. So at
   the box's lowest loads ``xlo_ik = A_i lo_ik`` (k < K), ``xlo_iK = A_i max(0, 1 - sum_k hi_ik)`` the (y, delta)
   problem is a relaxation; it is convex and solved by :func:`.continuous.solve_continuous` (its LP value is
   certified: a lower bound whether or not the cutting planes converged). A relaxation that is infeasible proves
   the box infeasible.
2. *First-order correction.* Along any nonnegative direction d, ``F_k(xlo + t d)`` is convex in t (a product of
   nonnegative nondecreasing convex factors n, q and 1/(mu - u)), so ``F_k(x) >= F_k(xlo) + grad_x F_k(xlo) . (x -
   xlo)`` for every feasible x >= xlo. Every point of the box routes the remainder ``R_i = A_i - sum_k xlo_ik`` of
   class i above the lowest loads, so the queueing term is at least its lowest-load value plus
   ``c_slo sum_i R_i min_k dF_k/dx_ik``. The gradient depends on s; it is nondecreasing in s, so it is evaluated
   at a lower bound of s: ``s_ik >= L_in + ylo_i - L_pre`` where ylo_i is the smallest reservation at which
   ``A_i (DRO_i(y) - min DRO_i)`` still fits in the incumbent's slack (a point that does not fit costs more than the
   incumbent, so it need not be bounded) and, tighter, at the least s_ik over the relaxation's final cutting-plane
   LP cut by ``objective <= UB (1 - tol)`` (``level`` in :func:`.continuous.solve_continuous`; an empty cut proves
   no point of the box is below the target). Without the floor on s the correction would make the bound's error
   second order in the box width; with it, the error shrinks faster than the width as boxes (and the level set)
   shrink, but near saturation (utilisation ~0.95) the bound stays loose along long valleys of near-equal routings.
3. *Pooled rows.* The remainder R_i goes to some group: the total work and total KV memory over all groups are
   bounded with the least per-group s_ik (and tau_ik s_ik) for R_i (``unrouted`` in
   :func:`.continuous.solve_continuous`), so the lowest-load relaxation does not free the groups' capacity.

**Upper bound**: the true objective (:func:`.state.evaluate`) at the centre of each box with the relaxation's
(y, delta) when that point is feasible, re-solved in (y, delta) at fixed routing when it comes within
:data:`RESOLVE_MARGIN` of the incumbent;
the start is BCD's plan. Branching: the coordinate with the widest flow range ``A_i (hi - lo)``, halved. A node is
pruned when its bound is ``>= UB (1 - tol)``, and the s-floor LPs bound only points below that target. The global
lower bound is the least bound of every node left open or dropped; the result certifies ``(UB - LB) / UB <= tol``
(status optimal) or reports the gap reached when the node limit (deterministic) or a time limit (benchmarks' outer
safety) stops it first (status feasible).
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvcore.planner.planmodel import Plan, PlanStatus
from kvcore.planner.bcd import run_bcd
from kvcore.planner.continuous import INFEASIBLE_STATUSES, ContinuousResult, solve_continuous
from kvcore.planner.problem import Problem
from kvcore.planner.result import build_plan, infeasible_plan
from kvcore.planner.state import State, evaluate

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

MAX_DIMS = 6
"""Largest routing box handled: admitted classes x (K - 1) coordinates."""
MAX_PAIRS = 4096
"""Largest number of (layout, admission) pairs enumerated."""
RESOLVE_MARGIN = 2e-3
"""A box centre is re-solved in (y, delta) when, with the relaxation's (y, delta), it is within this relative
margin of the incumbent (the relaxation's (y, delta) is optimal for the lowest loads, not for the centre)."""


@dataclass
class _Node:
    lb: float
    pair: int
    lo: FloatArray
    hi: FloatArray
    hint: tuple[FloatArray, FloatArray] | None


def _grad_x(x: FloatArray, s: FloatArray, mu: float) -> FloatArray:
    """dF/dx_i for F = n q / (2 mu (mu - u)); inf when u >= mu."""
    n = float(x.sum())
    u = float(np.dot(x, s))
    q = float(np.dot(x, s * s))
    gap = mu - u
    if gap <= 0:
        return np.full(x.shape, math.inf)
    return np.asarray(((q + n * s * s) / gap + n * q * s / (gap * gap)) / (2.0 * mu), dtype=np.float64)


def _y_floor(prob: Problem, i: int, weight: float, slack: float) -> float:
    """Smallest y in [0, y*] with weight (DRO_i(y) - min DRO_i) <= slack (bisection on the convex curve)."""
    c = prob.curves[i]
    if weight <= 0 or slack < 0:
        return 0.0
    budget = c.min_value + slack / weight * (1 + 1e-9) + 1e-9
    if c.value(0.0) <= budget:
        return 0.0
    lo, hi = 0.0, c.y_star
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if c.value(mid) <= budget:
            hi = mid
        else:
            lo = mid
    return max(lo - 1e-9 * max(1.0, c.lmax), 0.0)


def solve_exact_multi(prob: Problem, *, t0: float, tol: float = 1e-4, time_limit: float | None = None,
                      node_limit: int = 200_000, dro: str = "lp") -> Plan:
    """Certified branch and bound for K >= 2 groups; see the module docstring. ``node_limit`` (boxes branched) is
    the deterministic work limit; ``time_limit`` (seconds) only an outer safety for benchmarks."""
    C, K = prob.n_classes, prob.n_groups
    lam = prob.lam
    if any(not g.feasible_indices for g in prob.groups):
        return Plan(status=PlanStatus.ERROR, method="exact", solve_seconds=time.perf_counter() - t0,
                    reason="the multi-group exact reference needs a feasible layout in every group")
    n_pairs = math.prod(len(g.feasible_indices) for g in prob.groups) * 2 ** C
    if C * (K - 1) > MAX_DIMS or n_pairs > MAX_PAIRS:
        return Plan(status=PlanStatus.ERROR, method="exact", solve_seconds=time.perf_counter() - t0,
                    reason=f"beyond the multi-group exact reference's size limit: {C} classes x {K - 1} routing "
                           f"coordinates (max {MAX_DIMS}) and {n_pairs} (layout, admission) pairs (max {MAX_PAIRS})")
    # Incumbent: BCD's plan (any feasible point is a valid upper bound).
    run = run_bcd(prob)
    best_val = run.total if run.feasible else math.inf
    best_state: State | None = run.state.copy() if run.feasible else None
    pairs: list[tuple[tuple[int, ...], BoolArray]] = []
    for z in itertools.product(*(g.feasible_indices for g in prob.groups)):
        for bits in itertools.product((True, False), repeat=C):
            pairs.append((tuple(int(j) for j in z), np.array(bits, dtype=bool)))
    fixed = [prob.kappa * sum(prob.groups[k].configs[z[k]].phi for k in range(K)) +
             prob.c_rej * float(lam[~a].sum()) for z, a in pairs]
    mins = np.array([c.min_value for c in prob.curves])
    cheap = [fixed[p] + float(np.dot(np.where(a, lam, 0.0), mins)) - 1e-9 * max(1.0, fixed[p]) for p, (_, a) in
             enumerate(pairs)]
    floors: dict[int, FloatArray] = {}
    solves = 0
    errors: list[str] = []
    stuck: list[float] = []
    sub_tol = min(1e-6, tol * 0.02)
    discarded = [math.inf]  # the least bound of every node dropped without being branched (it stays valid)

    def x_of(pair: int, lo: FloatArray, hi: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(lowest loads, flows at the box centre)."""
        A = np.where(pairs[pair][1], lam, 0.0)
        xlo = np.zeros((C, K))
        xc = np.zeros((C, K))
        xlo[:, :K - 1] = A[:, None] * lo
        xlo[:, K - 1] = A * np.maximum(0.0, 1.0 - hi.sum(axis=1))
        mid = 0.5 * (lo + hi)
        xc[:, :K - 1] = A[:, None] * mid
        xc[:, K - 1] = A * np.maximum(0.0, 1.0 - mid.sum(axis=1))
        return xlo, xc

    def bound(pair: int, lo: FloatArray, hi: FloatArray, hint: tuple[FloatArray, FloatArray] | None
              ) -> tuple[float, ContinuousResult | None]:
        nonlocal solves
        z, a = pairs[pair]
        A = np.where(a, lam, 0.0)
        xlo, _ = x_of(pair, lo, hi)
        target = best_val * (1 - tol)  # only points below this need bounding: the rest cannot improve enough
        level = target - fixed[pair]
        res = solve_continuous(prob, z, a, xlo, dro=dro, tol=sub_tol, hint=hint,
                               unrouted=np.maximum(A - xlo.sum(axis=1), 0.0),
                               level=level * (1 + 1e-9) + 1e-9 if math.isfinite(level) else None)
        solves += 1
        if not res.ok:
            if res.raw_status in INFEASIBLE_STATUSES:
                return math.inf, None
            errors.append(res.raw_status)
            return -math.inf, None
        lb = fixed[pair] + res.lower
        ylo = floors.get(pair)
        if ylo is not None and prob.c_slo > 0:
            rem = A - xlo.sum(axis=1)
            s_lb = np.repeat(np.maximum(prob.lin + ylo - prob.lpre, 0.0)[:, None], K, axis=1)
            if res.s_floor is not None:
                if np.any(np.isinf(res.s_floor)):
                    discarded[0] = min(discarded[0], target)
                    return math.inf, None  # no point of the box is below the target
                s_lb = np.maximum(s_lb, res.s_floor)
            g = np.stack([_grad_x(xlo[:, k], s_lb[:, k], prob.groups[k].configs[z[k]].mu) for k in range(K)],
                         axis=1)
            gmin = g.min(axis=1)
            if np.all(np.isfinite(gmin)):
                lb += prob.c_slo * float(np.dot(np.maximum(rem, 0.0), gmin)) * (1 - 1e-9)
        return lb, res

    def try_point(pair: int, x: FloatArray, y: FloatArray, delta: FloatArray) -> None:
        nonlocal best_val, best_state, solves
        z, a = pairs[pair]
        st = State(z, a.copy(), x.copy(), y.copy(), delta.copy())
        ev = evaluate(prob, st)
        if not ev.feasible or ev.total >= best_val * (1 + RESOLVE_MARGIN):
            return  # the relaxation's (y, delta) is not optimal at the centre: re-solve near-incumbent points
        res = solve_continuous(prob, z, a, x, tol=1e-9, hint=(y, delta))
        solves += 1
        if res.ok and fixed[pair] + res.value < ev.total:
            st = State(z, a.copy(), x.copy(), res.y.copy(), res.delta.copy())
            ev = evaluate(prob, st)
        if ev.feasible and ev.total < best_val:
            best_val, best_state = ev.total, st

    heap: list[tuple[float, int, _Node]] = []
    counter = itertools.count()
    order = sorted(range(len(pairs)), key=lambda p: cheap[p])
    for p in order:
        if cheap[p] >= best_val * (1 - tol):
            discarded[0] = min(discarded[0], cheap[p])
            continue
        _, a = pairs[p]
        slack = best_val - cheap[p] if math.isfinite(best_val) else math.inf
        if math.isfinite(slack):
            floors[p] = np.array([_y_floor(prob, i, float(lam[i]), slack) if a[i] else 0.0 for i in range(C)])
        lo = np.zeros((C, K - 1))
        hi = np.where(a[:, None], 1.0, 0.0) * np.ones((C, K - 1))
        lb, res = bound(p, lo, hi, None)
        if lb == -math.inf:
            stuck.append(cheap[p])
            continue
        if res is None:
            continue
        _, xc = x_of(p, lo, hi)
        try_point(p, xc, res.y, res.delta)
        heapq.heappush(heap, (lb, next(counter), _Node(lb, p, lo, hi, (res.y, res.delta))))
    nodes = 0
    stopped_by = ""
    while heap:
        lb, _, node = heap[0]
        if lb >= best_val * (1 - tol):
            break  # the rest of the queue stays in the global bound below
        if nodes >= node_limit:
            stopped_by = "node"
        elif time_limit is not None and time.perf_counter() - t0 > time_limit:
            stopped_by = "time"
        if stopped_by:
            break
        heapq.heappop(heap)
        nodes += 1
        _, a = pairs[node.pair]
        A = np.where(a, lam, 0.0)
        width = A[:, None] * (node.hi - node.lo)
        i, k = np.unravel_index(int(np.argmax(width)), width.shape)
        if width[i, k] <= 0:
            stuck.append(node.lb)  # a point box: nothing to branch; its bound stays in the global bound
            continue
        mid = 0.5 * (node.lo[i, k] + node.hi[i, k])
        for side in (0, 1):
            lo, hi = node.lo.copy(), node.hi.copy()
            if side == 0:
                hi[i, k] = mid
            else:
                lo[i, k] = mid
            if K > 2:  # the box's pi must be able to sum to <= 1: tighten the other upper ends
                free = 1.0 - lo.sum(axis=1)
                if np.any(free < -1e-12):
                    continue
                hi = np.minimum(hi, lo + free[:, None])
            clb, res = bound(node.pair, lo, hi, node.hint)
            if clb == -math.inf:
                stuck.append(node.lb)
                continue
            if res is None:
                continue
            clb = max(clb, node.lb)
            _, xc = x_of(node.pair, lo, hi)
            try_point(node.pair, xc, res.y, res.delta)
            if clb < best_val * (1 - tol):
                heapq.heappush(heap, (clb, next(counter), _Node(clb, node.pair, lo, hi, (res.y, res.delta))))
            else:
                discarded[0] = min(discarded[0], clb)
    seconds = time.perf_counter() - t0
    if best_state is None:
        if not heap and not stuck:
            return infeasible_plan(prob, "no (layout, admission, routing) point is feasible", seconds=seconds,
                                   method="exact")
        return Plan(status=PlanStatus.ERROR, method="exact", solve_seconds=seconds,
                    reason="no feasible point found within the limits")
    lower = min([best_val, discarded[0]] + [n[0] for n in heap] + stuck)
    gap = (best_val - lower) / max(1.0, abs(best_val))
    certified = gap <= tol * (1 + 1e-9) and not errors  # pruning at UB (1 - tol) can leave exactly tol
    status = PlanStatus.OPTIMAL if certified else PlanStatus.FEASIBLE
    reason = (f"{len(pairs)} (layout, admission) pairs, {nodes} routing boxes branched, {solves} subproblems; "
              f"certified gap {gap:.2e}")
    if stopped_by:
        reason += f" (stopped by the {stopped_by} limit before the target gap)"
    if errors:
        reason += f"; HiGHS failed on {len(errors)} subproblem(s) ({errors[0]}): those boxes keep their parent's bound"
    return build_plan(prob, best_state, status=status, reason=reason,
                      raw_status=f"exact objective={best_val!r} lower_bound={lower!r} gap={gap!r} nodes={nodes}",
                      method="exact", iterations=solves, seconds=seconds, previous=None)
