"""Exact reference solver for small instances (it exists so the BCD gap is measured, not assumed).

Scope: instances with **one group** (routing is then forced: pi_i1 = 1), solved here; with **K >= 2 groups**
:func:`solve_exact` hands over to :mod:`.exact_multi`, a spatial branch and bound over the routing box with a
certified relative gap (status ``error`` with a reason beyond its size limit). :func:`exact_bounds` reads the
lower bound, upper bound and certified gap of either.

Method: enumerate every layout z of the group and every admission vector a in {0,1}^C (branch and bound: a pair is
skipped when its lower bound ``kappa phi(z) + c_rej sum_rejected lambda + sum_admitted lambda_i min DRO_i`` is not
below the incumbent, which is valid because the queueing term is >= 0 and DRO_i(y) >= min DRO_i; each class's min
DRO_i comes from the eq. 6 LP on HiGHS). For each remaining pair the convex (y, delta) problem is solved by
cutting planes on HiGHS with the DRO terms written out as the full eq. 6 LP (gamma_i, theta_in per sample, not the
planner's knapsack evaluator), stopped at a certified relative gap of ``SUB_TOL``. The answer is therefore within
``SUB_TOL`` (relative) of the global optimum of the model; ``Plan.raw_status`` carries the global lower bound.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np

from kvcore.planner.instance import Instance, load_instance
from kvcore.planner.planmodel import Plan, PlanStatus
from kvcore.planner.continuous import INFEASIBLE_STATUSES, ContinuousResult, solve_continuous
from kvcore.planner.problem import Problem, compile_problem
from kvcore.planner.result import build_plan, infeasible_plan
from kvcore.planner.state import State

MAX_PAIRS = 2**20
"""Most (layout, admission) pairs the one-group reference enumerates (about 200 MB of bounds; Table III's largest,
15 classes x 12 layouts, is 393,216)."""
SUB_TOL = 1e-8
"""Certified relative gap of each (y, delta) subproblem (HiGHS's 1e-9 tolerances make tighter ones noise)."""


def _min_dro_lp(prob: Problem, i: int) -> float:
    """min_y DRO_i(y) from the eq. 6 LP (one class, no queueing): the bound used for pruning."""
    from kvcore.reservation.lp import solve_dro_lp
    c = prob.curves[i]
    inst = prob.instance.classes[i]
    lp = solve_dro_lp(inst.samples(), cp=c.cp, cw=c.cw, lmax=c.lmax, eps=c.eps)
    return float(lp.highs_objective) if math.isfinite(lp.highs_objective) else 0.0


def solve_exact(instance: Instance, *, time_limit: float | None = None, tol: float = 1e-4,
                node_limit: int = 200_000) -> Plan:
    """Global optimum (to SUB_TOL) of a one-group instance; with several groups, :mod:`.exact_multi`'s branch and
    bound to a certified relative gap ``tol`` (``tol`` applies to that case only).

    ``node_limit`` is the deterministic work limit: (layout, admission) subproblems solved with one group, routing
    boxes branched with several. Stopped by it, the answer is the best point found with its certified gap (status
    ``feasible``), the same on every machine. ``time_limit`` (seconds) is only an outer safety for benchmarks and
    the CLI: where it stops the search depends on the machine's speed and load, so tests never use it."""
    t0 = time.perf_counter()
    inst = load_instance(instance)
    prob = compile_problem(inst)
    if prob.n_groups != 1:
        from kvcore.planner.exact_multi import solve_exact_multi
        return solve_exact_multi(prob, t0=t0, tol=tol, time_limit=time_limit, node_limit=node_limit)
    group = prob.groups[0]
    if not group.feasible_indices:
        return infeasible_plan(prob, f"{group.name}: no feasible layout", seconds=time.perf_counter() - t0,
                               method="exact")
    C = prob.n_classes
    lam = prob.lam
    n_pairs = len(group.feasible_indices) * 2**C
    if n_pairs > MAX_PAIRS:
        return Plan(status=PlanStatus.ERROR, method="exact", solve_seconds=time.perf_counter() - t0,
                    reason=f"beyond the exact reference's size limit: {n_pairs:,} (layout, admission) pairs "
                           f"({len(group.feasible_indices)} layouts x 2^{C} admission sets; max {MAX_PAIRS:,})")
    min_dro = np.array([_min_dro_lp(prob, i) * 0.999999 - 1e-9 for i in range(C)])
    # Lower bound of each (z, a); enumerate in increasing bound order.
    pairs = []
    for j in group.feasible_indices:
        fixed = prob.kappa * group.configs[j].phi
        for bits in itertools.product((True, False), repeat=C):
            a = np.array(bits, dtype=bool)
            lb = fixed + prob.c_rej * float(lam[~a].sum()) + float((lam * min_dro)[a].sum())
            pairs.append((lb, j, a))
    pairs.sort(key=lambda t: t[0])
    best_val = math.inf
    best: tuple[int, np.ndarray, ContinuousResult] | None = None
    global_lb = math.inf
    solved = 0
    stopped_by = ""
    errors: list[str] = []
    for lb, j, a in pairs:
        if lb >= best_val * (1 - 1e-12):
            global_lb = min(global_lb, lb)
            break  # sorted: every later pair has a bound at least this large
        if solved >= node_limit:
            stopped_by = "node"
        elif time_limit is not None and time.perf_counter() - t0 > time_limit:
            stopped_by = "time"
        if stopped_by:
            global_lb = min(global_lb, lb)
            break
        x = np.where(a, lam, 0.0)[:, None]
        res = solve_continuous(prob, (j,), a, x, dro="lp", tol=SUB_TOL)
        solved += 1
        if not res.ok:
            if res.raw_status not in INFEASIBLE_STATUSES:
                errors.append(res.raw_status)
                global_lb = min(global_lb, lb)  # unsolved: only its bound is known
            continue
        fixed = prob.kappa * group.configs[j].phi + prob.c_rej * float(lam[~a].sum())
        total = fixed + res.value
        global_lb = min(global_lb, fixed + res.lower)
        if total < best_val:
            best_val, best = total, (j, a.copy(), res)
    seconds = time.perf_counter() - t0
    if best is None and stopped_by:
        return Plan(status=PlanStatus.ERROR, method="exact", solve_seconds=seconds,
                    reason=f"stopped by the {stopped_by} limit after {solved} subproblems, before a feasible point")
    if best is None:
        return infeasible_plan(prob, "no (layout, admission) pair is feasible", seconds=seconds, method="exact")
    j, a, res = best
    st = State((j,), a, np.where(a, lam, 0.0)[:, None].copy(), res.y.copy(), res.delta.copy())
    global_lb = min(global_lb, best_val)
    gap = (best_val - global_lb) / max(1.0, abs(best_val))
    status = PlanStatus.FEASIBLE if stopped_by or errors else PlanStatus.OPTIMAL
    reason = (f"stopped by the {stopped_by} limit after {solved} subproblems; best found, certified gap {gap:.2e}"
              if stopped_by else
              f"enumerated {len(pairs)} (layout, admission) pairs, solved {solved}; certified gap {gap:.2e}")
    if errors:
        reason += f"; HiGHS failed on {len(errors)} subproblem(s) ({errors[0]}): not certified"
    return build_plan(prob, st, status=status, reason=reason,
                      raw_status=f"exact objective={best_val!r} lower_bound={global_lb!r} gap={gap!r}", method="exact",
                      iterations=solved, seconds=seconds, previous=None)


def exact_objective(plan: Plan) -> float:
    """The exact reference's own objective (eq. 6 LP values), parsed from ``raw_status``."""
    for part in plan.raw_status.split():
        if part.startswith("objective="):
            return float(part.split("=", 1)[1])
    return math.nan


def exact_bounds(plan: Plan) -> tuple[float, float, float]:
    """(lower bound, upper bound = objective of the returned plan, certified relative gap) from ``raw_status``;
    NaNs when the plan carries none (status error or infeasible)."""
    vals = {}
    for part in plan.raw_status.split():
        key, _, val = part.partition("=")
        if key in ("objective", "lower_bound", "gap"):
            vals[key] = float(val)
    return vals.get("lower_bound", math.nan), vals.get("objective", math.nan), vals.get("gap", math.nan)
