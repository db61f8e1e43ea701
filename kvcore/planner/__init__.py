"""The joint planner: layouts z, reservations r, routing pi, prefix caching delta and admission a.

``plan(instance, *, previous=None) -> Plan`` is pure. Two methods share the model and the re-check:

* **BCD** (:mod:`.bcd`): block coordinate descent over a convex (y, delta) block solved with a certificate
  (:mod:`.continuous`), a local routing block (:mod:`.routing`) and enumerated layouts and admission; the method
  whose gap to the exact reference (:mod:`.exact`) is measured on the paper's sizes.
* **fleet** (:mod:`.fleet`): for many classes x many groups, where one BCD sweep re-solves the (y, delta) block
  once per (group, layout) pair: the work price of a Lagrangian dual (:mod:`.bound`) gives layouts, admission and
  group loads, a filled routing and one (y, delta) block complete the plan, and the dual value is a certified
  lower bound carried in ``Plan.lower_bound``.

``method="auto"`` picks BCD while ``C x K x (feasible layouts)`` is at most :data:`BCD_SIZE` and there are at most
:data:`BCD_MAX_CLASSES` classes, the fleet method otherwise (:mod:`.method`). The model, with units, is in
``docs/model.md``.
"""

from __future__ import annotations

import time

from kvcore.planner.instance import Instance, load_instance
from kvcore.planner.planmodel import Plan, PlanStatus
from kvcore.planner.bcd import run_bcd
from kvcore.planner.fleet import run_fleet
from kvcore.planner.limits import check_size, size_of
from kvcore.planner.method import BCD_MAX_CLASSES, BCD_SIZE, Method, choose_method
from kvcore.planner.problem import Problem, compile_problem
from kvcore.planner.result import build_plan, infeasible_plan
from kvcore.planner.warm import previous_state, revealed_price

__all__ = ["plan", "compile_problem", "Problem", "BCD_SIZE", "BCD_MAX_CLASSES", "choose_method"]

_SHOWN_GROUPS = 5
"""Groups without a feasible layout whose per-layout reasons are spelled out; the rest are named only."""


def no_layout_reason(prob: Problem) -> str | None:
    """A reason naming every group that has no feasible layout (and why, per layout), else None."""
    bad = [(k, g) for k, g in enumerate(prob.groups) if not g.feasible_indices]
    if not bad:
        return None
    parts = [f"{g.name} (groups[{k}]): " + "; ".join(f"{c.tp}x{c.pp}: {c.reason}" for c in g.configs)
             for k, g in bad[:_SHOWN_GROUPS]]
    if len(bad) > _SHOWN_GROUPS:
        parts.append(f"and {len(bad) - _SHOWN_GROUPS} more: " + ", ".join(g.name for _, g in bad[_SHOWN_GROUPS:]))
    return (f"{len(bad)} of {prob.n_groups} group(s) have no feasible layout, so nothing can be deployed there: "
            + " | ".join(parts))


def plan(instance: Instance, *, previous: Plan | None = None, method: Method = "auto",
         memory_limit: float | None = None) -> Plan:
    """Plan one instance. Infeasibility is a result (status ``infeasible`` with a reason), not an exception.
    ``previous`` (the plan in force) is diffed against, and the fleet method starts from it. ``memory_limit``
    (bytes) is what the planner may use here (:func:`.limits.check_size`; default: the operator's container limit).

    Raises:
        InputError: only for bad input, naming the field, or for a size past :mod:`.limits` (refused before any
            work, with the limit named and the estimated memory and work).
    """
    t0 = time.perf_counter()
    inst = load_instance(instance)
    check_size(size_of(inst), method=method, memory_limit=memory_limit)
    prob = compile_problem(inst)
    why = no_layout_reason(prob)
    if why is not None:
        return infeasible_plan(prob, why, seconds=time.perf_counter() - t0)
    chosen = choose_method(prob) if method == "auto" else method
    if chosen == "fleet":
        fleet = run_fleet(prob, previous_theta=revealed_price(prob, previous_state(prob, previous)))
        state, reason, log, errors = fleet.state, fleet.reason, fleet.log, fleet.solver_errors
        iterations, solves, bound = fleet.rounds, fleet.rounds, fleet.bound.value
        if not fleet.feasible:
            return infeasible_plan(prob, reason, seconds=time.perf_counter() - t0, method="fleet")
        raw = f"fleet price={fleet.bound.point.theta!r} rounds={fleet.rounds} dual_evaluations=" \
              f"{fleet.bound.evaluations} solver_errors={len(errors)}"
        reason += f"; certified gap {(fleet.total - bound) / max(1.0, abs(fleet.total)):.2e}"
    else:
        run = run_bcd(prob)
        state, reason, log, errors = run.state, run.reason, run.log, run.solver_errors
        iterations, solves, bound = run.sweeps, run.solves, None
        raw = f"bcd sweeps={run.sweeps} subproblems={run.solves} solver_errors={len(errors)}"
    reason += f"; {'; '.join(log)}" if log else ""
    refused = int((~state.a).sum())
    if refused:
        reason += f"; {refused} class(es) refused"
    status = PlanStatus.FEASIBLE
    if errors:
        reason += f"; HiGHS failed on {len(errors)} subproblem(s) ({errors[0]}), so the plan may be worse than " \
                  f"{chosen} would find"
        if solves == len(errors):
            status = PlanStatus.ERROR
    out = build_plan(prob, state, status=status, reason=reason, raw_status=raw, method=chosen,
                     iterations=iterations, seconds=time.perf_counter() - t0, previous=previous)
    return out if bound is None else out.model_copy(update={"lower_bound": bound})
