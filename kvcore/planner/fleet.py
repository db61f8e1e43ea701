"""The planner for large instances (many classes x many groups): price the work, then build the plan from the
prices and polish it.

The Lagrangian dual of :mod:`.bound` says, at the best prices (theta for work, beta for KV memory-time), what each
class would reserve and whether it is admitted, which layout each group would run and how much work U_k it would
carry. Those minimisers nearly form a plan, and this module completes one, in four steps, none of which grows
faster than C x K:

1. **Layouts and admission** from the dual (ties towards the larger load).
2. **Loads** (:func:`.fleet_fill.group_loads`): with the classes' work W = sum_i a_i lambda_i (ell_i + y_i)
   (tokens/s; prefix cached), the group loads are U_k of the dual's closed form at the price where they sum to W
   (the marginal queueing cost is then equal across groups). If W (or the memory-time it needs) exceeds what the
   layouts hold, the class side's work price is raised until it fits (classes the dual refuses there are refused).
3. **Routing** by filling (:func:`.fleet_fill.fill_routing`): classes sorted by work per request s_i, groups in a
   fixed order, each group takes the next classes' work up to U_k and its KV memory (a class straddling two groups
   is split). Every group gets a contiguous range of s, so its requests are alike and its Lambda T is close to the
   Cauchy-Schwarz value the bound charges; at most about C + K pairs carry traffic.
4. **Reservations and prefix fractions** for that routing: the convex (y, delta) block of :mod:`.continuous`,
   solved to its certificate with every constraint of the model (KV memory, prefix-cache copies, the true
   Lambda_k T_k). Steps 3-4 are repeated with the new reservations while the objective falls.

If no routing fits (KV memory short where the pooled dual did not see it; filling then falls back to a routing LP,
:func:`.fleet_fill.lp_routing`), the work price is doubled and the steps redone, until refusing is cheaper than
serving any class; if even that fails, every class is refused (always feasible). Refused classes are then retried
with admission forced. The plan is re-checked by :func:`.state.evaluate` like any other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kvcore.planner.bound import Dual, DualPoint, LowerBound, lower_bound
from kvcore.planner.continuous import ContinuousResult, solve_continuous
from kvcore.planner.fleet_fill import MARGIN, fill_routing, group_loads, lp_routing
from kvcore.planner.problem import Problem
from kvcore.planner.state import State, config_of, evaluate

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

ROUNDS = 3
"""At most this many (routing, (y, delta)) rounds after the first."""
READMIT = 8
"""Refused classes (largest rate first) each tried once with admission forced: the price refuses whole classes
where the optimum may carry one more at smaller reservations (an integrality gap the dual cannot see)."""
ESCALATIONS = 60
"""At most this many doublings of the work price when no routing fits the groups' KV memory (they stop earlier, at
the price where refusing any class is cheaper than serving its least work)."""
STOP_RTOL = 1e-7
"""Stop the rounds when one lowers the objective by less than this fraction."""


@dataclass
class FleetRun:
    state: State
    total: float
    bound: LowerBound
    rounds: int
    feasible: bool
    reason: str
    log: list[str] = field(default_factory=list)
    solver_errors: list[str] = field(default_factory=list)


def _start(dual: Dual, point: DualPoint, force: BoolArray | None = None
           ) -> tuple[tuple[int, ...], BoolArray, FloatArray, FloatArray] | None:
    """(z, a, y, loads) from the dual point; if the classes' work (or its memory-time) does not fit the layouts,
    the least higher work price at which it does (bisection on the class side, layouts kept). Classes in ``force``
    are admitted whatever the price."""
    prob = dual.prob
    z = point.layout
    ell = np.maximum(prob.lin - prob.lpre, 0.0)
    cfgs = [c for k in range(prob.n_groups) if (c := config_of(prob, z, k)) is not None]
    cap = prob.umax * sum(c.mu for c in cfgs) * (1 - MARGIN)
    room = sum(c.memory / c.token_interval_s for c in cfgs) * (1 - MARGIN)
    keep = np.zeros(prob.n_classes, dtype=bool) if force is None else force

    def work(p: DualPoint) -> FloatArray:
        return np.asarray(np.where(p.admitted | keep, prob.lam, 0.0) * (ell + p.y), dtype=np.float64)

    def fits(p: DualPoint) -> bool:
        w = work(p)
        return float(w.sum()) <= cap and float(np.dot(w, prob.mean_out)) <= room

    fit = point if fits(point) else None
    if fit is None:
        lo, hi = point.theta, max(point.theta, 1e-6)
        for _ in range(60):
            hi *= 2.0
            p = dual.point(hi, point.beta)
            if fits(p):
                fit = p
                break
            lo = hi
        for _ in range(50 if fit is not None else 0):
            if hi - lo <= 1e-9 * hi:
                break
            mid = 0.5 * (lo + hi)
            p = dual.point(mid, point.beta)
            if fits(p):
                fit, hi = p, mid
            else:
                lo = mid
    if fit is None:
        return None
    loads = group_loads(prob, z, float(work(fit).sum()))
    return None if loads is None else (z, fit.admitted | keep, fit.y.copy(), loads)


@dataclass
class _Done:
    total: float
    state: State
    rounds: int
    errors: list[str]


def _complete(prob: Problem, z: tuple[int, ...], a: BoolArray, y: FloatArray, loads: FloatArray) -> _Done | None:
    """Steps 3-4 of the module docstring, repeated while the objective falls; None if no round is feasible."""
    C, K = prob.n_classes, prob.n_groups
    hint = (y, np.ones((C, K)))
    s = np.maximum(prob.lin - prob.lpre, 0.0) + y
    best: _Done | None = None
    errors: list[str] = []
    for rounds in range(1, ROUNDS + 2):
        x = fill_routing(prob, z, a, s, loads)
        if x is None and rounds == 1:
            x = lp_routing(prob, z, a, y)
        if x is None:
            break
        res: ContinuousResult = solve_continuous(prob, z, a, x, hint=hint, tol=1e-9)
        if not res.ok:
            errors.append(res.raw_status)
            break
        st = State(z, a.copy(), x, res.y.copy(), res.delta.copy())
        ev = evaluate(prob, st)
        total = ev.total if ev.feasible else math.inf
        last = best.total if best is not None else math.inf
        if best is None or total < best.total:
            best = _Done(total, st, rounds, errors)
        if total >= last * (1 - STOP_RTOL):
            break
        hint = (res.y, res.delta)
        s = prob.lin + res.y - np.average(res.delta, axis=1, weights=np.maximum(x, 1e-300)) * prob.lpre
        nxt = group_loads(prob, z, float(np.dot(np.where(a, prob.lam, 0.0), s)))
        if nxt is None:
            break
        loads = nxt
    if best is not None:
        best.errors = errors
    return best if best is not None and math.isfinite(best.total) else None


def _plan_at(dual: Dual, point: DualPoint, force: BoolArray | None = None, *, escalate: bool = True
             ) -> tuple[_Done | None, float]:
    """Steps 1-4 from ``point``, doubling the work price while no routing fits (if ``escalate``), up to the price
    at which serving any class's least work costs more than refusing it; (result, factor the price was raised by)."""
    prob = dual.prob
    ell = np.maximum(prob.lin - prob.lpre, 0.0)
    top = 2.0 * prob.c_rej / max(float(ell[prob.lam > 0].min(initial=1.0)), 1e-9)
    theta, factor = max(point.theta, 1e-9), 1.0
    for _ in range(ESCALATIONS + 1):
        p = point if factor == 1.0 else dual.point(theta * factor, point.beta)
        start = _start(dual, p, force)
        done = _complete(prob, *start) if start is not None else None
        if done is not None or theta * factor >= top or not escalate:
            return done, factor
        factor *= 2.0
    return None, factor


def _refuse_all(prob: Problem, z: tuple[int, ...]) -> _Done:
    """The plan that refuses every class: always feasible (no traffic), the last resort."""
    C, K = prob.n_classes, prob.n_groups
    st = State(z, np.zeros(C, dtype=bool), np.zeros((C, K)), np.array([c.y_star for c in prob.curves]),
               np.zeros((C, K)))
    return _Done(evaluate(prob, st).total, st, 0, [])


def run_fleet(prob: Problem, *, previous_theta: float | None = None) -> FleetRun:
    """Plan ``prob`` by the steps of the module docstring; ``previous_theta`` (the price the plan in force reveals,
    :func:`.warm.revealed_price`) is where the price search starts."""
    dual = Dual(prob)
    bound = lower_bound(dual, start=previous_theta)
    C = prob.n_classes
    found, raised = _plan_at(dual, bound.point)
    best = found if found is not None else _refuse_all(prob, bound.point.layout)
    log = [] if found is not None else ["no routing fits at any work price: every class refused"]
    log += [f"work price raised {raised:.3g}x for KV memory"] if raised > 1 and found is not None else []
    refused = sorted((i for i in range(C) if not best.state.a[i] and prob.lam[i] > 0), key=lambda i: -prob.lam[i])
    for j in refused[:READMIT]:
        if best.state.a[j]:
            continue
        force = best.state.a.copy()
        force[j] = True
        cand, _ = _plan_at(dual, bound.point, force, escalate=False)
        if cand is not None and cand.total < best.total * (1 - STOP_RTOL):
            log.append(f"re-admitted {prob.class_names[j]} (the price alone refused it)")
            best = cand
    return FleetRun(best.state, best.total, bound, best.rounds, True, "priced and filled", log, best.errors)
