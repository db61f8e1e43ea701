"""What kvplan's reservation gate costs inside vLLM 0.33's own engine loop, on CPU: engine-loop iterations per
second of vLLM's stock schedulers and kvplan's gated ones on the same workload, sync (``EngineCore.step``) and
async (``step_with_batch_queue``), measured in the same run.

The executor fabricates tokens (no model runs), so the loop is all scheduling and bookkeeping: this is the worst
case for the gate's relative cost (on a GPU a step is tens of milliseconds). The gated runs admit fewer requests at
a time than stock, so they run more iterations with fewer running requests, and vLLM re-examines the blocked head of
the queue (prefix-cache lookup included) every step; so both the loop's time per generated token and the time
spent inside the gate itself (``kvplan_admits``) are reported.

Workload: the first N requests of a vendored trace (prompt and output lengths; prompts capped at 2,048 tokens and
outputs at 1,024), four arriving per iteration (a queue that never drains), one class reserving its 90th-percentile
output; 2,048 usable KV blocks of 16 tokens.

Usage: ``python benchmarks/vllm_gate_overhead.py [--requests 1500] [--trace kvcore/data/traces/azure2023_conv.csv]``
(uses the cached vLLM 0.33 venv of :mod:`kvplan_dev.vllm_env`, installed on first use; ``$KVPLAN_VLLM_PYTHON``
overrides it). Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from kvcore import load_trace
from kvplan_dev.vllm_env import ensure_vllm_env
from kvplan_dev.vllm_overlay import OverlayError, make_overlay, run_engine_driver

REPO = Path(__file__).resolve().parents[1]
VARIANTS = [
    {"name": "stock-sync", "scheduler_cls": "vllm.v1.core.sched.scheduler.Scheduler", "async": False},
    {"name": "gated-sync", "scheduler_cls": "kvplan_vllm.scheduler.ReservationScheduler", "async": False},
    {"name": "stock-async", "scheduler_cls": "vllm.v1.core.sched.async_scheduler.AsyncScheduler", "async": True},
    {"name": "gated-async", "scheduler_cls": "kvplan_vllm.scheduler.AsyncReservationScheduler", "async": True},
]


def workload(trace: Path, n: int, seed: int) -> tuple[list[dict[str, object]], int]:
    data = load_trace(trace)
    prompts = np.minimum(np.asarray(data.input_tokens[:n], dtype=int), 2048).clip(1)
    outputs = np.minimum(np.asarray(data.output_tokens[:n], dtype=int), 1024).clip(1)
    rng = np.random.default_rng(seed)
    reqs = [{"id": f"q{i:05d}", "prompt": [10000 + i] + rng.integers(3, 30000, size=int(p) - 1).tolist(),
             "max_tokens": int(o), "arrival_step": i // 4, "xargs": {"kvplan_class": "chat"}}
            for i, (p, o) in enumerate(zip(prompts, outputs))]
    return reqs, int(np.quantile(outputs, 0.9))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--trace", type=Path, default=REPO / "kvcore" / "data" / "traces" / "azure2023_conv.csv")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    reqs, reserve = workload(args.trace, args.requests, args.seed)
    doc = json.dumps({"format": "kvplan.reservations.v1", "defaultClass": "chat",
                      "classes": {"chat": {"reserveTokens": reserve}}})
    override = os.environ.get("KVPLAN_VLLM_PYTHON")
    base = Path(override) if override else ensure_vllm_env(progress=lambda m: print(m, file=sys.stderr))
    with tempfile.TemporaryDirectory(prefix="kvplan-gate-bench-") as tmp:
        try:
            python = make_overlay(base, Path(tmp) / "overlay", REPO)
            work = Path(tmp) / "run"
            work.mkdir()
            result = run_engine_driver(python, {
                "engine": {"num_blocks": 2049, "block_size": 16, "max_model_len": 4096, "max_num_seqs": 256,
                           "max_num_batched_tokens": 8192, "prefix_caching": False},
                "reservations": doc, "requests": reqs, "variants": VARIANTS, "max_steps": 10**7,
                "record_attempts": False,
            }, work)
        except OverlayError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    rows = {}
    print(f"{'variant':<12} {'iterations':>10} {'seconds':>8} {'iter/s':>8} {'us/req-step':>11} {'preempt':>8} "
          f"{'gate calls':>10} {'gate s':>7} {'gate us/call':>12}")
    for v in VARIANTS:
        run = result[v["name"]]
        assert isinstance(run, dict) and run["complete"], v["name"]
        per_req = run["requests"]
        req_steps = sum(r["tokens"] for r in per_req.values())
        preempt = sum(r["preemptions"] for r in per_req.values())
        rows[v["name"]] = {"iterations": run["iterations"], "seconds": round(run["seconds"], 3),
                           "iter_per_s": round(run["iterations"] / run["seconds"], 1),
                           "us_per_request_step": round(1e6 * run["seconds"] / req_steps, 2), "preemptions": preempt,
                           "gate_calls": run["gate_calls"], "gate_seconds": round(run["gate_seconds"], 3),
                           "gate_us_per_call": round(1e6 * run["gate_seconds"] / max(1, run["gate_calls"]), 1)}
        r = rows[v["name"]]
        print(f"{v['name']:<12} {r['iterations']:>10} {r['seconds']:>8} {r['iter_per_s']:>8} "
              f"{r['us_per_request_step']:>11} {r['preemptions']:>8} {r['gate_calls']:>10} {r['gate_seconds']:>7} "
              f"{r['gate_us_per_call']:>12}")
    ratios = {mode: round(rows[f"gated-{mode}"]["us_per_request_step"] / rows[f"stock-{mode}"]["us_per_request_step"],
                          3) for mode in ("sync", "async")}
    gate_share = {mode: round(rows[f"gated-{mode}"]["gate_seconds"] / rows[f"gated-{mode}"]["seconds"], 3)
                  for mode in ("sync", "async")}
    print(json.dumps({"requests": len(reqs), "reserve_tokens": reserve, "rows": rows,
                      "gated_over_stock_time_per_request_step": ratios, "gate_share_of_loop_time": gate_share}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
