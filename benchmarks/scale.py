"""Benchmark: joint-planner scalability, the paper's Table III (BCD time, exact time, gap).

For each size CxZxN (classes x layouts x samples per class) a seeded synthetic instance is generated
(:mod:`kvcore.planner.synthetic`: one group of 24 A100-80GB serving llama-70b, real output lengths from the shared
traces). BCD runs in this process (median of ``--repeats`` runs per seed; each run starts from scratch, caches
included). The exact reference runs in a **subprocess** (``kvcore bench scale --exact``) killed after
``--timeout`` seconds (default 300, the paper's limit), so a slow exact solve never holds the table up; it is
reported as a timeout. Gap = (BCD - exact) / exact.

    .venv/bin/python benchmarks/scale.py [--sizes 3x4x100 ...] [--seeds 0 1 2] [--repeats 3] [--timeout 300] [--json]

Timings are wall-clock on whatever machine runs it; on the shared 2-core development machine they are noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kvcore.cli.bench_scale import parse_size, run_scale
from kvcore.cli.output import format_table

SIZES = ("3x4x100", "4x4x150", "5x5x200", "6x6x300", "8x6x500", "10x8x1000", "15x12x2000")
PAPER = {  # the paper's Table III: (MIBLP seconds or None for timeout / not run, BCD seconds, gap)
    "3x4x100": ("0.07", "0.17", "0.00%"), "4x4x150": ("1.2", "0.8", "0.00%"), "5x5x200": ("33.7", "4.3", "0.00%"),
    "6x6x300": (">300", "10.5", "-"), "8x6x500": (">300", "22.4", "-"), "10x8x1000": ("-", "81.2", "-"),
    "15x12x2000": ("-", "257.7", "-"),
}
REPO = Path(__file__).resolve().parent.parent


def exact_in_subprocess(size: str, seed: int, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "-c", "import sys; from kvcore.cli import main; sys.exit(main())", "bench", "scale", "--size", size, "--seed", str(seed), "--exact",
           "--json"]
    env = dict(os.environ, PYTHONSAFEPATH="1")
    t0 = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"exact_status": "timeout", "exact_seconds": None, "exact_objective": None}
    if out.returncode != 0:
        return {"exact_status": f"error: {out.stderr.strip()[-200:]}", "exact_seconds": None,
                "exact_objective": None}
    res: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    res["exact_status"] = "optimal"
    res["exact_wall"] = time.perf_counter() - t0
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--sizes", nargs="+", default=list(SIZES))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--repeats", type=int, default=3, help="BCD runs per seed (median reported)")
    p.add_argument("--timeout", type=float, default=300.0, help="exact reference limit per instance, seconds")
    p.add_argument("--no-exact-above", default="15x12x2000",
                   help="skip the exact reference for this size and larger (it cannot finish in the limit)")
    p.add_argument("--json", action="store_true", help="print the JSON rows only")
    args = p.parse_args()
    skip_from = args.sizes.index(args.no_exact_above) if args.no_exact_above in args.sizes else len(args.sizes)
    rows: list[dict[str, Any]] = []
    for j, size in enumerate(args.sizes):
        c, z, n = parse_size(size)
        for seed in args.seeds:
            times, obj = [], None
            for _ in range(args.repeats):
                r = run_scale(c, z, n, seed=seed, exact=False)
                times.append(r["bcd_seconds"])
                obj = r["bcd_objective"]
            row: dict[str, Any] = {"size": size, "seed": seed, "bcd_seconds": statistics.median(times),
                                   "bcd_seconds_min": min(times), "bcd_objective": obj}
            if j < skip_from:
                ex = exact_in_subprocess(size, seed, args.timeout)
                row["exact_status"] = ex["exact_status"]
                row["exact_seconds"] = ex.get("exact_seconds")
                row["exact_objective"] = ex.get("exact_objective")
                eo = row["exact_objective"]
                row["gap"] = (obj - eo) / abs(eo) if (eo and obj is not None) else None
            else:
                row.update(exact_status="not run", exact_seconds=None, exact_objective=None, gap=None)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus",
                          "rows": rows}))
        return 0
    table = []
    for size in args.sizes:
        rs = [r for r in rows if r["size"] == size]
        bcd = statistics.median(r["bcd_seconds"] for r in rs)
        ex = [r["exact_seconds"] for r in rs if r["exact_seconds"] is not None]
        statuses = {r["exact_status"] for r in rs}
        gaps = [abs(r["gap"]) for r in rs if r["gap"] is not None]
        paper = PAPER.get(size, ("-", "-", "-"))
        worst = max(r["bcd_seconds"] for r in rs)
        table.append([size, f"{bcd:.3f}", f"{worst:.3f}", f"{statistics.median(ex):.2f}" if ex else "-",
                      "/".join(sorted(statuses)), f"{max(gaps):.1e}" if gaps else "-", paper[0], paper[1], paper[2]])
    print(format_table(["size", "BCD s (median)", "BCD s (worst seed)", "exact s (median)", "exact status", "max |gap|",
                        "paper MIBLP s", "paper BCD s", "paper gap"], table))
    print(json.dumps({"rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
