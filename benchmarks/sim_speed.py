"""Simulator throughput: requests replayed per second of wall time by ``kvcore.sim.simulate``.

The replay: 100,000 requests resampled (seeded) from a real trace (default ``azure2023_conv.csv`` in the shared
traces), two classes split at the median input length, four groups of replicas with different capacities and
step times, routed by a fixed matrix, with reservations below the longest outputs so preemptions happen. The
fast simulator runs ``--repeats`` times; best and median are reported, as wall time and as this process's CPU time
(the development machine is shared, so wall time includes waiting for a core). In the same run a small case (default
2,000 requests) is replayed by both simulators and the fast/reference speed ratio reported, with a check that
they agree on preemptions.

    python benchmarks/sim_speed.py [--trace FILE] [--requests 100000] [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from kvcore import SimConfig, SimGroup, SimPolicy, Workload, resample_trace, simulate, simulate_reference

T = TypeVar("T")
DEFAULT_TRACE = Path(__file__).resolve().parents[1] / "kvcore" / "data" / "traces" / "azure2023_conv.csv"

GROUPS = (
    SimGroup(name="a100-tp4-70b", replicas=4, kv_capacity_tokens=120_000, step_time_base_s=0.030,
             step_time_per_seq_s=0.0004, prefill_tokens_per_s=8_000),
    SimGroup(name="a100-tp2-70b", replicas=3, kv_capacity_tokens=40_000, step_time_base_s=0.045,
             step_time_per_seq_s=0.0006, prefill_tokens_per_s=4_000),
    SimGroup(name="a100-tp1-8b", replicas=6, kv_capacity_tokens=60_000, step_time_base_s=0.012,
             step_time_per_seq_s=0.0002, prefill_tokens_per_s=15_000),
    SimGroup(name="a100-tp8-70b", replicas=2, kv_capacity_tokens=300_000, step_time_base_s=0.020,
             step_time_per_seq_s=0.0003, prefill_tokens_per_s=16_000),
)  # fmt: skip


def load_trace(path: Path) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """The columns ``arrival_s, input_tokens, output_tokens`` of a shared trace (one with arrival times)."""
    data = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float64, ndmin=2)
    return data[:, 0], data[:, 1], data[:, 2]


def build_case(path: Path, n: int, rate_rps: float, seed: int) -> tuple[Workload, SimPolicy]:
    arrival, inp, out = load_trace(path)
    cls = (inp > np.median(inp)).astype(np.int64)
    rng = np.random.default_rng(seed)
    workload = resample_trace(inp, out, n, rng=rng, arrival_s=arrival, rate_rps=rate_rps, class_index=cls,
                              n_classes=2)  # fmt: skip
    policy = SimPolicy.from_arrays(
        reserve_tokens=[300, 200],
        routing=[[0.3, 0.1, 0.5, 0.1], [0.4, 0.1, 0.2, 0.3]],
        prefix_fraction=[[0.5, 0.0, 0.5, 0.0], [0.2, 0.2, 0.0, 0.5]],
        prefix_tokens=[64, 256],
        e2e_slo_s=[20.0, 40.0],
        ttft_slo_s=[2.0, 5.0],
        cp=10.0,
        cw=1.0,
    )
    return workload, policy


def timed(fn: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[float, float, T]:
    """(wall seconds, CPU seconds of this process, result)."""
    start, cpu = time.perf_counter(), time.process_time()
    result = fn(*args, **kwargs)
    return time.perf_counter() - start, time.process_time() - cpu, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=35.0,
                        help="mean arrival rate of the replay, requests/s (35: busy, some preemptions, stable)")
    parser.add_argument("--small-rate", type=float, default=60.0,
                        help="arrival rate of the small case (60: dense enough to preempt within 2,000 requests)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--small", type=int, default=2_000, help="requests in the fast-vs-reference case")
    parser.add_argument("--seed", type=int, default=20231116)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    workload, policy = build_case(args.trace, args.requests, args.rate, args.seed)
    config = SimConfig()
    walls, cpus = [], []
    result = None
    for _ in range(args.repeats):
        wall, cpu, result = timed(simulate, workload, GROUPS, policy, rng=np.random.default_rng(args.seed),
                                  config=config)  # fmt: skip
        walls.append(wall)
        cpus.append(cpu)
    assert result is not None
    # the small case is denser per replica than the replay so that it preempts
    small_w, small_p = build_case(args.trace, args.small, args.small_rate, args.seed + 1)
    _, fast_s, fast_r = timed(simulate, small_w, GROUPS, small_p, rng=np.random.default_rng(1))
    _, ref_s, ref_r = timed(simulate_reference, small_w, GROUPS, small_p, rng=np.random.default_rng(1))

    report = {
        "trace": args.trace.name,
        "requests": args.requests,
        "groups": len(GROUPS),
        "replicas": sum(g.replicas for g in GROUPS),
        "arrival_rate_rps": args.rate,
        "repeats": args.repeats,
        "wall_s_best": min(walls),
        "wall_s_median": statistics.median(walls),
        "requests_per_s_best": args.requests / min(walls),
        "requests_per_s_median": args.requests / statistics.median(walls),
        "cpu_s_best": min(cpus),
        "cpu_s_median": statistics.median(cpus),
        "requests_per_cpu_s_best": args.requests / min(cpus),
        "requests_per_cpu_s_median": args.requests / statistics.median(cpus),
        "load_average_1m": os.getloadavg()[0],
        "replay": {
            "finished": result.finished,
            "rejected": result.rejected,
            "preemptions": result.preemptions,
            "e2e_p99_s": result.e2e.p99,
            "simulated_s": result.duration_s,
        },
        "small_case": {
            "requests": args.small,
            "arrival_rate_rps": args.small_rate,
            "fast_cpu_s": fast_s,
            "reference_cpu_s": ref_s,
            "speed_ratio": ref_s / fast_s,
            "preemptions_fast": fast_r.preemptions,
            "preemptions_reference": ref_r.preemptions,
            "agree": fast_r.preemptions == ref_r.preemptions,
        },
        "python": platform.python_version(),
        "machine": platform.processor() or platform.machine(),
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"fast simulator: {report['requests_per_s_best']:,.0f} requests/s wall best, "
            f"{report['requests_per_s_median']:,.0f} median of {args.repeats}; "
            f"{report['requests_per_cpu_s_best']:,.0f} / {report['requests_per_cpu_s_median']:,.0f} per CPU second "
            f"({args.requests:,} requests, {len(GROUPS)} groups, {report['replicas']} replicas, "
            f"{result.preemptions:,} preemptions, load average {report['load_average_1m']:.1f})"
        )
        print(
            f"small case ({args.small:,} requests, CPU time): fast {fast_s:.3f} s, reference {ref_s:.3f} s, "
            f"ratio {ref_s / fast_s:.1f}x, preemptions {fast_r.preemptions} vs {ref_r.preemptions}"
        )
    return 0 if report["small_case"]["agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
