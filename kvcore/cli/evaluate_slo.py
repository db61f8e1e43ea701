"""``kvcore evaluate --engine vllm --slo-capacity``: each method's SLO capacity, as a table or ``{"rows": [...]}``.

Every row has ``trace, method, share, slo_rate_rps, ratio_vs_default, preemptions, recomputed_tokens, stalled_frac,
stall_p99_s, ttft_p99_s, tpot_p99_s, gpus`` (then ``load, attainment, goodput_rps, knobs, evaluations, reason``);
:mod:`kvcore.evaluate.slo_capacity` defines them. ``--json`` also gives ``curves``: per method,
the ``[rate, attainment]`` pairs its searches measured, to plot attainment against rate. A progress bar over the
methods goes to stderr. Exit status 2 on bad input (targets no rate can meet name ``--ttft-slo`` or ``--tpot-slo``;
a trace too short names the minimum).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable, Sequence

from kvcore.cli.output import format_table, print_json, progress
from kvcore.errors import InputError
from kvcore.history.traces import load_trace

ROW_KEYS = ("trace", "method", "share", "slo_rate_rps", "ratio_vs_default", "preemptions", "recomputed_tokens",
            "stalled_frac", "stall_p99_s", "ttft_p99_s", "tpot_p99_s", "gpus", "load", "attainment", "goodput_rps",
            "knobs", "evaluations", "reason")
TABLE_KEYS = ("method", "share", "slo_rate_rps", "ratio_vs_default", "load", "preemptions", "recomputed_tokens",
              "stalled_frac", "ttft_p99_s", "tpot_p99_s", "gpus", "reason")


def _seconds(value: float, flag: str) -> float:
    if not (math.isfinite(value) and value > 0):
        raise InputError(flag, f"must be a finite number of seconds > 0, got {value}")
    return float(value)


def run_slo_capacity(args: argparse.Namespace) -> int:
    from kvcore.evaluate.engine import EngineFleet
    from kvcore.evaluate.slo_capacity import evaluate_slo_capacity
    from kvcore.evaluate.slo_methods import SLO_METHODS

    for flag, given in (("--frontier", args.frontier), ("--out", args.out is not None),
                        ("--simulate", args.simulate), ("--observe", args.observe != "raw")):
        if given:
            raise InputError(flag, "does not apply with --slo-capacity")
    ttft = _seconds(args.ttft_slo, "--ttft-slo")
    tpot = _seconds(args.tpot_slo, "--tpot-slo")
    share = float(args.slo_share)
    if not (0.0 < share <= 1.0):
        raise InputError("--slo-share", f"must be in (0, 1], got {args.slo_share}")
    shares = (share,) if share == 0.9 else (share, 0.9)
    methods = SLO_METHODS if args.slo_methods is None else tuple(
        m.strip() for m in args.slo_methods.split(",") if m.strip())
    if not methods:
        raise InputError("--slo-methods", "no method given")
    rho = 10.0
    if args.rho is not None:
        try:
            rho = float(args.rho)
        except ValueError:
            raise InputError("--rho", f"--slo-capacity takes one rho, got {args.rho!r}") from None
    trace = load_trace(args.trace)
    show = not args.no_progress

    def wrap(items: Sequence[str]) -> Iterable[str]:
        return progress(items, "methods", stream=sys.stderr, enabled=show)

    ev = evaluate_slo_capacity(trace, fleet=EngineFleet(ttft_slo_s=ttft, tpot_slo_s=tpot), shares=shares,
                               methods=methods, rho=rho, seed=args.seed, replay_requests=args.replay_requests,
                               wrap=wrap)
    rows = [r.model_dump() for r in ev.rows]
    if args.json:
        print_json({"rows": [{k: r[k] for k in ROW_KEYS} for r in rows], "trace": ev.trace, "requests": ev.requests,
                    "gpus": ev.gpus, "arrivals": ev.arrivals, "saturation_rps": ev.saturation_rps,
                    "ttft_slo_s": ev.ttft_slo_s, "tpot_slo_s": ev.tpot_slo_s,
                    "curves": {m: [list(p) for p in c] for m, c in ev.curves.items()}}, sys.stdout)
        return 0
    print(f"{ev.trace}: {ev.requests} requests replayed on {ev.gpus} GPUs ({ev.arrivals}); SLO TTFT <= "
          f"{ev.ttft_slo_s:g} s and mean TPOT <= {ev.tpot_slo_s:g} s; saturation {ev.saturation_rps:.3g} req/s")
    print(format_table(list(TABLE_KEYS), [[r[k] for k in TABLE_KEYS] for r in rows]))
    return 0
