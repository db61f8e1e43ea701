"""Peak memory of trace loading: ``kvcore.history.traces.load_trace`` streams, so its peak RSS should follow the arrays it
keeps (3 x 8 bytes per request), not the size of the file's text.

For each line count (default 1M and 10M) a trace CSV ``arrival_s,input_tokens,output_tokens`` is generated (seeded,
in a temporary directory), and each loader runs in a fresh subprocess that reports its own peak RSS
(``VmHWM`` of ``/proc/self/status``, reset to the current RSS through ``/proc/self/clear_refs`` just before the load,
since imports peak higher than a small load) and its RSS before the load:

* ``stream``: today's ``load_trace``;
* ``whole-text``: the loader as it was before streaming (read the text, split it into lines, keep every parsed row
  as Python lists, then build the arrays), reproduced here so the ratio is measured in the same run.

Printed per (lines, loader): file size, the arrays' bytes, the peak RSS added by the load (peak minus RSS after
imports), that added peak divided by the arrays' bytes, and the wall time.

    python benchmarks/trace_memory.py [--lines 1000000,10000000] [--loaders stream,whole-text] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

CHILD = r"""
import csv, json, sys, time
from pathlib import Path
import numpy as np
from kvcore.history.traces import load_trace

def whole_text(path):
    text = Path(path).read_text(encoding="utf-8")
    rows = [r for r in csv.reader(text.splitlines())]
    header = [h.strip() for h in rows[0]]
    idx = [header.index(c) for c in ("arrival_s", "input_tokens", "output_tokens")]
    cols = [[float(r[i]) for r in rows[1:] if r] for i in idx]
    return [np.array(c, dtype=np.float64) for c in cols]

def rss_kib(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(key + " not in /proc/self/status")

path, loader = sys.argv[1], sys.argv[2]
Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS: imports peak higher
base = rss_kib("VmRSS")
t0 = time.perf_counter()
if loader == "stream":
    t = load_trace(path)
    arrays = [t.arrival_s, t.input_tokens, t.output_tokens]
else:
    arrays = whole_text(path)
seconds = time.perf_counter() - t0
peak = rss_kib("VmHWM")
print(json.dumps({"base_kib": base, "peak_kib": peak, "array_bytes": sum(a.nbytes for a in arrays),
                  "requests": int(arrays[2].size), "seconds": seconds}))
"""


def write_trace(path: Path, lines: int, seed: int = 0) -> None:
    """``lines`` requests like the shared traces: increasing arrivals (ms resolution), integer token counts."""
    rng = np.random.default_rng(seed)
    block = 1_000_000
    t = 0.0
    with path.open("w", encoding="utf-8") as handle:
        handle.write("arrival_s,input_tokens,output_tokens\n")
        for start in range(0, lines, block):
            n = min(block, lines - start)
            arrivals = t + np.cumsum(rng.exponential(0.05, n))
            t = float(arrivals[-1])
            inputs = rng.integers(1, 8192, n)
            outputs = rng.integers(1, 4096, n)
            handle.writelines(f"{a:.3f},{i},{o}\n" for a, i, o in zip(arrivals.tolist(), inputs.tolist(),
                                                                      outputs.tolist()))


def measure(path: Path, loader: str) -> dict[str, Any]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), loader], capture_output=True, text=True, env=env,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{loader} on {path.name}: exit {done.returncode}: {done.stderr.strip()[-2000:]}")
    out: dict[str, Any] = json.loads(done.stdout)
    added = (out["peak_kib"] - out["base_kib"]) * 1024
    out.update(loader=loader, file_bytes=path.stat().st_size, added_peak_bytes=added,
               added_over_arrays=added / out["array_bytes"])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--lines", default="1000000,10000000", help="comma-separated line counts")
    parser.add_argument("--loaders", default="stream,whole-text", help="comma-separated: stream, whole-text")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    counts = [int(x) for x in args.lines.split(",") if x.strip()]
    loaders = [x.strip() for x in args.loaders.split(",") if x.strip()]
    rows = []
    with tempfile.TemporaryDirectory(prefix="kvplan-trace-mem-") as tmp:
        for n in counts:
            path = Path(tmp) / f"trace-{n}.csv"
            write_trace(path, n)
            for loader in loaders:
                rows.append({"lines": n, **measure(path, loader)})
                print(f"  {n:>10,} lines {loader:<10} done", file=sys.stderr, flush=True)
            path.unlink()
    meta = {"date": datetime.now(timezone.utc).isoformat(timespec="minutes"), "machine": platform.node(),
            "cpus": os.cpu_count(), "python": platform.python_version()}
    if args.json:
        print(json.dumps({**meta, "rows": rows}))
        return 0
    print(f"trace loading peak RSS, {meta['date']}, {meta['cpus']} CPUs, Python {meta['python']}")
    print(f"{'lines':>11} {'loader':<10} {'file MB':>8} {'arrays MB':>9} {'added peak MB':>13} "
          f"{'peak/arrays':>11} {'seconds':>8}")
    for r in rows:
        print(f"{r['lines']:>11,} {r['loader']:<10} {r['file_bytes'] / 1e6:>8.1f} {r['array_bytes'] / 1e6:>9.1f} "
              f"{r['added_peak_bytes'] / 1e6:>13.1f} {r['added_over_arrays']:>11.2f} {r['seconds']:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
