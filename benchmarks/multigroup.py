"""BCD against the multi-group exact reference (routing measured): certified gaps on seeded 2-group instances.

    python benchmarks/multigroup.py [--time-limit 60] [--json]

Instances: ``kvcore.planner.synthetic.generate(C, Z, N, seed=s, groups=2)`` (the Table III generator plus a second
pool of 16 A100-80GB). For each, :func:`kvcore.planner.exact.solve_exact` runs the spatial branch and bound over the
routing box to a certified relative gap of 1e-4 or the time limit, starting from BCD's plan. Reported: the
certified gap, the reference's time, how far BCD is above the reference's upper bound (> 0: the branch and bound
found a better point than BCD) and above its certified lower bound, and the groups' utilisation in BCD's plan.
Each instance runs in this process, one after another (2 cores: no parallel runs, so times are comparable).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from kvcore import plan
from kvcore import exact_bounds, solve_exact
from kvcore import generate_instance as generate

INSTANCES: tuple[tuple[int, int, int, int], ...] = (
    (2, 2, 50, 3), (2, 2, 50, 4), (2, 2, 50, 1), (2, 2, 50, 0), (2, 2, 50, 2), (2, 2, 50, 5),
    (3, 3, 100, 0), (3, 3, 100, 3), (3, 3, 100, 1), (3, 3, 100, 2),
)
TOL = 1e-4


def run_one(c: int, z: int, n: int, seed: int, limit: float) -> dict[str, Any]:
    inst = generate(c, z, n, seed=seed, groups=2)
    t0 = time.perf_counter()
    bcd = plan(inst)
    bcd_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = solve_exact(inst, tol=TOL, time_limit=limit)
    exact_s = time.perf_counter() - t0
    lower, upper, gap = exact_bounds(ref)
    assert bcd.objective is not None
    total = bcd.objective.total
    refused = sum(1 for cl in bcd.classes if not cl.admitted)
    return {
        "instance": f"{c}x{z}x{n} seed {seed}", "status": ref.status.value, "certified_gap": gap,
        "exact_seconds": exact_s, "bcd_seconds": bcd_s, "bcd_above_ub": (total - upper) / upper,
        "bcd_above_lb": (total - lower) / lower, "utilisation": [g.utilisation for g in bcd.groups],
        "refused_classes": refused,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--time-limit", type=float, default=60.0, help="branch-and-bound limit per instance, seconds")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args(argv)
    rows = []
    for i, (c, z, n, seed) in enumerate(INSTANCES, 1):
        print(f"  [{i}/{len(INSTANCES)}] {c}x{z}x{n} seed {seed} ...", file=sys.stderr, flush=True)
        rows.append(run_one(c, z, n, seed, args.time_limit))
    if args.json:
        json.dump({"time_limit_s": args.time_limit, "rows": rows}, sys.stdout, indent=2)
        print()
        return 0
    print(f"multi-group exact reference, tol {TOL:g}, limit {args.time_limit:g} s per instance")
    print("| instance | certified gap | exact s | BCD s | BCD above UB | BCD above LB | group utilisation at BCD |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        state = "optimal" if r["status"] == "optimal" else f"{args.time_limit:g} s limit"
        util = " / ".join(f"{u:.2f}" for u in r["utilisation"])
        if r["refused_classes"]:
            util += f" ({r['refused_classes']} class{'es' if r['refused_classes'] > 1 else ''} refused)"
        print(f"| {r['instance']} | {r['certified_gap']:.1e} ({state}) | {r['exact_seconds']:.1f} | "
              f"{r['bcd_seconds']:.2f} | {r['bcd_above_ub']:.1e} | {r['bcd_above_lb']:.1e} | {util} |")
    worst = max(rows, key=lambda r: r["bcd_above_ub"])
    print(f"largest BCD excess over the best point found: {worst['bcd_above_ub']:.1e} ({worst['instance']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
