"""Block coordinate descent over the joint problem.

Write ``J(z, a, x) = kappa sum_k phi_k(z_k) + c_rej sum_i (1 - a_i) lambda_i + V(z, a, x)`` where ``V`` is the
optimal value of the convex (y, delta) block (:mod:`.continuous`, solved to a certified 1e-8 relative gap). BCD
alternates, until a sweep improves J by less than ``tol`` (relative):

1. **z block** — per group, every allowed layout is tried with the other blocks fixed (routing kept, and also
   re-spread in proportion to service rates); the best is kept.
2. **r/delta block** — solved exactly inside every evaluation of J.
3. **pi block** — pairwise transfers (:mod:`.routing`) with (y, delta) fixed, then the r/delta block again.
4. **admission block** — single flips and (refused, admitted) swaps. A move is skipped when a bound proves it
   cannot help: refusing j saves at most ``lambda_j DRO_j(y_j)`` plus every other admitted class's excess over
   its DRO minimum plus the whole queueing term, and costs ``c_rej lambda_j``; admitting i costs at least
   ``lambda_i min DRO_i``. A flip that makes the current layouts infeasible is retried with the z block re-run
   (swaps keep the layouts).

Start: every class admitted, each group at its highest-throughput layout, routing proportional to service rates.
If that is infeasible, the z block looks for a feasible layout, then classes are refused greedily (the one whose
refusal gives the cheapest feasible point at the current layouts, then with the layouts re-chosen, else the one
with the most irreducible work) until feasible.

Work is reused: profiles are resolved once, DRO curves and their cut pools persist, every J(z, a, x)
evaluation is memoised on (z, a, x), and each new evaluation is seeded with queueing tangents at the solution of
the point it was reached from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kvcore.planner.continuous import INFEASIBLE_STATUSES, ContinuousResult, solve_continuous
from kvcore.planner.problem import Problem
from kvcore.planner.routing import improve_routing
from kvcore.planner.state import State, config_of

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass
class _Point:
    z: tuple[int, ...]
    a: BoolArray
    x: FloatArray
    cont: ContinuousResult

    def total(self, prob: Problem) -> float:
        if not self.cont.ok:
            return math.inf
        fixed = sum(prob.kappa * cfg.phi for k in range(prob.n_groups)
                    if (cfg := config_of(prob, self.z, k)) is not None)
        return fixed + prob.c_rej * float(prob.lam[~self.a].sum()) + self.cont.value


@dataclass
class BcdRun:
    state: State
    total: float
    sweeps: int
    solves: int
    feasible: bool
    reason: str
    log: list[str] = field(default_factory=list)
    solver_errors: list[str] = field(default_factory=list)


class _Bcd:
    def __init__(self, prob: Problem) -> None:
        self.prob = prob
        self.memo: dict[bytes, _Point] = {}
        self.solves = 0
        self.solver_errors: list[str] = []

    def proportional(self, z: tuple[int, ...], a: BoolArray) -> FloatArray:
        prob = self.prob
        mu = np.array([cfg.mu if (cfg := config_of(prob, z, k)) is not None else 0.0 for k in range(prob.n_groups)])
        x = np.zeros((prob.n_classes, prob.n_groups))
        if mu.sum() > 0:
            x = np.outer(np.where(a, prob.lam, 0.0), mu / mu.sum())
        return x

    def point(self, z: tuple[int, ...], a: BoolArray, x: FloatArray, hint: _Point | None = None) -> _Point:
        key = np.asarray(z, np.int64).tobytes() + a.tobytes() + np.round(x, 12).tobytes()
        hit = self.memo.get(key)
        if hit is None:
            self.solves += 1
            seed = (hint.cont.y, hint.cont.delta) if hint is not None and hint.cont.ok else None
            hit = _Point(z, a.copy(), x.copy(), solve_continuous(self.prob, z, a, x, hint=seed))
            if not hit.cont.ok and hit.cont.raw_status not in INFEASIBLE_STATUSES:
                self.solver_errors.append(hit.cont.raw_status)
            self.memo[key] = hit
        return hit

    def best(self, *points: _Point) -> _Point:
        return min(points, key=lambda p: p.total(self.prob))

    def z_block(self, cur: _Point) -> _Point:
        prob = self.prob
        best = cur
        for k in range(prob.n_groups):
            for j in prob.groups[k].feasible_indices:
                if j == best.z[k]:
                    continue
                z = best.z[:k] + (j,) + best.z[k + 1:]
                cands = [self.point(z, best.a, best.x, best)] if prob.n_groups == 1 else [
                    self.point(z, best.a, best.x, best), self.point(z, best.a, self.proportional(z, best.a), best)]
                best = self.best(best, *cands)
        return best

    def z_block_from(self, z: tuple[int, ...], a: BoolArray) -> _Point:
        return self.z_block(self.point(z, a, self.proportional(z, a)))

    def pi_block(self, cur: _Point) -> _Point:
        if self.prob.n_groups < 2 or not cur.cont.ok:
            return cur
        x = improve_routing(self.prob, cur.z, cur.x, cur.cont.y, cur.cont.delta)
        return self.best(cur, self.point(cur.z, cur.a, x, cur))

    def flip(self, cur: _Point, a: BoolArray, *, relayout: bool = True) -> _Point:
        x = cur.x.copy()
        prop = self.proportional(cur.z, a)
        for i in np.flatnonzero(a != cur.a):
            x[i] = prop[i]
        cand = self.point(cur.z, a, x, cur)
        if not cand.cont.ok and relayout:
            cand = self.z_block_from(cur.z, a)
        return cand

    def saving_bound(self, cur: _Point, j: int) -> float:
        """An upper bound on how much the (y, delta) value can fall if class j is refused: its own term, every
        other class's excess over its DRO minimum, and the whole queueing term."""
        prob = self.prob
        y = cur.cont.y
        lam = np.where(cur.a, prob.lam, 0.0)
        dro = np.array([prob.curves[i].value(float(y[i])) if lam[i] > 0 else 0.0 for i in range(prob.n_classes)])
        mins = np.array([c.min_value for c in prob.curves])
        queue = cur.cont.value - float(np.dot(lam, dro))
        return float(lam[j] * dro[j] + np.dot(lam, dro - mins) - lam[j] * (dro[j] - mins[j]) + max(queue, 0.0))

    def admission_block(self, cur: _Point) -> _Point:
        prob = self.prob
        best = cur
        if not best.cont.ok:
            return best
        for i in range(prob.n_classes):
            lam = float(prob.lam[i])
            if lam <= 0:
                continue
            a = best.a.copy()
            a[i] = not a[i]
            if best.a[i]:
                if prob.c_rej * lam >= self.saving_bound(best, i) * (1 + 1e-9):
                    continue
            elif lam * prob.curves[i].min_value >= prob.c_rej * lam:
                continue
            best = self.best(best, self.flip(best, a))
        # swaps: admit a refused class while refusing an admitted one (layouts kept)
        for ii in np.flatnonzero(~best.a):
            for jj in np.flatnonzero(best.a):
                i, j = int(ii), int(jj)
                if best.a[i] or not best.a[j]:
                    continue
                li, lj = float(prob.lam[i]), float(prob.lam[j])
                if li * prob.curves[i].min_value - prob.c_rej * li + prob.c_rej * lj >= self.saving_bound(best, j):
                    continue
                a = best.a.copy()
                a[i], a[j] = True, False
                best = self.best(best, self.flip(best, a, relayout=False))
        return best

    def restore(self, start: _Point) -> tuple[_Point, list[str]]:
        """Make the start feasible: z block, then greedy rejection."""
        log: list[str] = []
        cur = self.z_block(start) if not start.cont.ok else start
        while not cur.cont.ok and cur.a.any():
            trials = []
            for ii in np.flatnonzero(cur.a):
                a = cur.a.copy()
                a[ii] = False
                trials.append((int(ii), self.point(cur.z, a, self.proportional(cur.z, a))))
            ok = [(i, p) for i, p in trials if p.cont.ok]
            if not ok:  # the current layouts cannot be saved by one refusal: let the layouts move too
                trials = [(i, self.z_block_from(cur.z, p.a)) for i, p in trials]
                ok = [(i, p) for i, p in trials if p.cont.ok]
            if ok:
                i, cur = min(ok, key=lambda t: t[1].total(self.prob))
            else:
                adm = np.flatnonzero(cur.a)
                prob = self.prob
                i = int(adm[np.argmax((prob.lam * (prob.lin - prob.lpre))[adm])])
                cur = [p for j, p in trials if j == i][0]
            log.append(f"rejected {self.prob.class_names[i]} to restore feasibility")
        return cur, log


def run_bcd(prob: Problem, *, tol: float = 1e-10, max_sweeps: int = 50) -> BcdRun:
    """Run BCD from the default start; see the module docstring."""
    C = prob.n_classes
    bcd = _Bcd(prob)
    z0 = tuple(max(g.feasible_indices, key=lambda j: (g.configs[j].mu, -g.configs[j].phi), default=-1)
               for g in prob.groups)
    a0 = np.ones(C, dtype=bool)
    cur, log = bcd.restore(bcd.point(z0, a0, bcd.proportional(z0, a0)))
    sweeps = 0
    if cur.cont.ok:
        for sweeps in range(1, max_sweeps + 1):
            before = cur.total(prob)
            cur = bcd.z_block(cur)
            cur = bcd.pi_block(cur)
            cur = bcd.admission_block(cur)
            if cur.total(prob) >= before - tol * max(1.0, abs(before)):
                break
    st = State(cur.z, cur.a.copy(), cur.x.copy(), cur.cont.y.copy(), cur.cont.delta.copy())
    reason = "BCD converged" if cur.cont.ok else "no admission set is feasible (even with every class refused)"
    return BcdRun(st, cur.total(prob), sweeps, bcd.solves, cur.cont.ok, reason, log, bcd.solver_errors)
