"""The fast test loop against the unit tier, measured in one run: ``make test-fast`` (the unit tier without the
tests marked ``slow``) and then the whole unit tier, one after the other on the same machine.

Prints one table and one JSON line: tests run by each, wall seconds of each, and the two ratios the fast loop is
judged by (share of the unit tests it runs, share of the unit tier's wall time it takes). Usage:
``python benchmarks/test_loop.py [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTEST = REPO / ".venv" / "bin" / "pytest"
SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?|deselected)")


def run(args: list[str]) -> tuple[float, dict[str, int], int]:
    """Wall seconds, the summary line's counts, and the exit code of one pytest run."""
    start = time.monotonic()
    proc = subprocess.run([str(PYTEST), "-q", "-p", "no:cacheprovider", *args, "tests/unit"], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "PYTHONSAFEPATH": "1"})
    wall = time.monotonic() - start
    last = [line for line in proc.stdout.splitlines() if " in " in line and SUMMARY.search(line)]
    counts = {k: int(n) for n, k in SUMMARY.findall(last[-1] if last else "")}
    return wall, counts, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args()
    fast_s, fast, fast_rc = run(["-m", "not slow"])
    unit_s, unit, unit_rc = run([])
    ran = lambda c: sum(c.get(k, 0) for k in ("passed", "failed", "xfailed", "xpassed", "skipped"))  # noqa: E731
    out = {"fast": {"tests": ran(fast), "wall_s": round(fast_s, 1), "exit": fast_rc},
           "unit": {"tests": ran(unit), "wall_s": round(unit_s, 1), "exit": unit_rc},
           "share_of_tests": round(ran(fast) / max(ran(unit), 1), 3),
           "share_of_time": round(fast_s / max(unit_s, 1e-9), 3)}
    if not args.json:
        print(f"| run | tests | wall s |\n|---|---|---|\n| make test-fast | {ran(fast)} | {fast_s:.1f} |\n"
              f"| make test-unit | {ran(unit)} | {unit_s:.1f} |")
        print(f"fast loop: {out['share_of_tests']:.1%} of the unit tests in {out['share_of_time']:.1%} of the "
              "unit tier's wall time")
    print(json.dumps(out))
    return 0 if fast_rc == 0 and unit_rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
