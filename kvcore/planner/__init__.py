"""The joint planner: layouts z, reservations r, routing pi, prefix caching delta and admission a.

``plan(instance, *, previous=None) -> Plan`` is pure: block coordinate descent (:mod:`.bcd`) over a convex
(y, delta) block solved with a certificate (:mod:`.continuous`), a local routing block (:mod:`.routing`) and
enumerated layouts and admission. :mod:`.exact` is the reference solver for small instances. The model, with
units, is in ``docs/model.md``.
"""

from __future__ import annotations

import time

from kvcore.instance import Instance, load_instance
from kvcore.planmodel import Plan, PlanStatus
from kvcore.planner.bcd import run_bcd
from kvcore.planner.limits import check_size, size_of
from kvcore.planner.problem import Problem, compile_problem
from kvcore.planner.result import build_plan, infeasible_plan

__all__ = ["plan", "compile_problem", "Problem"]


def no_layout_reason(prob: Problem) -> str | None:
    """A reason string when no group has any feasible layout, else None."""
    if any(g.feasible_indices for g in prob.groups):
        return None
    parts = [f"{g.name}: " + "; ".join(f"{c.tp}x{c.pp}: {c.reason}" for c in g.configs) for g in prob.groups]
    return "no group has a feasible layout (" + " | ".join(parts) + ")"


def plan(instance: Instance, *, previous: Plan | None = None) -> Plan:
    """Plan one instance by BCD. Infeasibility is a result (status ``infeasible`` with a reason), not an exception.

    Raises:
        InputError: only for bad input, naming the field, or for a size past :mod:`.limits` (refused before any
            work, with the limit named and the estimated memory and work).
    """
    t0 = time.perf_counter()
    inst = load_instance(instance)
    check_size(size_of(inst))
    prob = compile_problem(inst)
    why = no_layout_reason(prob)
    if why is not None:
        return infeasible_plan(prob, why, seconds=time.perf_counter() - t0)
    run = run_bcd(prob)
    reason = run.reason + (f"; {'; '.join(run.log)}" if run.log else "")
    refused = int((~run.state.a).sum())
    if refused:
        reason += f"; {refused} class(es) refused"
    status = PlanStatus.FEASIBLE
    if run.solver_errors:
        reason += f"; HiGHS failed on {len(run.solver_errors)} subproblem(s) ({run.solver_errors[0]}), so the plan " \
                  "may be worse than BCD would find"
        if run.solves == len(run.solver_errors):
            status = PlanStatus.ERROR
    return build_plan(prob, run.state, status=status, reason=reason,
                      raw_status=f"bcd sweeps={run.sweeps} subproblems={run.solves} "
                                 f"solver_errors={len(run.solver_errors)}", method="bcd",
                      iterations=run.sweeps, seconds=time.perf_counter() - t0, previous=previous)
