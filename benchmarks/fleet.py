"""Benchmark: the planner at fleet scale: 256 classes x 64 groups x 12 layouts x 2,000 samples.

For each seed, ``kvcore bench fleet ... --warm --json`` runs in its own process (so ``peak_rss_mb`` is that plan's,
not the sum of the runs): a cold plan, then a warm re-plan after a seeded 10% per-class traffic change, from the
first plan. Reported per seed: the offered load, cold and warm ``plan_seconds`` and their ratio, the objective, the
certified lower bound and gap (cold and warm), the peak resident memory, and the machine's 1-minute load average
before and after the run (the development machine is shared; wall times move with it).

``--bcd CxKxZxN`` (default 16x4x6x500, ``none`` to skip) also plans one smaller instance (seed 1) with both
methods in this process: BCD's time grows with classes x groups x layouts, which is why ``plan`` switches to the
fleet method above 4,096 of them.

    .venv/bin/python benchmarks/fleet.py [--size 256x64x12x2000] [--seeds 0 1 2 3 4] [--bcd 32x8x12x1000] [--json]
    .venv/bin/python benchmarks/fleet.py --scaling      # cold plans at larger sizes: time and peak memory
    .venv/bin/python benchmarks/fleet.py --two-groups 16 32 64   # BCD vs fleet as the classes grow

Targets: plan_seconds <= 5 cold and <= 1 warm, gap <= 1e-2 on every seed, peak_rss_mb <= 1,024.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kvcore.cli.output import format_table

REPO = Path(__file__).resolve().parent.parent
TARGETS = {"plan_seconds": 5.0, "warm_plan_seconds": 1.0, "gap": 1e-2, "warm_gap": 1e-2, "peak_rss_mb": 1024.0}


SCALING = ("256x64x12x2000", "1024x64x12x2000", "256x256x12x2000", "1024x256x12x2000", "256x64x12x20000")
"""``--scaling``: sizes around the target, cold plans of seed 0, for how time and peak memory grow."""


def run_seed(size: tuple[int, int, int, int], seed: int, warm: bool = True) -> dict[str, Any]:
    c, k, z, n = size
    cmd = [sys.executable, "-c", "import sys; from kvcore.cli import main; sys.exit(main())", "bench", "fleet",
           "--classes", str(c), "--groups", str(k), "--configs", str(z), "--samples", str(n), "--seed", str(seed),
           "--json"] + (["--warm"] if warm else [])
    before = os.getloadavg()[0]
    out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONSAFEPATH="1"), cwd=REPO,
                         check=True)
    row: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    row["load_before"], row["load_after"] = before, os.getloadavg()[0]
    return row


def compare_bcd(size: tuple[int, int, int, int]) -> dict[str, Any]:
    from kvcore import plan
    from kvcore import generate_fleet

    inst = generate_fleet(*size, seed=1)
    out: dict[str, Any] = {"size": "x".join(map(str, size))}
    for method in ("fleet", "bcd"):
        t0 = time.perf_counter()
        p = plan(inst, method=method)
        out[f"{method}_seconds"] = time.perf_counter() - t0
        out[f"{method}_objective"] = p.objective.total if p.objective is not None else None
    if out["fleet_objective"] and out["bcd_objective"]:
        out["fleet_vs_bcd"] = (out["fleet_objective"] - out["bcd_objective"]) / out["bcd_objective"]
        out["bcd_over_fleet_seconds"] = out["bcd_seconds"] / out["fleet_seconds"]
    return out


def compare_two_groups(classes: int) -> dict[str, Any]:
    """BCD and the fleet method on the Table III generator's 2-group instance with ``classes`` classes, 4 layouts and
    300 samples (seed 0): where ``plan`` draws the line on the number of classes (BCD_MAX_CLASSES)."""
    from kvcore import plan
    from kvcore import generate_instance as generate

    inst = generate(classes, 4, 300, seed=0, groups=2)
    out: dict[str, Any] = {"size": f"{classes}x2x4x300"}
    for method in ("fleet", "bcd"):
        t0 = time.perf_counter()
        p = plan(inst, method=method)
        out[f"{method}_seconds"] = time.perf_counter() - t0
        out[f"{method}_objective"] = p.objective.total if p.objective is not None else None
    out["fleet_vs_bcd"] = (out["fleet_objective"] - out["bcd_objective"]) / out["bcd_objective"]
    out["bcd_over_fleet_seconds"] = out["bcd_seconds"] / out["fleet_seconds"]
    return out


def _size(text: str) -> tuple[int, int, int, int]:
    c, k, z, n = (int(v) for v in text.split("x"))
    return c, k, z, n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--size", default="256x64x12x2000", help="classes x groups x layouts x samples")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--bcd", default="16x4x6x500", metavar="CxKxZxN",
                   help="also compare BCD and the fleet method on this size ('none' to skip)")
    p.add_argument("--scaling", action="store_true", help="instead: cold plans at the sizes of SCALING")
    p.add_argument("--two-groups", type=int, nargs="+", metavar="C",
                   help="instead: BCD and the fleet method on 2-group Table III instances with C classes")
    p.add_argument("--json", action="store_true", help="print the JSON rows only")
    args = p.parse_args()
    if args.two_groups:
        rows = [compare_two_groups(c) for c in args.two_groups]
        print(json.dumps(rows) if args.json else format_table(list(rows[0]), [list(r.values()) for r in rows]))
        return 0
    if args.scaling:
        rows = [dict(size=text, **run_seed(_size(text), 0, warm=False)) for text in SCALING]
        cols = ["size", "plan_seconds", "gap", "peak_rss_mb", "load_before", "load_after"]
        print(json.dumps(rows) if args.json else format_table(cols, [[r[c] for c in cols] for r in rows]))
        return 0
    size = _size(args.size)
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rows = [run_seed(size, seed) for seed in args.seeds]
    extra = compare_bcd(_size(args.bcd)) if args.bcd and args.bcd != "none" else None
    if args.json:
        for row in rows:
            print(json.dumps(row))
        if extra:
            print(json.dumps(extra))
        return 0
    print(f"fleet {args.size}, {started}, {platform.machine()} {os.cpu_count()} cores, Python "
          f"{platform.python_version()}")
    cols = ["seed", "plan_seconds", "warm_plan_seconds", "warm/cold", "objective", "lower_bound", "gap",
            "warm_gap", "peak_rss_mb", "load_before", "load_after"]
    table = [[r["seed"], r["plan_seconds"], r["warm_plan_seconds"], r["warm_plan_seconds"] / r["plan_seconds"],
              r["objective"], r["lower_bound"], r["gap"], r["warm_gap"], r["peak_rss_mb"], r["load_before"],
              r["load_after"]] for r in rows]
    print(format_table(cols, table))
    for key, limit in TARGETS.items():
        worst = max(r[key] for r in rows)
        print(f"{key}: worst {worst:.4g} (target <= {limit:g}) {'met' if worst <= limit else 'NOT met'}")
    if extra:
        print(format_table(list(extra), [list(extra.values())]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
