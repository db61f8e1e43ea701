"""`kvcore evaluate`: reservation policies replayed on a trace file under the split or rolling protocol, or (with
``--engine vllm``) stock vLLM, kvplan's knobs and kvplan's plugin through the vLLM engine model.

    kvcore evaluate --trace FILE [--protocol split|rolling] [--rho 2,5,10,20,50,100] [--shift 1.0,1.5,2.5]
                    [--method default,dro-paper,...] [--lmax TOKENS] [--observe raw|vllm|powers-of-4|kvplan]
                    [--bucket-model log-spline|...] [--simulate] [--out DIR] [--json]
    kvcore evaluate --trace FILE --engine vllm [--load 0.7,0.9] [--rho 10] [--frontier] [--out DIR] [--json]
    kvcore evaluate --trace FILE --engine vllm --slo-capacity [--ttft-slo 2] [--tpot-slo 0.1] [--slo-share 0.99]
                    [--slo-methods M,...] [--json]

``--slo-capacity`` finds, per method, the highest arrival rate at which the share of requests meets the SLO
(:mod:`kvcore.evaluate.slo_capacity`; ``kvcore.cli.evaluate_slo`` prints it).

With ``--engine vllm`` the output is one table (or ``{"rows": [...]}`` with ``--json``) with the keys ``trace, load,
method, preemptions, recomputed_tokens, ttft_p50_s, ttft_p99_s, e2e_p50_s, e2e_p99_s, stall_p99_s, stalled_frac,
goodput_rps, cost`` for the methods ``vllm-default``, ``kvplan-knobs``, ``kvplan-plugin`` (the reservations that pay)
and ``kvplan-plugin-dro`` (the plan's raw reservations) at each load
(:mod:`kvcore.evaluate.engine` states the protocol, fleet and measures); ``--frontier`` adds the plugin's rho sweep,
stock vLLM's watermark x max_num_seqs grid and the gate's per-class reservation x max_num_seqs grid (and, with
``--out``, the frontier plot).

Prints a table of mean cost per request (c_w = 1, c_p = rho) per policy, rho and shift, or with ``--json`` one
object ``{"trace", "protocol", "observe", "lmax", "requests", "plans", "rows": [{"observe", "rho", "shift",
"method", "cost", ...}]}``. ``--observe LAYOUT`` trains every policy on what the operator would see, per-window
bucket counts in that layout read back with ``--bucket-model`` (:mod:`kvcore.evaluate.observe`); costs are still
measured on the raw test outputs. ``--simulate`` adds P99 latency, SLO violation rate, preemptions and unfilled
reserved slot-seconds per row, replayed through the vLLM engine model with kvplan's gate on the one evaluation fleet
(:mod:`kvcore.evaluate.simulate`; until issue 21 a separate reservation-admission simulator).
``--out DIR`` also writes CSV, Markdown and PNG plots there. A progress bar goes to stderr. Protocols, policies
and the simulated fleet are documented in :mod:`kvcore.evaluate`. Exit status: 0 done, 2 bad input (a malformed
trace names its line).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from kvcore.bounds import MAX_RATIO, MAX_SEED, MAX_TOKENS
from kvcore.cli.args import int_arg
from kvcore.history.bucket_model import DEFAULT_MODEL, MODELS
from kvcore.cli.output import format_table, print_json, progress
from kvcore.errors import InputError
from kvcore.evaluate import DEFAULT_METHODS, DEFAULT_RHOS, DEFAULT_SHIFTS, PROTOCOLS, evaluate
from kvcore.evaluate.observe import OBSERVE
from kvcore.evaluate.report import write_report
from kvcore.planner.slo import RHO_MAX
from kvcore.history.traces import load_trace

#: Largest --load (a fraction of the saturation rate measured in the engine model): past a few times it every queue
#: only grows.
MAX_LOAD = 10.0


def _floats(text: str, flag: str, top: float) -> list[float]:
    out = []
    for i, part in enumerate(p.strip() for p in text.split(",")):
        if not part:
            raise InputError(flag, f"empty entry at position {i + 1} in {text!r}")
        try:
            v = float(part)
        except ValueError:
            raise InputError(flag, f"{part!r} is not a number") from None
        if not (v > 0 and v != float("inf")):
            raise InputError(flag, f"{part!r} must be a finite number > 0")
        if v > top:
            raise InputError(flag, f"{part!r} must be at most {top:g}")
        out.append(v)
    return out


def _fmt(values: tuple[float, ...]) -> str:
    return ",".join(f"{v:g}" for v in values)


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("evaluate", help="score reservation policies on a trace (split / rolling protocol)",
                       description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--trace", required=True, type=Path, help="CSV with arrival_s,input_tokens,output_tokens")
    p.add_argument("--protocol", choices=PROTOCOLS, default="split", help="split (default) or rolling")
    p.add_argument("--rho", default=None, help="comma-separated cost ratios c_p/c_w (default 2,5,10,20,50,100; "
                   "with --engine vllm one value, default 10)")
    p.add_argument("--shift", default=_fmt(DEFAULT_SHIFTS), help="comma-separated output-length multipliers")
    p.add_argument("--method", default=",".join(DEFAULT_METHODS), help="comma-separated policies")
    p.add_argument("--lmax", type=float, default=None, help="L_max in tokens (default: the trace's longest output)")
    p.add_argument("--observe", choices=OBSERVE, default="raw",
                   help="train on raw lengths (default) or on per-window bucket counts in this layout")
    p.add_argument("--bucket-model", choices=MODELS, default=DEFAULT_MODEL,
                   help=f"within-bucket model the counts are read with (default {DEFAULT_MODEL})")
    p.add_argument("--simulate", action="store_true",
                   help="also replay each row through the vLLM engine model with kvplan's gate holding the row's "
                   "reservations (2 replicas of 70B TP4, 100,000 KV tokens each, load 0.7; SLO: TTFT <= 2 s and "
                   "0.1 s per output token); before issue 21 a separate reservation-admission simulator")
    p.add_argument("--seed", type=int_arg(low=0, high=MAX_SEED), default=0,
                   help="seed of the engine model's generator (default 0)")
    p.add_argument("--out", type=Path, default=None, help="write CSV, Markdown and PNG plots into this directory")
    p.add_argument("--engine", choices=("reservation", "vllm"), default="reservation",
                   help="reservation (default): the reservation-policy evaluation; vllm: stock vLLM vs kvplan's knobs "
                   "vs kvplan's plugin through the vLLM engine model")
    p.add_argument("--load", default="0.7,0.9", help="--engine vllm: loads, fractions of the saturation "
                   "rate measured in the engine model (kvcore.evaluate.saturation)")
    p.add_argument("--frontier", action="store_true",
                   help="--engine vllm: also sweep rho (plugin), watermark x max_num_seqs (stock vLLM) "
                   "and per-class reservation x max_num_seqs (the plugin's gate)")
    p.add_argument("--replay-requests", type=int_arg(low=20, high=100_000), default=3000,
                   help="--engine vllm: requests per history replay of the knob and reservation rules (default 3000)")
    p.add_argument("--slo-capacity", action="store_true",
                   help="--engine vllm: instead of fixed loads, find each method's highest arrival rate meeting the "
                   "SLO for --slo-share of the requests (and 90%%), by bisection to 1%%")
    p.add_argument("--ttft-slo", type=float, default=2.0, help="--slo-capacity: time to first token target, s "
                   "(default 2)")
    p.add_argument("--tpot-slo", type=float, default=0.1, help="--slo-capacity: mean time per output token "
                   "target, s (default 0.1)")
    p.add_argument("--slo-share", type=float, default=0.99, help="--slo-capacity: share of requests that must meet "
                   "the SLO (default 0.99; 0.9 is reported too)")
    p.add_argument("--slo-methods", default=None, help="--slo-capacity: comma-separated methods (default all: "
                   "vllm-default, vllm-tuned, kvplan-knobs, kvplan-plugin+knobs, clairvoyant)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=_run)


def _run_engine(args: argparse.Namespace) -> int:
    from kvcore.evaluate.engine import evaluate_engine
    from kvcore.evaluate.engine_report import ROW_KEYS, main_rows, row_dict, write_report

    if args.observe != "raw":
        raise InputError("--observe", "trains the reservation policies; --engine vllm does not take it")
    rhos = _floats(args.rho, "--rho", RHO_MAX) if args.rho is not None else [10.0]
    if len(rhos) != 1:
        raise InputError("--rho", f"--engine vllm takes one rho, got {len(rhos)}")
    loads = _floats(args.load, "--load", MAX_LOAD)
    trace = load_trace(args.trace)
    show = not args.no_progress

    def wrap(items: Sequence[float]) -> Iterable[float]:
        return progress(items, "loads", stream=sys.stderr, enabled=show)

    ev = evaluate_engine(trace, loads=loads, rho=rhos[0], seed=args.seed, frontier=args.frontier, wrap=wrap,
                         replay_requests=args.replay_requests)
    written = write_report(ev, args.out) if args.out is not None else []
    rows = ev.rows if args.frontier else main_rows(ev)
    if args.json:
        obj: dict[str, object] = {"rows": [row_dict(r) for r in rows], "capacity_rps": ev.capacity_rps,
                                  "reserves": ev.reserves, "knobs": ev.knobs, "plugin": ev.plugin,
                                  "plugin_knobs": ev.plugin_knobs, "engine_rho": ev.engine_rho}
        if written:
            obj["files"] = [str(p) for p in written]
        print_json(obj, sys.stdout)
        return 0
    print(f"{ev.trace}: {ev.requests} requests replayed on {ev.replicas} replicas; load 1 = {ev.capacity_rps:.3g} "
          f"req/s; plan (DRO) reservations {', '.join(f'{k} {v:.0f}' for k, v in ev.reserves.items())} tokens")
    for load, note in ev.knobs.items():
        print(f"knobs at load {load}: {note}")
    for load, note in ev.plugin.items():
        print(f"plugin reservations at load {load}: {note}")
    for load, note in ev.plugin_knobs.items():
        print(f"plugin+knobs at load {load}: {note}")
    print(format_table(list(ROW_KEYS[1:]), [[row_dict(r)[k] for k in ROW_KEYS[1:]] for r in rows]))
    for p in written:
        print(f"wrote {p}")
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.slo_capacity:
        if args.engine != "vllm":
            raise InputError("--slo-capacity", "needs --engine vllm")
        from kvcore.cli.evaluate_slo import run_slo_capacity

        return run_slo_capacity(args)
    if args.engine == "vllm":
        return _run_engine(args)
    rhos = _floats(args.rho if args.rho is not None else _fmt(DEFAULT_RHOS), "--rho", RHO_MAX)
    shifts = _floats(args.shift, "--shift", MAX_RATIO)
    if args.lmax is not None and args.lmax > MAX_TOKENS and math.isfinite(args.lmax):
        raise InputError("--lmax", f"must be at most {MAX_TOKENS:g} tokens (kvcore.bounds.MAX_TOKENS), got "
                                   f"{args.lmax:g}")
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise InputError("--out", f"{args.out} exists and is not a directory")
    methods = [m.strip() for m in args.method.split(",") if m.strip()]
    if not methods:
        raise InputError("--method", "no policy given")
    trace = load_trace(args.trace)
    show = not args.no_progress

    def wrap(items: Sequence[tuple[float, str]], label: str) -> Iterable[tuple[float, str]]:
        return progress(items, label, stream=sys.stderr, enabled=show)

    ev = evaluate(trace, protocol=args.protocol, rhos=rhos, shifts=shifts, methods=methods, lmax=args.lmax,
                  simulate=args.simulate, seed=args.seed, wrap=wrap, observe=args.observe,
                  bucket_model=args.bucket_model)
    written = write_report(ev, args.out) if args.out is not None else []
    if args.json:
        obj = ev.model_dump(exclude={"rows"})
        obj["rows"] = [r.model_dump() for r in ev.rows]
        if written:
            obj["files"] = [str(p) for p in written]
        print_json(obj, sys.stdout)
        return 0
    seen = "" if ev.observe == "raw" else f", trained on {ev.observe} bucket counts ({ev.bucket_model})"
    print(f"{ev.trace}: {ev.protocol} protocol{seen}, {ev.requests} requests, L_max {ev.lmax:g} tokens, "
          f"{ev.plans} plan(s), {ev.scored_plans} of them serving requests"
          + (f", {ev.reused_windows} empty window(s) kept the previous plan" if ev.reused_windows else ""))
    headers = ["shift", "rho", "method", "cost", "reserve", "eps", "under"]
    if args.simulate:
        headers += ["p99_s", "slo_viol", "preempt", "waste_slot_s"]
    rows = []
    for r in sorted(ev.rows, key=lambda r: (r.shift, r.rho)):
        row: list[object] = [r.shift, r.rho, r.method, r.cost, r.reserve_mean, r.eps_mean, r.under_reserved]
        if args.simulate:
            row += [r.p99_latency_s, r.slo_violation_rate, r.preemptions, r.waste_token_slot_s]
        rows.append(row)
    print(format_table(headers, rows))
    for p in written:
        print(f"wrote {p}")
    return 0
