"""``kvcore plan``: plan layouts, reservations, routing, prefix caching and admission for an instance file.

    kvcore plan INSTANCE.yaml [--json] [--exact] [--horizon-ratio R]

The file format is ``docs/instance-format.md``. ``--exact`` uses the exact reference (one-group instances only).
``--horizon-ratio`` tells every class on the drift radius rule (the default) how long the plan will be in force,
as a multiple of the time its history spans (default: the file's value, else 1).
Exit status: 0 a plan (optimal or feasible), 1 infeasible or solver error (the plan still says why), 2 bad input.
"""

from __future__ import annotations

import argparse

from kvcore.cli.instance_file import load_instance_file
from kvcore.cli.output import format_table, print_json
from kvcore.bounds import MAX_RATIO
from kvcore.errors import InputError
from kvcore.planner.instance import Instance
from kvcore.planner.planmodel import Plan, PlanStatus
from kvcore.reservation.radius import with_horizon


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("plan", help="joint plan (layouts, reservations, routing, prefix caching, admission)",
                       description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("instance", metavar="INSTANCE.yaml", help="instance file (docs/instance-format.md)")
    p.add_argument("--json", action="store_true", help="print the Plan as one JSON object")
    p.add_argument("--exact", action="store_true", help="use the exact reference solver (one group only)")
    p.add_argument("--horizon-ratio", type=float, default=None, metavar="R",
                   help="plan lifetime / history span for classes on the drift radius rule (default: file, else 1)")
    p.set_defaults(func=_run)


def render(plan: Plan) -> str:
    """A readable summary of a plan."""
    lines = [f"status: {plan.status.value} ({plan.reason})",
             f"solve: {plan.solve_seconds:.3f} s, {plan.iterations} iterations, method {plan.method}"]
    if plan.objective is not None:
        o = plan.objective
        lines.append(f"objective/s: total {o.total:.6g} = reservation {o.reservation:.6g} + configuration "
                     f"{o.configuration:.6g} + queueing {o.queueing:.6g} + rejection {o.rejection:.6g}")
    if plan.groups:
        lines.append("")
        lines.append(format_table(
            ["group", "TPxPP", "replicas", "KV tok/replica", "tok/s/replica", "util", "KV util", "wait s"],
            [[g.name, f"{g.tp}x{g.pp}", g.replicas, g.kv_capacity_tokens, g.throughput_tokens_s, g.utilisation,
              g.memory_utilisation, g.waiting_seconds] for g in plan.groups]))
    if plan.classes:
        lines.append("")
        lines.append(format_table(
            ["class", "admitted", "reserve (out tok)", "eps", "DRO cost/req", "routing", "prefix"],
            [[c.name, "yes" if c.admitted else "no", c.reserve_tokens, c.radius.eps if c.radius else None,
              c.worst_case_cost, " ".join(f"{k}:{v:.3f}" for k, v in c.routing.items() if v > 0) or "-",
              " ".join(f"{k}:{v:.2f}" for k, v in c.prefix_fraction.items() if v > 0) or "-"]
             for c in plan.classes]))
    return "\n".join(lines)


def with_horizon_ratio(instance: Instance, ratio: float) -> Instance:
    """``instance`` with ``ratio`` as the horizon ratio of every class on the drift rule (explicit or default)."""
    if not 0 <= ratio <= MAX_RATIO:
        raise InputError("--horizon-ratio", f"must be a finite number >= 0, at most {MAX_RATIO:g}, got {ratio}")
    classes = tuple(c.model_copy(update={"radius": with_horizon(c.radius, ratio)}) for c in instance.classes)
    return instance.model_copy(update={"classes": classes})


def _run(args: argparse.Namespace) -> int:
    instance = load_instance_file(args.instance)
    if args.horizon_ratio is not None:
        instance = with_horizon_ratio(instance, args.horizon_ratio)
    if args.exact:
        from kvcore.planner.exact import solve_exact
        plan = solve_exact(instance)
    else:
        from kvcore.cli.machine import memory_limit
        from kvcore.planner import plan as run_plan
        plan = run_plan(instance, memory_limit=memory_limit())
    if args.json:
        print_json(plan.model_dump(mode="json"))
    else:
        print(render(plan))
    return 0 if plan.status in (PlanStatus.OPTIMAL, PlanStatus.FEASIBLE) else 1
