"""The planner for large instances (many classes x many groups): price the work, then build the plan from the
price and polish it.

The Lagrangian dual of :mod:`.bound` says, at the best work price theta, what each class would reserve and whether
it is admitted, which layout each group would run and how much work U_k it would carry. Those minimisers nearly
form a plan, and this module completes one, in four steps, none of which grows faster than C x K:

1. **Layouts and admission** from the dual at theta (ties towards the larger load).
2. **Loads.** With the classes' work W = sum_i a_i lambda_i (ell_i + y_i) (tokens/s; prefix cached), the group loads
   are U_k(theta') of the same closed form at the price theta' where they sum to W (bisection; the marginal
   queueing cost is then equal across groups). If W exceeds what the layouts can carry at max_utilisation, the
   class side's price is raised until it fits (and classes the dual refuses at that price are refused).
3. **Routing** by filling: classes sorted by work per request s_i, groups in a fixed order, each group takes the
   next classes' work up to U_k (a class straddling two groups is split). Every group gets a contiguous range of
   s, so its requests are alike and its Lambda T is close to the Cauchy-Schwarz value the bound charges; at most
   C + K - 1 (class, group) pairs carry traffic.
4. **Reservations and prefix fractions** for that routing: the convex (y, delta) block of
   :mod:`.continuous`, solved to its certificate with every constraint of the model (KV memory, prefix-cache
   copies, the true Lambda_k T_k). Steps 3-4 are repeated with the new reservations while the objective falls.

The plan is re-checked by :func:`.state.evaluate` like any other. ``previous`` (the last plan's state) only seeds
the price search.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kvcore.planner.bound import Dual, DualPoint, LowerBound, lower_bound, priced_load
from kvcore.planner.continuous import ContinuousResult, solve_continuous
from kvcore.planner.problem import Problem
from kvcore.planner.state import State, config_of, evaluate

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

ROUNDS = 3
"""At most this many (routing, (y, delta)) rounds after the first."""
READMIT = 8
"""Refused classes (largest rate first) each tried once with admission forced: the price refuses whole classes
where the optimum may carry one more at smaller reservations (an integrality gap the dual cannot see)."""
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


def _group_loads(prob: Problem, z: tuple[int, ...], work: float) -> FloatArray | None:
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


def fill_routing(prob: Problem, a: BoolArray, s: FloatArray, loads: FloatArray) -> FloatArray:
    """x (requests/s) routing each admitted class's work lambda_i s_i into groups holding ``loads`` (tokens/s),
    classes in order of s, groups in index order (module docstring, step 3)."""
    C, K = prob.n_classes, prob.n_groups
    x = np.zeros((C, K))
    order = [int(i) for i in np.argsort(s, kind="stable") if a[i] and prob.lam[i] > 0]
    room = loads.astype(np.float64).copy()
    groups = [k for k in range(K) if room[k] > 0]
    g = 0
    for i in order:
        left = float(prob.lam[i])   # requests/s still to place
        while left > 0.0:
            while g < len(groups) - 1 and room[groups[g]] <= 1e-9 * float(loads[groups[g]]):
                g += 1
            k = groups[g] if groups else 0
            fits = room[k] / s[i] if s[i] > 0 else math.inf
            if fits >= left or g == len(groups) - 1:   # the last group takes any round-off
                x[i, k] += left
                room[k] -= left * s[i]
                left = 0.0
            else:
                x[i, k] += fits
                room[k] = 0.0
                left -= fits
    return x


def _start(dual: Dual, point: DualPoint, force: BoolArray | None = None
           ) -> tuple[tuple[int, ...], BoolArray, FloatArray, FloatArray] | None:
    """(z, a, y, loads) from the dual point; if the classes' work does not fit the layouts at max_utilisation, the
    least higher price at which it does (bisection on the class side, layouts kept). Classes in ``force`` are
    admitted whatever the price."""
    prob = dual.prob
    z = point.layout
    ell = np.maximum(prob.lin - prob.lpre, 0.0)
    cap = prob.umax * sum(c.mu for k in range(prob.n_groups) if (c := config_of(prob, z, k)) is not None)
    keep = np.zeros(prob.n_classes, dtype=bool) if force is None else force

    def work(p: DualPoint) -> float:
        return float(np.dot(np.where(p.admitted | keep, prob.lam, 0.0), ell + p.y))

    fit = point if work(point) <= cap * (1 - 1e-9) else None
    if fit is None:
        lo, hi = point.theta, max(point.theta, 1e-6)
        for _ in range(60):
            hi *= 2.0
            p = dual.point(hi)
            if work(p) <= cap * (1 - 1e-9):
                fit = p
                break
            lo = hi
        for _ in range(50 if fit is not None else 0):
            if hi - lo <= 1e-9 * hi:
                break
            mid = 0.5 * (lo + hi)
            p = dual.point(mid)
            if work(p) <= cap * (1 - 1e-9):
                fit, hi = p, mid
            else:
                lo = mid
    if fit is None:
        return None
    loads = _group_loads(prob, z, work(fit))
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
        x = fill_routing(prob, a, s, loads)
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
        nxt = _group_loads(prob, z, float(np.dot(np.where(a, prob.lam, 0.0), s)))
        if nxt is None:
            break
        loads = nxt
    if best is not None:
        best.errors = errors
    return best if best is not None and math.isfinite(best.total) else None


def run_fleet(prob: Problem, *, previous_theta: float | None = None) -> FleetRun:
    """Plan ``prob`` by the steps of the module docstring; ``previous_theta`` (the price the plan in force reveals,
    :func:`.warm.revealed_price`) is where the price search starts."""
    dual = Dual(prob)
    bound = lower_bound(dual, start=previous_theta)
    C, K = prob.n_classes, prob.n_groups
    start = _start(dual, bound.point)
    best = _complete(prob, *start) if start is not None else None
    if best is None:
        st = State(tuple(-1 for _ in range(K)), np.zeros(C, dtype=bool), np.zeros((C, K)), np.zeros(C),
                   np.zeros((C, K)))
        why = "no price makes the classes' work fit the groups" if start is None else \
            "the routing built from the work price is infeasible"
        return FleetRun(st, math.inf, bound, 0, False, why)
    log: list[str] = []
    refused = sorted((i for i in range(C) if not best.state.a[i] and prob.lam[i] > 0), key=lambda i: -prob.lam[i])
    for j in refused[:READMIT]:
        if best.state.a[j]:
            continue
        force = best.state.a.copy()
        force[j] = True
        trial = _start(dual, bound.point, force)
        cand = _complete(prob, *trial) if trial is not None else None
        if cand is not None and cand.total < best.total * (1 - STOP_RTOL):
            log.append(f"re-admitted {prob.class_names[j]} (the price alone refused it)")
            best = cand
    return FleetRun(best.state, best.total, bound, best.rounds, True, "priced and filled", log, best.errors)
