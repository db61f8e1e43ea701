"""Benchmark: the exact DRO reservation algorithm against the HiGHS LP on the same instances.

Instances: N output lengths resampled (seeded, with replacement) from a real trace, by default the shared Azure
2023 conversation trace (falling back to the copy bundled in kvcore/data), at N = 2,000, 20,000 and 100,000;
cp = 10, cw = 1 (rho = 10), L_max = the trace's longest output, eps = 0.15 x the sample mean (the default
radius). Both timings include everything the solver does for one call (the LP's timing includes building the
model in numpy and handing it to HiGHS). The exact solver runs ``--repeats`` times on a fresh ``Samples`` each
time (no cached sort) and we report the median and the minimum; the LP runs once per size (it takes seconds).

    .venv/bin/python benchmarks/reserve.py [--sizes 2000 20000 100000] [--repeats 21] [--lp-max-n N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from kvcore.cli.output import format_table
from kvcore import solve_dro_exact
from kvcore import solve_dro_lp
from kvcore import Samples
from kvcore import load_trace

REPO = Path(__file__).resolve().parent.parent
TRACES = [REPO / "kvcore" / "data" / "traces" / "azure2023_conv.csv", REPO / "kvcore" / "data" / "azure2023_conv.csv"]


def _trace() -> tuple[Path, np.ndarray]:
    for path in TRACES:
        if path.exists():
            return path, load_trace(path).output_tokens
    raise SystemExit(f"no trace found at {', '.join(map(str, TRACES))}")


def run(sizes: list[int], repeats: int, lp_max_n: int, seed: int, cp: float, cw: float) -> dict[str, object]:
    path, lengths = _trace()
    lmax = float(lengths.max())
    rng = np.random.default_rng(seed)
    rows: list[dict[str, object]] = []
    for n in sizes:
        values = rng.choice(lengths, size=n, replace=True)
        eps = 0.15 * float(values.mean())
        times = []
        for _ in range(repeats):
            s = Samples.from_arrays(values)
            t0 = time.perf_counter()
            ex = solve_dro_exact(s, cp=cp, cw=cw, lmax=lmax, eps=eps)
            times.append(time.perf_counter() - t0)
        row: dict[str, object] = {
            "n": n,
            "exact_ms_median": 1e3 * statistics.median(times),
            "exact_ms_min": 1e3 * min(times),
            "exact_cost": ex.objective,
            "reserve_tokens": ex.y,
            "lp_s": None,
            "lp_cost": None,
            "lp_status": None,
            "rel_diff": None,
            "ratio_median": None,
        }
        if n <= lp_max_n:
            s = Samples.from_arrays(values)
            t0 = time.perf_counter()
            lp = solve_dro_lp(s, cp=cp, cw=cw, lmax=lmax, eps=eps)
            lp_s = time.perf_counter() - t0
            row.update(
                lp_s=lp_s,
                lp_cost=lp.objective,
                lp_status=lp.raw_status,
                rel_diff=abs(lp.objective - ex.objective) / max(abs(lp.objective), 1e-12),
                ratio_median=lp_s / statistics.median(times),
            )
        rows.append(row)
        print(f"n={n}: done", file=sys.stderr, flush=True)
    return {
        "trace": path.name,
        "cp": cp,
        "cw": cw,
        "lmax": lmax,
        "seed": seed,
        "repeats": repeats,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--sizes", type=int, nargs="+", default=[2000, 20000, 100000])
    p.add_argument("--repeats", type=int, default=21, help="exact-solver repetitions per size (median reported)")
    p.add_argument("--lp-max-n", type=int, default=10**9, help="skip the LP above this N")
    p.add_argument("--seed", type=int, default=2023)
    p.add_argument("--cp", type=float, default=10.0)
    p.add_argument("--cw", type=float, default=1.0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    res = run(args.sizes, args.repeats, args.lp_max_n, args.seed, args.cp, args.cw)
    if args.json:
        print(json.dumps(res))
        return 0
    print(f"trace {res['trace']}, cp={args.cp:g}, cw={args.cw:g}, L_max={res['lmax']:g}, eps=0.15 mean; {res['machine']}")
    rows = res["rows"]
    assert isinstance(rows, list)
    print(
        format_table(
            ["N", "exact ms (median)", "exact ms (min)", "LP s", "LP / exact", "cost rel diff", "LP status"],
            [
                (r["n"], r["exact_ms_median"], r["exact_ms_min"], r["lp_s"], r["ratio_median"], r["rel_diff"],
                 r["lp_status"])
                for r in rows
            ],
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
