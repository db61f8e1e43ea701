"""Regenerate the "vLLM in the loop" section of ``docs/results.md`` and its plots: ``kvcore evaluate --engine vllm
--frontier`` on every vendored trace at loads 0.7 and 0.9, with the issue-13 targets checked on the numbers, on the
traces the reservation rule was designed on and on the held-out ones; plus two experiments: classes that give an
SLO priced by the engine model or by seed eq. 8, and per-class reservations against one global watermark.

The section sits between the markers ``<!-- engine:begin -->`` and ``<!-- engine:end -->`` (appended when absent;
``benchmarks/paper_tables.py`` keeps it when it rewrites the rest). Plots: ``docs/img/engine-<trace>.png``. Every
measurement goes to ``docs/img/engine-results.json`` (rows also to ``docs/img/engine-rows.csv``); ``--render``
rewrites the section from that file without replaying anything.

    python benchmarks/engine_results.py [--traces-dir DIR] [--rho 10] [--out docs] [--only NAME ...] [--render]
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from engine_tables import BEGIN, END, REGIMES, section  # noqa: E402
from markers import put  # noqa: E402

from kvcore.evaluate.engine import (  # noqa: E402
    CLASSES,
    FRONTIER_WATERMARKS,
    EngineEvaluation,
    EngineFleet,
    EngineRow,
    EngineSetup,
    evaluate_engine,
    measure_row,
    run_variant,
)
from kvcore.evaluate.engine_report import plot_frontier  # noqa: E402
from kvcore import engine_rho  # noqa: E402
from kvcore import EngineConfig  # noqa: E402
from kvcore import SloSpec, cost_ratio  # noqa: E402
from kvcore import load_trace  # noqa: E402

REPO = HERE.parent
SLO_EXAMPLE = SloSpec(mu=3.0, sigma=0.5, lam=100.0)
"""The SLO of examples/instance-70b.yaml: seed eq. 8 gives rho = 16.4."""
MIXED_RHO = (1.0, 100.0)
"""Per-class experiment: short prompts cheap to preempt (rho 1), long prompts protected (rho 100)."""


def slo_rows(setup: EngineSetup, name: str, load: float, seed: int) -> list[EngineRow]:
    """A class that gives an SLO, both classes alike: priced by the engine (rule with harm at its price, plan's
    reservations at rho_e) or by seed eq. 8 (rho 16.4 for the rule and the plan)."""
    wl = setup.workload(load, seed)
    gate = EngineConfig(admission="gate")
    rho_e = engine_rho(setup.replays(load, seed))
    rho_8 = cost_ratio(SLO_EXAMPLE)
    variants: list[tuple[str, dict[str, float]]] = [
        ("slo-engine", dict(setup.rule(load, None, seed).reserves)),
        ("slo-eq8", dict(setup.rule(load, rho_8, seed).reserves)),
        ("slo-engine-dro", dict(zip(CLASSES, setup.reserves([rho_e[c] for c in CLASSES])))),
        ("slo-eq8-dro", dict(zip(CLASSES, setup.reserves(rho_8))))]
    rows = []
    for method, ys in variants:
        y = [float(ys[c]) for c in CLASSES]
        policy, res = run_variant(setup, wl, y, rho_8, gate, seed)
        rows.append(measure_row(setup, name, load, method, rho_8, wl, policy, res, True,
                                f"gate y={y[0]:.0f},{y[1]:.0f}"))
    return rows


def mixed_rows(setup: EngineSetup, load: float, seed: int) -> list[dict[str, Any]]:
    """Per-class reservations (short rho 1, long rho 100) against one global watermark, fcfs and long-first
    priorities: per-class stalled share and recompute, overall P99 e2e and goodput."""
    wl = setup.workload(load, seed)
    base = EngineConfig()
    rule = setup.rule(load, MIXED_RHO, seed)
    entries: list[tuple[str, EngineConfig, list[float]]] = [
        (f"plugin y={rule.reserves['short']},{rule.reserves['long']}", base.model_copy(update={"admission": "gate"}),
         [float(rule.reserves[c]) for c in CLASSES])]
    for w in FRONTIER_WATERMARKS:
        entries.append((f"stock w={w:g}", base.model_copy(update={"watermark": w}), [0.0, 0.0]))
        entries.append((f"stock w={w:g} priority long-first", base.model_copy(update={
            "watermark": w, "policy": "priority", "class_priority": (1, 0)}), [0.0, 0.0]))
    out = []
    for label, engine, ys in entries:
        policy, res = run_variant(setup, wl, ys, MIXED_RHO[1], engine, seed)
        row = measure_row(setup, "", load, label, MIXED_RHO[1], wl, policy, res, engine.admission == "gate", label)
        per = {CLASSES[c.index]: c for c in res.classes}
        out.append({"setting": label, "e2e_p99_s": row.e2e_p99_s, "goodput_rps": row.goodput_rps,
                    **{f"{c}_stalled": per[c].stalled_frac or 0.0 for c in CLASSES},
                    **{f"{c}_recomputed": per[c].recomputed_tokens for c in CLASSES}})
    return out


def render(data: dict[str, Any], out: Path) -> Path:
    evs = [EngineEvaluation.model_validate(e) for e in data["evaluations"]]
    slo = {k: [EngineRow.model_validate(r) for r in v] for k, v in data["slo"].items()}
    text = section(evs, tuple(data["loads"]), data["rho"], data["meta"], EngineFleet.model_validate(data["fleet"]),
                   slo, data["mixed"], REGIMES)
    results = out / "results.md"
    put(results, text, BEGIN, END)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--traces-dir", type=Path, default=REPO / "kvcore" / "data" / "traces")
    parser.add_argument("--rho", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=REPO / "docs")
    parser.add_argument("--only", nargs="*", default=None, help="trace file names to run (default: all)")
    parser.add_argument("--render", action="store_true", help="rewrite the section from the saved measurements")
    args = parser.parse_args(argv)
    img = args.out / "img"
    saved = img / "engine-results.json"
    if args.render:
        print(f"wrote {render(json.loads(saved.read_text(encoding='utf-8')), args.out)}", file=sys.stderr)
        return 0
    started = time.perf_counter()
    loads = (0.7, 0.9)
    fleet = EngineFleet()
    files = sorted(args.traces_dir.glob("*.csv"))
    if args.only:
        files = [f for f in files if f.name in args.only]
    img.mkdir(parents=True, exist_ok=True)
    evs: list[EngineEvaluation] = []
    slo: dict[str, list[dict[str, Any]]] = {}
    mixed: dict[str, list[dict[str, Any]]] = {}
    for f in files:
        t0 = time.perf_counter()
        trace = load_trace(f)
        setup = EngineSetup(trace, fleet)
        ev = evaluate_engine(trace, loads=loads, rho=args.rho, fleet=fleet, frontier=True, setup=setup)
        plot_frontier(ev, img / f"engine-{f.stem}.png")
        evs.append(ev)
        slo[f.stem] = [r.model_dump() for load in loads for r in slo_rows(setup, ev.trace, load, 0)]
        mixed[f.stem] = mixed_rows(setup, max(loads), 0)
        print(f"{f.name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    with (img / "engine-rows.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(EngineRow.model_fields))
        w.writeheader()
        for ev in evs:
            for r in ev.rows:
                w.writerow({k: ("" if v is None else v) for k, v in r.model_dump().items()})
    meta = (f"{time.perf_counter() - started:.0f} s on {platform.machine()}, Python {platform.python_version()}, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    data = {"meta": meta, "loads": list(loads), "rho": args.rho, "fleet": fleet.model_dump(),
            "evaluations": [ev.model_dump() for ev in evs], "slo": slo, "mixed": mixed}
    saved.write_text(json.dumps(data), encoding="utf-8")
    results = render(data, args.out)
    print(f"wrote {results}, {saved} and {len(evs)} plots in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
