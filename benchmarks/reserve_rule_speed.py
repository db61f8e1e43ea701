"""What the reservation rule (``kvcore.rules.reserve.choose_reserves``) costs per group: replays simulated and seconds,
the first choice and a re-pricing at another rho (which reuses the memoised replays), on the vendored traces'
histories at load 0.9 (the setup of ``kvcore evaluate --engine vllm``: 2 replays x 3,000 requests, 2 classes).

    python benchmarks/reserve_rule_speed.py [--traces-dir DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from kvcore import EngineFleet, EngineSetup
from kvcore import load_trace

REPO = Path(__file__).resolve().parents[1]
TRACES = ("azure2023_conv", "burstgpt_first7d_gpt4_conv", "sharegpt_llama2tok_8k")


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--traces-dir", type=Path, default=REPO / "kvcore" / "data" / "traces")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for stem in TRACES:
        setup = EngineSetup(load_trace(args.traces_dir / f"{stem}.csv"), EngineFleet())
        w0, c0 = _clock()
        first = setup.rule(0.9, 10.0, 0)
        w1, c1 = _clock()
        n1 = setup.replays(0.9, 0).simulated
        setup.rule(0.9, 100.0, 0)
        w2, c2 = _clock()
        n2 = setup.replays(0.9, 0).simulated
        rows.append({"trace": stem, "first_wall_s": w1 - w0, "first_cpu_s": c1 - c0, "first_vectors": n1,
                     "reprice_wall_s": w2 - w1, "reprice_cpu_s": c2 - c1, "reprice_new_vectors": n2 - n1,
                     "reserves": first.reserves})
    meta = {"machine": platform.machine(), "python": platform.python_version(),
            "utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if args.json:
        print(json.dumps({"meta": meta, "rows": rows}))
        return 0
    print(f"{meta['utc']}, {meta['machine']}, Python {meta['python']}")
    print("| trace | first choice: vectors, wall s, CPU s | re-priced at rho 100: new vectors, wall s, CPU s |")
    print("|---|---|---|")
    for r in rows:
        print(f"| {r['trace']} | {r['first_vectors']}, {r['first_wall_s']:.1f}, {r['first_cpu_s']:.1f} | "
              f"{r['reprice_new_vectors']}, {r['reprice_wall_s']:.1f}, {r['reprice_cpu_s']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
