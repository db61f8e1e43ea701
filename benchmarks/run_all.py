"""Run every benchmark in this folder, one after another, and print what each measured.

Each benchmark prints its own table and ratios measured in the same run; this driver only sequences them so that
no two compete for the machine's two cores. ``replan.py`` needs the local control plane (``make tools``).

Usage: ``python benchmarks/run_all.py [--only NAME ...]``
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ("reserve", "scale", "multigroup", "fleet", "engine_speed", "replan", "paper_tables",
         "radius_ablation", "engine_results", "reserve_rule_speed", "trace_memory", "test_loop", "operator_memory")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", nargs="*", choices=ORDER, help="run only these benchmarks")
    args = parser.parse_args()
    failures = []
    for name in args.only or ORDER:
        script = HERE / f"{name}.py"
        if not script.exists():
            print(f"== {name}: missing ({script})", file=sys.stderr)
            failures.append(name)
            continue
        print(f"== {name}", flush=True)
        start = time.monotonic()
        rc = subprocess.call([sys.executable, str(script)])
        print(f"== {name}: exit {rc} after {time.monotonic() - start:.1f} s", flush=True)
        if rc != 0:
            failures.append(name)
    if failures:
        print("failed: " + ", ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
