"""SLO capacity on the vendored traces: each method's highest arrival rate with 99% (and 90%) of requests within
TTFT <= 2 s and mean TPOT <= 0.1 s, through the vLLM engine model (``kvcore evaluate --engine vllm --slo-capacity``).

Each trace is cut to its first ``--requests`` requests (default 2,000: the first half is the rules' history, the
second half is replayed, so one bisection step is one replay of 1,000 requests; the whole trace would take hours
on a 2-core machine with vllm-tuned's 24-setting grid at every rate). Fleet: ``kvcore.evaluate.engine.EngineFleet``'s
defaults (2 replicas of 70B TP4 on A100-80GB, 8 GPUs) with ``--kv-tokens`` KV tokens per replica (default 100,000,
the evaluation's; a smaller figure makes memory bind at the SLO rate). Prints a Markdown table (or ``--json``) and
the wall time; ``--write-results FILE`` also puts the table between the markers ``<!-- slo:begin -->`` and
``<!-- slo:end -->`` of FILE (``docs/results.md``), keyed by ``--kv-tokens`` so runs on two fleets sit side by side,
with a PNG of each method's measured attainment against the rate in the ``img/`` folder beside FILE.

    python benchmarks/slo_capacity.py [--traces-dir DIR] [--requests 2000] [--kv-tokens 100000] [--only NAME ...]
                                      [--replay-requests 500] [--json] [--write-results docs/results.md]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from markers import marks, put  # noqa: E402

from kvcore import EngineFleet, SloEvaluation, Trace, evaluate_slo_capacity, load_trace  # noqa: E402

REPO = HERE.parent


def head(trace: Trace, n: int) -> Trace:
    """The first ``n`` requests of ``trace``."""
    arrival = None if trace.arrival_s is None else trace.arrival_s[:n]
    return Trace(arrival, trace.input_tokens[:n], trace.output_tokens[:n], source=trace.source)


def _f(v: float | int | None, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:.{digits}g}"


def markdown(evs: list[SloEvaluation]) -> str:
    lines = ["| trace | method | share | SLO rate (req/s) | ratio vs default | load | preemptions | recomputed | "
             "stalled | TTFT P99 (s) | TPOT P99 (s) | knobs / reason |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for ev in evs:
        for r in ev.rows:
            lines.append(f"| {ev.trace} | {r.method} | {r.share:g} | {_f(r.slo_rate_rps)} | "
                         f"{_f(r.ratio_vs_default)} | {_f(r.load, 2)} | {_f(r.preemptions)} | "
                         f"{_f(r.recomputed_tokens)} | {_f(r.stalled_frac, 2)} | {_f(r.ttft_p99_s)} | "
                         f"{_f(r.tpot_p99_s)} | {r.reason or r.knobs} |")
    return "\n".join(lines)


METHOD_STYLES = {"vllm-default": ("k", "s"), "vllm-tuned": ("tab:blue", "o"), "kvplan-knobs": ("tab:green", "D"),
                 "kvplan-plugin+knobs": ("tab:brown", "X"), "clairvoyant": ("tab:purple", "^")}


def plot(evs: list[SloEvaluation], path: Path) -> Path:
    """One panel per trace: every method's attainment (share of requests within the SLO) at each rate its searches
    measured, against the rate over the trace's saturation rate, with the 99% and 90% shares marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(4, len(evs))
    rows = -(-len(evs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax, ev in zip(axes.flat, evs):
        for method, points in ev.curves.items():
            color, marker = METHOD_STYLES.get(method, ("tab:gray", "."))
            ax.plot([r / ev.saturation_rps for r, _ in points], [a for _, a in points], "-", color=color,
                    marker=marker, ms=3.5, lw=0.9, alpha=0.8, label=method)
        for share in (0.99, 0.9):
            ax.axhline(share, color="0.6", lw=0.7, ls="--")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_ylim(max(0.0, min((a for c in ev.curves.values() for _, a in c), default=0.0) - 0.02), 1.005)
        ax.set_title(ev.trace.removesuffix(".csv"), fontsize=9)
        ax.set_xlabel("rate / saturation rate", fontsize=8)
        ax.set_ylabel("share within SLO", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(evs):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels) if cols >= 3 else 2, fontsize=8)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_results(path: Path, kv_tokens: int, text: str) -> None:
    """Replace (or add before ``<!-- engine:begin -->``, else at the end) this fleet's block in ``path``."""
    begin, end = marks("slo", f"kv={kv_tokens}")
    put(path, f"{begin}\n{text}\n{end}", begin, end, before=marks("engine")[0])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--traces-dir", type=Path, default=REPO / "kvcore" / "data" / "traces")
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--kv-tokens", type=int, default=100_000)
    p.add_argument("--replay-requests", type=int, default=500)
    p.add_argument("--only", nargs="*", default=None, help="trace file names (default: every *.csv)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--write-results", type=Path, default=None, help="Markdown file to put the table in")
    args = p.parse_args(argv)
    files = sorted(args.traces_dir.glob("*.csv"))
    if args.only:
        files = [f for f in files if f.name in set(args.only)]
    fleet = EngineFleet(kv_capacity_tokens=args.kv_tokens)
    start = time.monotonic()
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    evs = []
    for f in files:
        t0 = time.monotonic()
        evs.append(evaluate_slo_capacity(head(load_trace(f), args.requests), fleet=fleet,
                                         replay_requests=args.replay_requests))
        print(f"{f.name}: {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    wall = time.monotonic() - start
    if args.json:
        print(json.dumps({"started": stamp, "wall_s": wall, "machine": platform.machine(),
                          "evaluations": [e.model_dump() for e in evs]}))
    notes = "\n".join(f"- {ev.trace}: {ev.requests} replayed, {ev.arrivals}; saturation (load 1) "
                      f"{ev.saturation_rps:.3g} req/s" for ev in evs)
    footer = (f"{len(evs)} traces, first {args.requests:,} requests each, {args.kv_tokens:,} KV tokens per replica, "
              f"rules on {args.replay_requests} requests per history replay: {wall:.0f} s on {platform.machine()}, "
              f"Python {platform.python_version()}, started {stamp}.")
    text = f"{markdown(evs)}\n\n{notes}\n\n{footer}"
    if not args.json:
        print(text)
    if args.write_results is not None:
        png = plot(evs, args.write_results.parent / "img" / f"slo-attainment-kv{args.kv_tokens}.png")
        write_results(args.write_results, args.kv_tokens, f"Generated by `python benchmarks/slo_capacity.py "
                      f"--requests {args.requests} --kv-tokens {args.kv_tokens} "
                      f"--replay-requests {args.replay_requests} "
                      f"--write-results docs/results.md`; do not edit by hand.\n\n{text}\n\n"
                      f"![attainment against rate, {args.kv_tokens:,} KV tokens per replica](img/{png.name})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
