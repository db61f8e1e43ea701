"""vLLM engine model throughput: requests replayed per second by ``kvcore.sim.engine.simulate_engine``.

The replay is ``sim_speed.py``'s: 100,000 requests resampled (seeded) from ``azure2023_conv.csv`` at 35 requests/s,
two classes, four groups (15 replicas, 40k-300k KV tokens, shared class prefixes of 64 and 256 tokens), now through
the vLLM engine model: 16-token blocks, ``max_num_seqs`` 256, 2048 batched tokens, in three variants: vLLM's
defaults (prefix caching on), prefix caching off, and kvplan's gate with the policy's reservations. Each runs
``--repeats`` times; best and median are reported as wall time and as this process's CPU time (the machine is
shared). In the same run a 2,000-request case is replayed by the fast model and the step-by-step reference: their
per-request outcomes must be identical (exit 1 otherwise) and the speed ratio is reported. Target:
>= 20,000 requests/s on the 100,000-request benchmark.

    python benchmarks/engine_speed.py [--requests 100000] [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType

import numpy as np

from kvcore import EngineConfig, simulate_engine

HERE = Path(__file__).resolve().parent
VARIANTS = {
    "vllm-default": EngineConfig(),
    "no-prefix-cache": EngineConfig(prefix_caching=False),
    "gate": EngineConfig(admission="gate"),
}


def _sim_speed() -> ModuleType:
    """``sim_speed.py`` (its replay and groups), loaded by path: benchmarks run with PYTHONSAFEPATH=1."""
    spec = importlib.util.spec_from_file_location("kvplan_bench_sim_speed", HERE / "sim_speed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=35.0, help="arrival rate of the replay, requests/s")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small", type=int, default=2_000, help="requests in the fast-vs-reference case")
    parser.add_argument("--seed", type=int, default=20231116)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    bench = _sim_speed()
    workload, policy = bench.build_case(bench.DEFAULT_TRACE, args.requests, args.rate, args.seed)
    report: dict[str, object] = {"trace": bench.DEFAULT_TRACE.name, "requests": args.requests,
                                 "replicas": sum(g.replicas for g in bench.GROUPS), "repeats": args.repeats}
    variants = {}
    for name, engine in VARIANTS.items():
        walls, cpus = [], []
        result = None
        for _ in range(args.repeats):
            start, cpu = time.perf_counter(), time.process_time()
            result = simulate_engine(workload, bench.GROUPS, policy, rng=np.random.default_rng(args.seed),
                                     engine=engine)
            walls.append(time.perf_counter() - start)
            cpus.append(time.process_time() - cpu)
        assert result is not None
        variants[name] = {
            "requests_per_wall_s_best": args.requests / min(walls),
            "requests_per_wall_s_median": args.requests / statistics.median(walls),
            "requests_per_cpu_s_best": args.requests / min(cpus),
            "requests_per_cpu_s_median": args.requests / statistics.median(cpus),
            "engine_steps": result.steps, "finished": result.finished, "preemptions": result.preemptions,
            "recomputed_tokens": result.recomputed_tokens, "e2e_p99_s": result.e2e.p99,
            "stall_p99_s": result.stall.p99, "simulated_s": result.duration_s,
        }
    report["variants"] = variants
    small_w, small_p = bench.build_case(bench.DEFAULT_TRACE, args.small, 60.0, args.seed + 1)
    timings, results = {}, {}
    for label, reference in (("fast", False), ("reference", True)):
        cpu = time.process_time()
        results[label] = simulate_engine(small_w, bench.GROUPS, small_p, rng=np.random.default_rng(1),
                                         reference=reference, keep_requests=True)
        timings[label] = time.process_time() - cpu
    fast_o, ref_o = results["fast"].outcomes, results["reference"].outcomes
    assert fast_o is not None and ref_o is not None
    agree = all(np.array_equal(getattr(fast_o, f), getattr(ref_o, f)) for f in
                ("admit_ns", "finish_ns", "first_token_ns", "max_gap_ns", "preemptions", "recomputed", "steps"))
    report["small_case"] = {"requests": args.small, "fast_cpu_s": timings["fast"],
                            "reference_cpu_s": timings["reference"],
                            "speed_ratio": timings["reference"] / timings["fast"],
                            "preemptions": results["fast"].preemptions, "identical": agree}
    report["load_average_1m"] = os.getloadavg()[0]
    report["python"] = platform.python_version()
    report["machine"] = platform.processor() or platform.machine()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for name, v in variants.items():
            print(f"engine model, {name}: {v['requests_per_wall_s_best']:,.0f} requests/s wall best, "
                  f"{v['requests_per_wall_s_median']:,.0f} median; {v['requests_per_cpu_s_best']:,.0f} / "
                  f"{v['requests_per_cpu_s_median']:,.0f} per CPU second ({v['engine_steps']:,} engine steps, "
                  f"{v['preemptions']:,} preemptions, e2e P99 {v['e2e_p99_s']:.1f} s)")
        sc = report["small_case"]
        assert isinstance(sc, dict)
        print(f"small case ({args.small:,} requests, CPU time): fast {sc['fast_cpu_s']:.2f} s, reference "
              f"{sc['reference_cpu_s']:.2f} s, ratio {sc['speed_ratio']:.1f}x, identical: {sc['identical']} "
              f"(load average {report['load_average_1m']:.1f})")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
