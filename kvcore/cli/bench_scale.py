"""``kvcore bench scale``: time BCD (and optionally the exact reference) on one seeded synthetic instance.

    kvcore bench scale --size CxZxN [--seed S] [--exact] [--json]

C classes, Z layouts, N real output-length samples per class (drawn from the shared traces, or the bundled Azure
conversation trace when they are absent); see :mod:`kvcore.planner.synthetic`. Prints ``classes``, ``configs``,
``samples``, ``bcd_seconds``, ``bcd_objective``, ``exact_seconds``, ``exact_objective`` and ``gap`` (the last three
null without ``--exact``); ``gap = (bcd - exact) / |exact|``.
"""

from __future__ import annotations

import argparse
import re
import time
from typing import Any

from kvcore.bounds import MAX_SECONDS, MAX_SEED
from kvcore.cli.args import float_arg, int_arg
from kvcore.cli.output import format_table, print_json
from kvcore.errors import InputError
from kvcore.cli.machine import memory_limit
from kvcore.planner.limits import PlanSize, check_size
from kvcore.planner.synthetic import LAYOUTS

_SIZE = re.compile(r"^(\d{1,12})x(\d{1,12})x(\d{1,12})$")


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("scale", help="BCD (and exact) time and gap on a seeded CxZxN instance",
                       description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--size", required=True, metavar="CxZxN", help="classes x configs x samples, e.g. 5x5x200")
    p.add_argument("--seed", type=int_arg(low=0, high=MAX_SEED), default=0, help="instance seed (default 0)")
    p.add_argument("--exact", action="store_true", help="also run the exact reference and report the gap")
    p.add_argument("--exact-timeout", type=float_arg(low=0.0, high=MAX_SECONDS, low_open=True, unit=" s"),
                   default=None, metavar="S",
                   help="stop the exact reference after S seconds (exact_* null, exact_timed_out true)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run)


def parse_size(text: str) -> tuple[int, int, int]:
    m = _SIZE.match(text.strip())
    if not m:
        raise InputError("--size", f"expected CxZxN (e.g. 5x5x200), got {text[:40]!r}")
    c, z, n = (int(g) for g in m.groups())
    if c < 1 or n < 1:
        raise InputError("--size", "classes and samples must be >= 1")
    if not 1 <= z <= len(LAYOUTS):
        raise InputError("--size", f"configs must be in 1..{len(LAYOUTS)}, got {z}")
    try:
        check_size(PlanSize(classes=c, groups=1, layouts=z, samples_per_class=n, samples=c * n), method="bcd",
                   memory_limit=memory_limit())
    except InputError as exc:
        raise InputError("--size", f"{exc.field}: {exc.message}") from None
    return c, z, n


def run_scale(c: int, z: int, n: int, *, seed: int, exact: bool, exact_timeout: float | None = None
              ) -> dict[str, Any]:
    """One measurement as a JSON-ready dict."""
    from kvcore.planner import plan
    from kvcore.planner.exact import exact_objective, solve_exact
    from kvcore.planner.synthetic import generate

    inst = generate(c, z, n, seed=seed)
    t0 = time.perf_counter()
    p = plan(inst, method="bcd", memory_limit=memory_limit())
    bcd_s = time.perf_counter() - t0
    bcd_obj = p.objective.total if p.objective is not None else None
    out: dict[str, Any] = {"classes": c, "configs": z, "samples": n, "seed": seed, "bcd_seconds": bcd_s,
                           "bcd_objective": bcd_obj, "bcd_status": p.status.value, "exact_seconds": None,
                           "exact_objective": None, "gap": None}
    if exact:
        t0 = time.perf_counter()
        e = solve_exact(inst, time_limit=exact_timeout)
        ex_s = time.perf_counter() - t0
        finished = e.status.value == "optimal"
        out["exact_timed_out"] = not finished
        if finished:
            ex = exact_objective(e)
            out["exact_seconds"] = ex_s
            out["exact_objective"] = ex
            if bcd_obj is not None:
                out["gap"] = (bcd_obj - ex) / abs(ex) if ex else bcd_obj - ex
    return out


def _run(args: argparse.Namespace) -> int:
    c, z, n = parse_size(args.size)
    out = run_scale(c, z, n, seed=args.seed, exact=args.exact, exact_timeout=args.exact_timeout)
    if args.json:
        print_json(out)
    else:
        print(format_table(list(out), [list(out.values())]))
    return 0
