"""Regenerate the "vLLM in the loop" section of ``docs/results.md`` and its plots: ``kvcore evaluate --engine vllm
--frontier`` on every vendored trace at loads 0.7 and 0.9, with the issue-13 targets checked on the numbers.

The section sits between the markers ``<!-- engine:begin -->`` and ``<!-- engine:end -->`` (appended when absent;
``benchmarks/paper_tables.py`` keeps it when it rewrites the rest). Plots: ``docs/img/engine-<trace>.png``. Rows of
every run also go to ``docs/img/engine-rows.csv``.

    python benchmarks/engine_results.py [--traces-dir DIR] [--rho 10] [--out docs] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import csv
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

from kvcore.evaluate.engine import EngineEvaluation, EngineFleet, EngineRow, evaluate_engine
from kvcore.evaluate.engine_report import frontier_check, plot_frontier, table_markdown
from kvcore.traces import load_trace

REPO = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- engine:begin -->", "<!-- engine:end -->"


def _get(ev: EngineEvaluation, load: float, method: str) -> EngineRow:
    return next(r for r in ev.rows if r.load == load and r.method == method)


def _ratio(a: float | None, b: float | None) -> float:
    if a is None or b is None or b == 0:
        return math.nan
    return a / b


def _gm(values: list[float]) -> float:
    v = [x for x in values if not math.isnan(x)]
    if not v:
        return math.nan
    if any(x <= 0 for x in v):
        return 0.0
    return float(np.exp(np.mean(np.log(v))))


def targets(evs: list[EngineEvaluation], loads: tuple[float, ...]) -> str:
    out = ["**kvplan-knobs against vllm-default** (target: P99 e2e and goodput never more than 2% worse; fewer stalled "
           "requests wherever vllm-default has any):", "",
           "| trace | load | P99 e2e ratio | goodput ratio | stalled default -> knobs | met |", "|---|---|---|---|---|---|"]
    worst_p99, worst_good, all_met = 0.0, math.inf, True
    for ev in evs:
        for load in loads:
            d, k = _get(ev, load, "vllm-default"), _get(ev, load, "kvplan-knobs")
            rp, rg = _ratio(k.e2e_p99_s, d.e2e_p99_s), _ratio(k.goodput_rps, d.goodput_rps)
            fewer = (d.stalled_frac or 0) == 0 or (k.stalled_frac or 0) < (d.stalled_frac or 0)
            met = (rp <= 1.02 or math.isnan(rp)) and (rg >= 0.98 or math.isnan(rg)) and fewer
            all_met &= met
            worst_p99 = max(worst_p99, rp if not math.isnan(rp) else 0)
            worst_good = min(worst_good, rg if not math.isnan(rg) else math.inf)
            out.append(f"| {Path(ev.trace).stem} | {load:g} | {rp:.3f} | {rg:.3f} | {d.stalled_frac or 0:.4f} -> "
                       f"{k.stalled_frac or 0:.4f} | {'yes' if met else '**no**'} |")
    out += ["", f"Worst P99 e2e ratio {worst_p99:.3f}, worst goodput ratio {worst_good:.3f}: target "
            f"{'met on every row' if all_met else '**not met on every row**'}.", ""]
    hi = max(loads)
    out += [f"**kvplan-plugin against vllm-default at load {hi:g}** (target: stalled share and recomputed tokens cut "
            ">= 90%, geometric mean over traces, goodput within 10%):", "",
            "| trace | stalled default -> plugin | recomputed default -> plugin | goodput ratio |", "|---|---|---|---|"]
    stall_r, rec_r, good_r = [], [], []
    for ev in evs:
        d, p = _get(ev, hi, "vllm-default"), _get(ev, hi, "kvplan-plugin")
        if (d.stalled_frac or 0) > 0:
            stall_r.append((p.stalled_frac or 0) / (d.stalled_frac or 1))
        if d.recomputed_tokens > 0:
            rec_r.append(p.recomputed_tokens / d.recomputed_tokens)
        good_r.append(_ratio(p.goodput_rps, d.goodput_rps))
        out.append(f"| {Path(ev.trace).stem} | {d.stalled_frac or 0:.4f} -> {p.stalled_frac or 0:.4f} | "
                   f"{d.recomputed_tokens:,} -> {p.recomputed_tokens:,} | {_ratio(p.goodput_rps, d.goodput_rps):.3f} |")
    gs, gr, gg = _gm(stall_r), _gm(rec_r), _gm(good_r)
    out += ["", f"Geometric means over the traces where vllm-default has any: stalled ratio {gs:.3f} (cut "
            f"{1 - gs:.0%}, {len(stall_r)} traces), recomputed ratio {gr:.3f} (cut {1 - gr:.0%}, {len(rec_r)} traces); "
            f"goodput ratio {gg:.3f} over all {len(good_r)} traces (worst {min(good_r):.3f}).", ""]
    out += ["**Frontier** (target: every stall level a stock (watermark, max_num_seqs) point reaches, some plugin rho "
            "reaches with no worse P99 e2e):", "", "| trace | load | stock points matched by the plugin |",
            "|---|---|---|"]
    for ev in evs:
        for load in loads:
            n, m = frontier_check(ev.rows, load)
            out.append(f"| {Path(ev.trace).stem} | {load:g} | {m} of {n} |")
    return "\n".join(out)


def section(evs: list[EngineEvaluation], loads: tuple[float, ...], rho: float, elapsed: float,
            fleet: EngineFleet) -> str:
    parts = [BEGIN, "## 5. vLLM in the loop: stock vLLM, kvplan's knobs and kvplan's plugin (issue 13)", "",
             f"Regenerated by `python benchmarks/engine_results.py` ({elapsed:.0f} s on {platform.machine()}, Python "
             f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}); do not edit by "
             "hand. Each trace is replayed through kvcore's vLLM engine model (`kvcore.sim.engine`, held to vLLM 0.33 "
             "itself by `make parity`) with `kvcore evaluate --trace F --engine vllm --frontier`: split protocol "
             "(history = first half, replay = second half), two classes by prompt length, rho = "
             f"{rho:g} for both, {fleet.replicas} replicas of {fleet.model} TP{fleet.tp} on {fleet.gpu_type} with "
             f"{fleet.kv_capacity_tokens:,} KV tokens each, vLLM's defaults otherwise. Load = offered work over the "
             "profile's capacity at the batch the KV memory holds on the trace (`kvcore/evaluate/engine.py`). Goodput "
             f"counts requests with TTFT <= {fleet.ttft_slo_s:g} s and mean time per output token <= "
             f"{fleet.tpot_slo_s:g} s; stalled = longest gap between two tokens > 1 s; cost = waste + rho x overflow "
             "per request in token slots (waste: reserved slots never filled; overflow: recomputed tokens).", "",
             "### Targets", "", targets(evs, loads), "", REGIMES, ""]
    for ev in evs:
        stem = Path(ev.trace).stem
        parts += [f"### {ev.trace}", "",
                  f"{ev.requests:,} requests replayed; load 1 = {ev.capacity_rps:.3g} requests/s; plugin reservations "
                  + ", ".join(f"{k} {v:.0f}" for k, v in ev.reserves.items()) + " tokens.", ""]
        parts += [f"- knobs at load {load}: {note}" for load, note in ev.knobs.items()]
        parts += ["", table_markdown(ev), "", f"![engine frontier {stem}](img/engine-{stem}.png)", ""]
    parts.append(END)
    return "\n".join(parts)


REGIMES = """### Where a reservation pays, and where it does not

Written from the run of 2026-11-30 14:22 UTC (the tables below); re-read it against the tables after a rerun.

- **No memory pressure** (Azure code: long prompts, short outputs; BurstGPT ChatGPT API: light traffic): nothing is
  preempted at either load and the three variants are identical. A reservation buys nothing there; the knob rule
  keeps stock values and the plugin's only effect is the slots it holds idle (its cost column).
- **Memory binds** (the conversation traces and ShareGPT, whose outputs are long): at load 0.9 stock vLLM preempts
  hundreds to about two thousand requests, recomputes 140k-510k tokens, and 0.1%-2% of requests wait more than
  1 s between two tokens. A small watermark is the cheapest cure: the knob rule picks 0.01-0.02 of the blocks
  (0.1 once), which removes 80-100% of the stalled requests and most of the recompute while P99 e2e and goodput
  stay within 2% or improve (less recompute is less wasted GPU time). Target met on every trace and load.
- **kvplan's plugin** (kvplan's gate with the plan's per-class reservations at rho = 10, i.e. DRO reserves around
  the upper tail of each class's outputs) removes every preemption and every recomputed token on every trace, but
  pays with concurrency: admission waits for the reserved footprint. Where that footprint is large against the KV
  memory, goodput falls at load 0.9 (Azure conv 0.74x, ShareGPT 0.18x); on the BurstGPT conversation traces the
  plugin's goodput is 1.05-1.16x stock's. The 10% goodput target is met on five traces of seven, not in the
  geometric mean.
- **Frontier**: per-class reservations are not a finer instrument than one watermark on these traces. At load 0.7
  the plugin matches every stock (watermark, max_num_seqs) point on four traces; elsewhere 15-20 of 24: the
  unmatched points are stock watermarks that reach zero stalls with a lower P99 e2e than any plugin rho (even
  rho = 1, the median, reserves more than a 1-2% watermark holds back).
- **So**: with vLLM 0.33's prefix caching and these traces, a reservation pays only where a stall is priced far
  above its latency cost, and then a watermark does it more cheaply. The plugin is the instrument for per-class
  guarantees (one class protected, others not), which these single-rho runs do not exercise. Not measured here:
  prefix caching off, where every preemption recomputes the whole context."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--traces-dir", type=Path, default=REPO / "kvcore" / "data" / "traces")
    parser.add_argument("--rho", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=REPO / "docs")
    parser.add_argument("--only", nargs="*", default=None, help="trace file names to run (default: all)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    loads = (0.7, 0.9)
    fleet = EngineFleet()
    files = sorted(args.traces_dir.glob("*.csv"))
    if args.only:
        files = [f for f in files if f.name in args.only]
    evs = []
    img = args.out / "img"
    img.mkdir(parents=True, exist_ok=True)
    for f in files:
        t0 = time.perf_counter()
        ev = evaluate_engine(load_trace(f), loads=loads, rho=args.rho, fleet=fleet, frontier=True)
        plot_frontier(ev, img / f"engine-{f.stem}.png")
        evs.append(ev)
        print(f"{f.name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    with (img / "engine-rows.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(EngineRow.model_fields))
        w.writeheader()
        for ev in evs:
            for r in ev.rows:
                w.writerow({k: ("" if v is None else v) for k, v in r.model_dump().items()})
    text = section(evs, loads, args.rho, time.perf_counter() - started, fleet)
    results = args.out / "results.md"
    old = results.read_text(encoding="utf-8") if results.exists() else ""
    if BEGIN in old and END in old:
        new = old[: old.index(BEGIN)] + text + old[old.index(END) + len(END):]
    else:
        new = old.rstrip("\n") + "\n\n" + text + "\n"
    results.write_text(new, encoding="utf-8")
    print(f"wrote {results} and {len(evs)} plots in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
