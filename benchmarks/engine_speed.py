"""vLLM engine model throughput: requests replayed per second by ``kvcore.sim.engine.simulate_engine``.

The replay (:func:`build_case`; ``sim_speed.py``'s until the reservation-admission simulator it timed was retired,
issue 21): 100,000 requests resampled (seeded) from ``azure2023_conv.csv`` at 35 requests/s, two classes split at the
median prompt, four groups (15 replicas, 40k-300k KV tokens, routed by a fixed matrix, shared class prefixes of 64
and 256 tokens), through the vLLM engine model: 16-token blocks, ``max_num_seqs`` 256, 2048 batched tokens, in three variants: vLLM's
defaults (prefix caching on), prefix caching off, and kvplan's gate with the policy's reservations; and vLLM's defaults with each group's decode curve from the
measured step-time model (``SimGroup.decode_step_knots_s``) instead of its line, without and with the model's
context term (``SimGroup.step_time_per_context_token_s``: each step follows its requests' context). Each runs
``--repeats`` times; best and median are reported as wall time and as this process's CPU time (the machine is
shared). In the same run a 2,000-request case is replayed by the fast model and the step-by-step reference, with
the line and with context-dependent steps: their
per-request outcomes must be identical (exit 1 otherwise) and the speed ratio is reported. Target:
>= 20,000 requests/s on the 100,000-request benchmark.

    python benchmarks/engine_speed.py [--requests 100000] [--repeats 3] [--json]
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
from numpy.typing import NDArray

from kvcore import EngineConfig, SimGroup, SimPolicy, Workload, resample_trace, simulate_engine

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

def measured_curves(groups: tuple[SimGroup, ...], *, context: bool = False) -> tuple[SimGroup, ...]:
    """The groups with the decode curve of the measured step-time model of the layout each names (A100-80GB,
    Llama-70B or -8B at its TP), and with ``context`` its context term (each step's duration follows its requests'
    context): what ``SimGroup.from_profile`` gives the planner's groups."""
    from kvcore.profiles import roofline

    out = []
    for g in groups:
        _, tp, model = g.name.split("-")
        prof = roofline("A100-80GB", "llama-" + model, int(tp[2:]), 1)
        update: dict[str, object] = {"decode_step_knots_s": prof.decode_knots}
        if context:
            update["step_time_per_context_token_s"] = prof.context_s_per_token
        out.append(g.model_copy(update=update))
    return tuple(out)


VARIANTS = {
    "vllm-default": (EngineConfig(), GROUPS),
    "no-prefix-cache": (EngineConfig(prefix_caching=False), GROUPS),
    "gate": (EngineConfig(admission="gate"), GROUPS),
    "vllm-default, measured decode curves": (EngineConfig(), measured_curves(GROUPS)),
    "vllm-default, measured curves, context-dependent steps": (EngineConfig(), measured_curves(GROUPS, context=True)),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=35.0, help="arrival rate of the replay, requests/s")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small", type=int, default=2_000, help="requests in the fast-vs-reference case")
    parser.add_argument("--seed", type=int, default=20231116)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    workload, policy = build_case(DEFAULT_TRACE, args.requests, args.rate, args.seed)
    report: dict[str, object] = {"trace": DEFAULT_TRACE.name, "requests": args.requests,
                                 "replicas": sum(g.replicas for g in GROUPS), "repeats": args.repeats}
    variants = {}
    for name, (engine, groups) in VARIANTS.items():
        walls, cpus = [], []
        result = None
        for _ in range(args.repeats):
            start, cpu = time.perf_counter(), time.process_time()
            result = simulate_engine(workload, groups, policy, rng=np.random.default_rng(args.seed),
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
    small_w, small_p = build_case(DEFAULT_TRACE, args.small, 60.0, args.seed + 1)
    cases = {"small_case": GROUPS, "small_case_context": measured_curves(GROUPS, context=True)}
    agree = True
    for key, groups in cases.items():
        timings, results = {}, {}
        for label, reference in (("fast", False), ("reference", True)):
            cpu = time.process_time()
            results[label] = simulate_engine(small_w, groups, small_p, rng=np.random.default_rng(1),
                                             reference=reference, keep_requests=True)
            timings[label] = time.process_time() - cpu
        fast_o, ref_o = results["fast"].outcomes, results["reference"].outcomes
        assert fast_o is not None and ref_o is not None
        same = all(np.array_equal(getattr(fast_o, f), getattr(ref_o, f)) for f in
                   ("admit_ns", "finish_ns", "first_token_ns", "max_gap_ns", "preemptions", "recomputed", "steps"))
        agree = agree and same
        report[key] = {"requests": args.small, "fast_cpu_s": timings["fast"],
                       "reference_cpu_s": timings["reference"],
                       "speed_ratio": timings["reference"] / timings["fast"],
                       "preemptions": results["fast"].preemptions, "identical": same}
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
        for key in cases:
            sc = report[key]
            assert isinstance(sc, dict)
            print(f"{key.replace('_', ' ')} ({args.small:,} requests, CPU time): fast {sc['fast_cpu_s']:.2f} s, "
                  f"reference {sc['reference_cpu_s']:.2f} s, ratio {sc['speed_ratio']:.1f}x, identical: "
                  f"{sc['identical']} (load average {report['load_average_1m']:.1f})")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
