"""``kvcore bench fleet``: plan one seeded fleet instance and report the time, the objective and its certified gap.

    kvcore bench fleet --classes C --groups K --configs Z --samples N [--seed S] [--load X] [--c-slo X]
                       [--warm] [--json]

The instance is :func:`kvcore.planner.synthetic_fleet.generate_fleet` (mixed A100-80GB / A100-40GB pools serving
llama-70b and llama-8b, classes drawn from the vendored real traces). Prints ``classes``, ``groups``, ``configs``,
``samples``, ``plan_seconds`` (wall time of ``plan()``, instance generation excluded), ``objective`` (cost units per
second), ``lower_bound`` (the certified Lagrangian bound of docs/model.md on the optimum of the same model),
``gap = (objective - lower_bound) / objective`` and ``peak_rss_mb`` (the process's peak resident memory, MiB, from
Linux's VmHWM).
``--warm`` then changes every class's rate by a seeded factor in [0.9, 1.1] (a 10% traffic change) and re-plans
with the first plan as ``previous``, adding the same figures with a ``warm_`` prefix.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from kvcore.bounds import MAX_COST, MAX_COUNT, MAX_SEED
from kvcore.cli.args import float_arg, int_arg
from kvcore.cli.output import format_table, print_json
from kvcore.errors import InputError

TRAFFIC_CHANGE = 0.1
"""Warm re-plan: each class's rate is multiplied by a factor drawn from U[1 - x, 1 + x]."""


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("fleet", help="plan a seeded fleet instance: time, objective, certified gap, peak memory",
                       description=__doc__.split("\n\n")[0] if __doc__ else None)
    count = int_arg(low=1, high=MAX_COUNT)  # the planner's own limits are checked in _check, naming the flag
    p.add_argument("--classes", type=count, required=True, metavar="C", help="request classes (>= 1)")
    p.add_argument("--groups", type=count, required=True, metavar="K", help="GPU groups / node pools (>= 1)")
    p.add_argument("--configs", type=count, required=True, metavar="Z", help="allowed layouts per group (1..12)")
    p.add_argument("--samples", type=int_arg(low=1, high=10**12), required=True, metavar="N",
                   help="output-length samples per class (>= 1)")
    p.add_argument("--seed", type=int_arg(low=0, high=MAX_SEED), default=0, help="instance seed (default 0)")
    p.add_argument("--load", type=float_arg(low=0.0, high=100.0, low_open=True), default=None,
                   help="offered work / usable capacity at the critical-fractile reservations (default: drawn "
                        "from U[0.8, 1.1] per seed)")
    p.add_argument("--c-slo", type=float_arg(low=0.0, high=MAX_COST), default=None,
                   help="queueing cost per request-second (default 5)")
    p.add_argument("--method", choices=("auto", "bcd", "fleet"), default="auto", help="planner method")
    p.add_argument("--warm", action="store_true", help="also re-plan after a 10%% traffic change, from the plan")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run)


def _check(args: argparse.Namespace) -> None:
    from kvcore.planner.synthetic_fleet import LAYOUTS
    for name in ("classes", "groups", "samples"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name}", f"must be >= 1, got {getattr(args, name)}")
    if not 1 <= args.configs <= len(LAYOUTS):
        raise InputError("--configs", f"must be in 1..{len(LAYOUTS)}, got {args.configs}")
    if args.load is not None and not 0.0 < args.load < 100.0:
        raise InputError("--load", f"must be in (0, 100), got {args.load}")
    if args.c_slo is not None and not args.c_slo >= 0.0:
        raise InputError("--c-slo", f"must be >= 0, got {args.c_slo}")
    from kvcore.cli.machine import memory_limit
    from kvcore.planner.limits import PlanSize, check_size
    size = PlanSize(args.classes, args.groups, args.configs, args.samples, args.classes * args.samples)
    flags = {"classes": "--classes", "groups": "--groups", "groups.layouts": "--configs", "classes.samples":
             "--samples"}
    try:   # refused before the instance is drawn, with the estimate
        check_size(size, method=args.method, memory_limit=memory_limit())
    except InputError as exc:
        raise InputError(flags.get(exc.field, "--classes/--groups/--configs/--samples"), exc.message) from None


def peak_rss_mb() -> float:
    """Peak resident set size of this process, MiB: Linux's ``VmHWM`` (the high-water mark of this program's own
    memory), else ``getrusage``'s ``ru_maxrss``, which on Linux also keeps the peak of the process that spawned this
    one (a fork or vfork shares the parent's memory until ``exec``), so it overstates a child of a large parent."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("VmHWM:"):
                return float(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / 1024.0 if sys.platform != "darwin" else kib / 1024.0**2


def _figures(plan: Any, seconds: float) -> dict[str, Any]:
    obj = plan.objective.total if plan.objective is not None else None
    lb = plan.lower_bound
    gap = (obj - lb) / obj if obj is not None and lb is not None and obj > 0 else None
    return {"plan_seconds": seconds, "objective": obj, "lower_bound": lb, "gap": gap, "status": plan.status.value,
            "method": plan.method}


def run_fleet_bench(args: argparse.Namespace) -> dict[str, Any]:
    """One measurement as a JSON-ready dict."""
    from kvcore.cli.machine import memory_limit
    from kvcore.planner import plan
    from kvcore.planner.synthetic_fleet import generate_fleet

    inst = generate_fleet(args.classes, args.groups, args.configs, args.samples, seed=args.seed, load=args.load,
                          c_slo=args.c_slo)
    t0 = time.perf_counter()
    limit = memory_limit()
    first = plan(inst, method=args.method, memory_limit=limit)
    out: dict[str, Any] = {"classes": args.classes, "groups": args.groups, "configs": args.configs,
                           "samples": args.samples, "seed": args.seed}
    out.update(_figures(first, time.perf_counter() - t0))
    if args.warm:
        rng = np.random.default_rng([args.seed, 1])
        factors = rng.uniform(1.0 - TRAFFIC_CHANGE, 1.0 + TRAFFIC_CHANGE, len(inst.classes))
        moved = tuple(c.model_copy(update={"arrival_rate": c.arrival_rate * float(f)})
                      for c, f in zip(inst.classes, factors))
        inst2 = inst.model_copy(update={"classes": moved})
        t0 = time.perf_counter()
        second = plan(inst2, previous=first, method=args.method, memory_limit=limit)
        out.update({f"warm_{k}": v for k, v in _figures(second, time.perf_counter() - t0).items()})
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def _run(args: argparse.Namespace) -> int:
    _check(args)
    out = run_fleet_bench(args)
    if args.json:
        print_json(out)
    else:
        print(format_table(list(out), [list(out.values())]))
    return 0
