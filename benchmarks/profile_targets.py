"""Modelled vs measured for issue 22's targets, and the time to evaluate one layout's profile.

    .venv/bin/python benchmarks/profile_targets.py

Measured figures (MEASURED below) are the ones issue 22 compiled from public A100 measurements of Llama-2-70B
(vidur's per-operator profiles composed into steps, and published per-token latencies of optimised engines at TP4
and TP8): decode step at batch 1, TP4 31-36 ms, TP8 26 ms (composed from vidur's eager profiles; vLLM's own run
below measured 16.4 ms); decode slope at TP4 about 0.19 ms per sequence; TP4
1.2-1.4x the decode tokens/s per GPU of TP8. They were NOT used to fit anything: the kernel coefficients are fitted
on the vendored vidur kernel profiles (kvcore/profiles/calibrate.py), the graph-step costs on the published vLLM runs.
Then those runs (kvcore/data/profiling/published_vllm_runs.json), each replayed step by step through the model
(kvcore.profiles.published): the seven fit runs (Llama-3-8B on one A100 and Llama-3-70B at TP4 and TP8 on A100 and
H100 with 10 prompts; Llama-3-70B at TP4 on A100 and H100 with 320 prompts, batch up to 222), the first-token latency
of the batched prompts where a run has one (the prefill step plus the server's first-token cost) and the decode step
of each measured phase; four more runs (70B at TP2, the 8B on H100, Mixtral-8x7B at TP2 and TP4) are checks no fit
sees. Last, the planner's line t0 + t1*B
(kvcore.profiles.linear_step) against the model it is fitted to, over every catalogue layout.
"""

from __future__ import annotations

import math
import platform
import statistics
import time
from datetime import datetime, timezone

from kvcore.profiles import GPUS, MODELS, doubling_batches, measured, roofline
from kvcore.profiles.gpus import CATALOGUE
from kvcore.profiles.models import get_model
from kvcore.profiles.published import (compare, decode_log_errors, fit_first_token, fit_step_costs, fitting,
                                       load_runs, model_step)
from kvcore.profiles.steptime import FIRST_TOKEN, GRAPH, first_token_time, layout, step_time, tokens_per_s_per_gpu

MEASURED = {
    ("A100-80GB", "llama-2-70b", 4, "step_b1_ms"): (31.0, 36.0),
    ("A100-80GB", "llama-2-70b", 8, "step_b1_ms"): (26.0, 26.0),
    ("A100-80GB", "llama-2-70b", 4, "slope_ms_per_seq"): (0.19, 0.19),
}
TP4_OVER_TP8 = (1.2, 1.4)


def main() -> None:
    print(f"# {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()} {platform.processor() or ''} "
          f"python {platform.python_version()}")
    rows = []
    per_gpu: dict[tuple[str, str, int], float] = {}
    for gpu, model, tp in [("A100-80GB", "llama-2-70b", 4), ("A100-80GB", "llama-2-70b", 8),
                           ("A100-80GB", "llama-8b", 1), ("H100-SXM", "llama-70b", 4),
                           ("H100-SXM", "llama-70b", 8)]:
        lay = layout(CATALOGUE[gpu], get_model(model), tp, 1)
        steps = {b: step_time(lay, 1024.0, batch=b) * 1e3 for b in (1, 16, 32, 64)}
        slope = (steps[64] - steps[1]) / 63
        ttft = {p: first_token_time(lay, p) * 1e3 for p in (128, 2048)}
        per_gpu[(gpu, model, tp)] = tokens_per_s_per_gpu(lay)
        for key, val in (("step_b1_ms", steps[1]), ("slope_ms_per_seq", slope)):
            lo, hi = MEASURED.get((gpu, model, tp, key), (float("nan"), float("nan")))
            near = lo if val < lo else hi
            err = None if lo != lo else 0.0 if lo <= val <= hi else (val - near) / near
            rows.append((gpu, model, tp, key, f"{val:.3f}", (f"{lo:g}-{hi:g}" if lo != hi else f"{lo:g}") if lo == lo else "-",
                         "-" if err is None else f"{err:+.0%}" if err else "within"))
        rows.append((gpu, model, tp, "steps b16/32/64 ms", "/".join(f"{steps[b]:.1f}" for b in (16, 32, 64)), "-",
                     "-"))
        rows.append((gpu, model, tp, "ttft 128/2048 ms", f"{ttft[128]:.1f}/{ttft[2048]:.1f}", "-", "-"))
        rows.append((gpu, model, tp, "tokens/s per GPU", f"{per_gpu[(gpu, model, tp)]:.0f}", "-", "-"))
    print("| GPU | model | TP | figure | modelled | measured | off by |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")
    for gpu, model in (("A100-80GB", "llama-2-70b"), ("H100-SXM", "llama-70b")):
        ratio = per_gpu[(gpu, model, 4)] / per_gpu[(gpu, model, 8)]
        meas = f"{TP4_OVER_TP8[0]}-{TP4_OVER_TP8[1]}" if gpu == "A100-80GB" else "-"
        print(f"| {gpu} | {model} | 4 vs 8 | tokens/s per GPU ratio | {ratio:.2f} | {meas} | "
              f"{'TP4 ranks above TP8' if ratio > 1 else 'TP8 ranks above'} |")
    lay = layout(CATALOGUE["A100-80GB"], get_model("llama-70b"), 4, 1)
    step_time(lay, 1024.0, batch=1)  # the one-off calibration fit
    n = 200
    t = time.perf_counter()
    for i in range(n):
        lay = layout(CATALOGUE["A100-80GB"], get_model("llama-70b"), (1, 2, 4, 8)[i % 4] if i % 4 else 4, 1)
        tokens_per_s_per_gpu(lay)
        step_time(lay, 1024.0, batch=32)
    print(f"\nper-layout evaluation (layout + throughput + one step): {(time.perf_counter() - t) / n * 1e3:.3f} ms")
    t = time.perf_counter()
    for i in range(n):
        measured.__wrapped__("A100-80GB", get_model("llama-70b"), (1, 2, 4, 8)[i % 4], 1)
    print(f"planner profile (kvcore.profiles.measured, uncached): {(time.perf_counter() - t) / n * 1e3:.3f} ms")
    published()
    line_errors()


def published() -> None:
    """Modelled against measured for each published vLLM run (see kvcore.profiles.published), then the graph-step
    costs and the first-token cost fitted on all the fit runs and on all but one, with the held-out run's errors."""
    print("\n| role | GPU | model | TP | figure | batch | modelled ms | measured ms | modelled / measured |\n"
          "|---|---|---|---|---|---|---|---|---|")
    runs = load_runs()
    for r in runs:
        for c in compare(r, model_step(r, GRAPH), FIRST_TOKEN):
            print(f"| {r.role} | {r.gpu} | {r.model} | {r.tp} | {c.figure} | {c.batch} | {c.modelled_s * 1e3:.1f} | "
                  f"{c.measured_s * 1e3:.1f} | {c.ratio:.2f} |")
    fit = fitting(runs)
    print("\n| fitted on | kernel us | all-reduce us | CPU ms | compute share | first token ms + ms/GPU | errors of "
          "the run left out (decode; TTFT) |\n|---|---|---|---|---|---|---|")
    for held in [None, *fit]:
        rest = [r for r in fit if r is not held]
        f, ft = fit_step_costs(rest, GRAPH), fit_first_token(rest, GRAPH)
        errs = "-"
        if held is not None:
            ttft = [c.ratio for c in compare(held, model_step(held, f), ft) if c.kind == "ttft"]
            errs = " ".join(f"{math.exp(e) - 1:+.1%}" for e in decode_log_errors([held], f))
            errs += "; " + (" ".join(f"{x - 1:+.1%}" for x in ttft) or "no TTFT")
        name = (f"all {len(fit)} fit runs" if held is None else
                f"all but {held.gpu} {held.model} TP{held.tp}, {len(held.input_lens)} prompts")
        print(f"| {name} | {f.kernel_s * 1e6:.2f} | {f.allreduce_s * 1e6:.1f} | {f.cpu_s * 1e3:.2f} | "
              f"{f.compute_share:.2f} | {ft.base_s * 1e3:.1f} + {ft.per_gpu_s * 1e3:.2f} | {errs} |")


def line_errors() -> None:
    """The planner's line t0 + t1*B against the step-time model at B = 1, 2, 4, ..., B* (ctx 1024), over every
    feasible catalogue layout with TP 1-8 and PP 1-2: the worst relative error per layout, summarised."""
    worst: dict[str, list[tuple[float, str]]] = {"dense": [], "moe": []}
    for gpu in GPUS:
        for name, arch in MODELS.items():
            for tp in (1, 2, 4, 8):
                for pp in (1, 2):
                    p = roofline(gpu, name, tp, pp)
                    if not p.feasible:
                        continue
                    lay = layout(CATALOGUE[gpu], arch, tp, pp)
                    b = int(p.operating_batch)
                    grid = [x for x in doubling_batches(b) if x < b] + [b]
                    err = max(abs(p.step_time(x) / step_time(lay, 1024.0, batch=x) - 1) for x in grid)
                    worst["moe" if arch.moe else "dense"].append((err, f"{gpu} {name} TP{tp} PP{pp}"))
    print("\n| models | layouts | median worst error | largest (layout) |\n|---|---|---|---|")
    for kind, rows in worst.items():
        rows.sort()
        print(f"| {kind} | {len(rows)} | {statistics.median(e for e, _ in rows):.1%} | {rows[-1][0]:.1%} "
              f"({rows[-1][1]}) |")


if __name__ == "__main__":
    main()
