"""``kvplan-dev twin [--phase-s S] [--rate-scale F] [--json]``: run :mod:`kvplan_dev.twin.scenario` once and print
its report (a table, or with ``--json`` one JSON line with ``before``, ``after``, ``examples``, ``calibration``,
``cycles``). Bad options are one line and exit status 2, before anything starts."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kvcore.cli.args import float_arg

ROWS = (("requests", "requests"), ("completed", "completed"), ("ttft_p50_s", "TTFT P50 s"),
        ("ttft_p99_s", "TTFT P99 s"), ("e2e_p50_s", "e2e P50 s"), ("e2e_p99_s", "e2e P99 s"),
        ("stalled_share", "stalled share"), ("within_slo", "within SLO"), ("goodput_per_gpu_s", "goodput /GPU/s"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--phase-s", type=float_arg(low=10.0, high=3600.0, unit=" s"), default=90.0,
                        help="trace seconds replayed per phase (default 90)")
    parser.add_argument("--rate-scale", type=float_arg(low=0.0, high=1.0, low_open=True), default=0.2,
                        help="share of the trace's requests sent (default 0.2: two cores stream about that)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON line")


def table(report: dict[str, Any]) -> str:
    """Before and after side by side, then the examples and the cycles."""
    def cell(value: Any) -> str:
        return "-" if value is None else (f"{value:.3g}" if isinstance(value, float) else str(value))

    if report.get("error"):
        lines0 = [f"twin: {report['error']}"]
    else:
        lines0 = []
    lines = lines0 + [f"{'':16} {'before':>10} {'after':>10}"]
    for key, label in ROWS:
        lines.append(f"{label:16} {cell(report['before'].get(key)):>10} {cell(report['after'].get(key)):>10}")
    for phase in ("before", "after"):
        v = report[phase].get("vllm") or {}
        if not v:
            continue
        lines.append(f"{phase}: vLLM counted {cell(v.get('preemptions'))} preemptions and "
                     f"{cell(v.get('generation_tokens'))} tokens; the replayer received "
                     f"{cell(report[phase].get('tokens_received'))}")
    for name, ex in report["examples"].items():
        lines.append(f"example {name}: ready={ex['ready']} ({ex['reason']}, {ex['seconds']} s)")
    lines.append(f"plan: {report.get('plan')}; cycles: {report['cycles']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from kvplan_dev.twin.scenario import ScenarioConfig, run_scenario
    from kvplan_dev.vllm_env import ensure_vllm_env
    from kvplan_dev.vllm_overlay import make_overlay
    import tempfile
    from pathlib import Path

    def progress(message: str) -> None:
        print(f"[twin] {message}", file=sys.stderr, flush=True)

    base = ensure_vllm_env(progress=progress)
    repo = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory(prefix="kvplan-twin-overlay-") as tmp:
        python = make_overlay(Path(base), Path(tmp) / "overlay", repo)
        report = run_scenario(python, ScenarioConfig(phase_s=args.phase_s, rate_scale=args.rate_scale), progress)
    print(json.dumps(report, default=str) if args.json else table(report))
    return 0 if report["examples"] and all(ex["ready"] for ex in report["examples"].values()) \
        and not report.get("error") else 1
