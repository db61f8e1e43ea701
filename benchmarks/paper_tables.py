"""Regenerate ``docs/results.md`` and ``docs/img/*.png``: the paper's tables, reproduced on the shared traces.

    python benchmarks/paper_tables.py [--traces DIR] [--out docs] [--seeds 3] [--quick]

1. Table II/IV style: cost across rho on every shared trace, every policy (split protocol, no shift).
2. P99 latency and SLO violation at rho = 10 through the vLLM engine model with kvplan's gate
   (:mod:`kvcore.evaluate.simulate`, on the one evaluation fleet, :class:`kvcore.EngineFleet`).
3. Issue 5's gm table: SAA, DRO eps = 0.15 E (paper), DRO eps = 0.02 E, P95, P99 and the new default, split and
   rolling x shift 1.0 / 1.5 / 2.5, on the traces with timestamps and, separately, on the one without.
4. Table V style ablation of the joint planner (:mod:`ablation` beside this file) under a 2.5x shift.
6. Issue 14: what histogram buckets cost the default policy, per layout, within-bucket model and radius binning
   term (:mod:`binning` beside this file). Section 5 is ``benchmarks/engine_results.py``'s, kept as it is.

Everything is measured in this one run; ratios compare numbers from the same run. ``--quick`` uses fewer rho and
shift values (for a smoke test), never for the committed results.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from ablation import ABLATION_NOTES, run_ablation  # noqa: E402
from binning import markdown as binning_markdown  # noqa: E402
from binning import run as run_binning  # noqa: E402
from markers import find, marks  # noqa: E402
from results_template import ISSUE5_REPORTED, KEPT, PAPER_TABLE_IV, RESULTS_TEMPLATE  # noqa: E402

from kvcore import (DEFAULT_METHODS, Cell, DEFAULT_RHOS, DEFAULT_SHIFTS, Evaluation, EngineFleet,
                    run_evaluation as evaluate, gm_markdown, ratio_cells)
from kvcore import split_episodes  # noqa: E402
from kvcore import Scenario, ShiftBlindBound, shift_blind_bound  # noqa: E402
from kvcore import DEFAULT_RADIUS  # noqa: E402
from kvcore import load_trace  # noqa: E402
from kvcore.evaluate.simulate import SIMULATE_LOAD  # noqa: E402

Cells = dict[tuple[str, float], dict[str, Cell]]
GM_TABLE = ("saa", "dro-paper", "dro-0.02", "p95", "p99", "default")
GM_LABELS = {
    "saa": "SAA (critical fractile)", "dro-paper": "DRO, eps = 0.15 E[xi] (paper)", "dro-0.02": "DRO, eps = 0.02 E[xi]",
    "p95": "P95", "p99": "P99", "default": "**default: DRO, drift radius (new)**",
}



def _run_all(paths: Sequence[Path], rhos: Sequence[float], shifts: Sequence[float]) -> list[Evaluation]:
    evs = []
    for p in paths:
        tr = load_trace(p)
        for proto in ("split", "rolling"):
            if proto == "rolling" and not tr.has_timestamps:
                continue
            t0 = time.perf_counter()
            evs.append(evaluate(tr, protocol=proto, rhos=rhos, shifts=shifts, methods=DEFAULT_METHODS))
            print(f"  {p.name} {proto}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return evs


Keyed = tuple[list[Scenario], list[tuple[str, float]]]


def _oracle_scenarios(paths: Sequence[Path], evs: list[Evaluation], shifts: Sequence[float]) -> dict[bool, Keyed]:
    """Split protocol, per timestamps group: one :class:`Scenario` per (trace, rho) with every shift level's test
    outputs and "best" = the cheapest of the issue's five policies (a yardstick that does not depend on our
    default), and the scenarios' (trace, rho) in the same order. Traces are loaded once here."""
    best = {(r.trace, r.rho, r.shift): min(x.cost for x in ev.rows if x.rho == r.rho and x.shift == r.shift
                                            and x.method in GM_TABLE[:-1])
            for ev in evs if ev.protocol == "split" for r in ev.rows}
    out: dict[bool, Keyed] = {}
    for p in paths:
        tr = load_trace(p)
        lmax = float(tr.output_tokens.max())
        tests = tuple(split_episodes(tr, shift=s, lmax=lmax)[0].test_outputs for s in shifts)
        scenarios, keys = out.setdefault(tr.has_timestamps, ([], []))
        for rho in sorted({r for (t, r, _s) in best if t == p.name}):
            scenarios.append(Scenario(tests=tests, best=tuple(best[(p.name, rho, s)] for s in shifts), rho=rho,
                                      lmax=lmax))
            keys.append((p.name, rho))
    return out


def _oracle_bound(scenarios: list[Scenario], per_level: Sequence[float] | None = None) -> ShiftBlindBound:
    """Bounds on the best worst-level gm any shift-blind rule could reach, *with the test data*: one reserve y in
    [0, L_max] per (trace, rho) serves every shift level (the training half is the same).
    :func:`kvcore.evaluate.oracle.shift_blind_bound` gives a certified lower bound (weak Lagrangian duality, exact
    per-scenario minimisation on the kink set) and the worst level of an achieved choice (upper bound).
    ``per_level`` (one gm per shift) divides each level's gm by that value, e.g. the paper's radius's, so the bound
    is on ``max over levels of gm / paper's gm``."""
    if per_level is not None:
        scenarios = [replace(sc, best=tuple(b * k for b, k in zip(sc.best, per_level))) for sc in scenarios]
    return shift_blind_bound(scenarios)


def _hindsight_reserves(evs: list[Evaluation], bound: ShiftBlindBound, keys: list[tuple[str, float]]) -> str:
    """The achieving choice's reserves over SAA's (split), as a range at rho <= 10 and at rho >= 20."""
    saa = {(ev.trace, r.rho): r.reserve_mean for ev in evs if ev.protocol == "split" for r in ev.rows
           if r.method == "saa" and r.shift == 1.0}
    ratios = [(rho, y / saa[(t, rho)]) for (t, rho), y in zip(keys, bound.ys_upper) if saa.get((t, rho), 0) > 0]
    low = sorted(v for rho, v in ratios if rho <= 10)
    high = sorted(v for rho, v in ratios if rho >= 20)

    def span(v: list[float]) -> str:
        return f"{v[0]:.2f}-{v[-1]:.2f}, median {v[len(v) // 2]:.2f}" if v else "-"

    return f"rho <= 10: {span(low)}; rho >= 20: {span(high)}"


def _cost_tables(evs: list[Evaluation]) -> str:
    out = []
    for ev in evs:
        if ev.protocol != "split":
            continue
        rhos = sorted({r.rho for r in ev.rows})
        cell = {(r.rho, r.method): r.cost for r in ev.rows if r.shift == 1.0}
        out.append(f"**{ev.trace}** ({ev.requests} requests, L_max = {ev.lmax:g}): mean cost per request, token "
                   "slots (best per column in bold).\n")
        out.append("| policy | " + " | ".join(f"rho={r:g}" for r in rhos) + " | max / min over rho |")
        out.append("|---|" + "---|" * (len(rhos) + 1))
        best = {r: min(cell[(r, m)] for m in DEFAULT_METHODS) for r in rhos}
        for m in DEFAULT_METHODS:
            vals = [cell[(r, m)] for r in rhos]
            txt = [f"**{v:.4g}**" if v == best[r] else f"{v:.4g}" for v, r in zip(vals, rhos)]
            out.append(f"| {m} | " + " | ".join(txt) + f" | {max(vals) / min(vals):.1f}x |")
        out.append("")
    return "\n".join(out)


def _per_rho_gm(evs: list[Evaluation]) -> dict[str, dict[float, float]]:
    """In-distribution (split, shift 1.0): policy -> rho -> gm over traces of cost / best of all policies."""
    logs: dict[tuple[str, float], list[float]] = {}
    for ev in evs:
        if ev.protocol != "split":
            continue
        for rho in sorted({r.rho for r in ev.rows}):
            rows = [r for r in ev.rows if r.rho == rho and r.shift == 1.0]
            best = min(r.cost for r in rows)
            for r in rows:
                logs.setdefault((r.method, rho), []).append(math.log(r.cost / best))
    out: dict[str, dict[float, float]] = {}
    for (m, rho), v in logs.items():
        out.setdefault(m, {})[rho] = math.exp(sum(v) / len(v))
    return out


def _disagreements(evs: list[Evaluation]) -> str:
    """Sentences, computed from this run, on where the in-distribution data agrees or disagrees with the paper."""
    g = _per_rho_gm(evs)
    worst = {m: max(v.items(), key=lambda kv: kv[1]) for m, v in g.items()}
    uniform = min(worst, key=lambda m: worst[m][1])
    paper_hi = [f"{r:g} ({v:.2f})" for r, v in sorted(g["dro-paper"].items()) if v > 1.2]
    default_vs_saa = [r for r in sorted(g["default"]) if g["default"][r] > g["saa"][r] * 1.05]
    lines = [
        f"- **No policy is best at every rho here**, while the paper reports its DRO best or tied at every rho. The "
        f"most uniform policy is `{uniform}` (worst per-rho gm {worst[uniform][1]:.2f}, at rho = "
        f"{worst[uniform][0]:g}); fixed quantiles and mean/max are each right at one end only (P90 worst "
        f"{worst['p90'][1]:.2f} at rho = {worst['p90'][0]:g}, P99 {worst['p99'][1]:.2f} at rho = "
        f"{worst['p99'][0]:g}, mean {worst['mean'][1]:.2f}, max {worst['max'][1]:.2f}), which agrees with the "
        "paper's argument for the critical fractile.",
        f"- **The paper's eps = 0.15 E[xi] over-reserves in distribution at high rho**: per-rho gm above 1.2 at rho "
        f"= {', '.join(paper_hi) or 'none'}. Its radius crosses the "
        "threshold (falling like 1/rho) where 1-Wasserstein DRO on [0, L_max] jumps from SAA's fractile to a "
        "reserve near L_max. The paper's Table IV shows its DRO at rho = 100 equal to Max (4,807); ours is too "
        "close to Max there as well, but on our traces that is costly, not best.",
    ]
    if default_vs_saa:
        same = [r for r in default_vs_saa if abs(g["default"][r] - g["dro-paper"][r]) <= 0.01 * g["dro-paper"][r]]
        lines.append(
            f"- **Our default pays for robustness in distribution under the split protocol** at rho = "
            f"{', '.join(f'{r:g}' for r in default_vs_saa)} (per-rho gm more than 5% above SAA's), "
            + (f"the same as the paper's radius at rho = {', '.join(f'{r:g}' for r in same)}" if same else
               "unlike the paper's radius")
            + ". That is the horizon term: a split plan is used, unrevised, for as long as the history it was "
            "fitted on (horizon ratio 1), where the rule deliberately carries the paper's 0.15 E[xi]; it buys the "
            "split protocol's shifted levels (section 1). Re-planned every quarter of its window (rolling), the "
            "default drops the term to 1/16 of that and is within the targets at every shift level (section 1).")
    return "\n".join(lines)


def _regret_table(evs: list[Evaluation]) -> str:
    """In-distribution (split, shift 1.0): gm over traces of cost / best-of-all-policies, per rho."""
    rhos = sorted({r.rho for ev in evs for r in ev.rows})
    logs: dict[tuple[str, float], list[float]] = {}
    for ev in evs:
        if ev.protocol != "split":
            continue
        for rho in rhos:
            rows = [r for r in ev.rows if r.rho == rho and r.shift == 1.0]
            best = min(r.cost for r in rows)
            for r in rows:
                logs.setdefault((r.method, rho), []).append(math.log(r.cost / best))
    lines = ["| policy | " + " | ".join(f"rho={r:g}" for r in rhos) + " | worst |",
             "|---|" + "---|" * (len(rhos) + 1)]
    for m in DEFAULT_METHODS:
        g = [math.exp(sum(logs[(m, r)]) / len(logs[(m, r)])) for r in rhos]
        lines.append(f"| {m} | " + " | ".join(f"{v:.2f}" for v in g) + f" | {max(g):.2f} |")
    return "\n".join(lines)


def _sim_table(paths: Sequence[Path], fleet: EngineFleet) -> tuple[str, list[Evaluation]]:
    evs = []
    for p in paths:
        t0 = time.perf_counter()
        evs.append(evaluate(load_trace(p), protocol="split", rhos=[10.0], shifts=[1.0], methods=DEFAULT_METHODS,
                            simulate=True, fleet=fleet))
        print(f"  simulate {p.name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    lines = ["| policy | " + " | ".join(f"{Path(ev.trace).stem}" for ev in evs) + " |",
             "|---|" + "---|" * len(evs)]
    for m in DEFAULT_METHODS:
        cells = []
        for ev in evs:
            r = next(r for r in ev.rows if r.method == m)
            viol = "-" if r.slo_violation_rate is None else f"{100 * r.slo_violation_rate:.1f}%"
            p99 = "-" if r.p99_latency_s is None else f"{r.p99_latency_s:.1f}"
            cells.append(f"{r.cost:.4g} / {p99} / {viol} / {r.preemptions}")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines), evs


def _targets(cells_ts: Cells, cells_nts: Cells, shifts: Sequence[float]) -> str:
    out = []
    for label, cells in (("traces with timestamps", cells_ts), ("trace without timestamps", cells_nts)):
        roll = [(s, cells[("rolling", s)]["default"]) for s in shifts if "default" in cells.get(("rolling", s), {})]
        if roll:
            ok_gm = all(c.gm <= 1.03 for _, c in roll)
            ok_w = all(c.worst <= 1.5 for _, c in roll)
            out.append(f"- Rolling, {label}: gm <= 1.03 at every shift: **{'met' if ok_gm else 'not met'}** ("
                       + ", ".join(f"{s:g}: {c.gm:.3f}" for s, c in roll) + "); no scenario worse than 1.5x best: "
                       f"**{'met' if ok_w else 'not met'}** (worst "
                       + ", ".join(f"{s:g}: {c.worst:.2f} at {c.worst_at}" for s, c in roll) + ").")
        sp = [(s, cells[("split", s)]["default"], cells[("split", s)]["dro-paper"]) for s in shifts
              if ("split", s) in cells]
        if sp:
            each = all(d.gm <= p.gm for _, d, p in sp)
            worst = max(d.gm for _, d, _p in sp)
            out.append(f"- Split, {label}: no worse than the paper's eps at each shift: **{'met' if each else 'not met'}** ("
                       + ", ".join(f"{s:g}: {d.gm:.3f} vs {p.gm:.3f}" for s, d, p in sp) + "); worst level <= 1.15: "
                       f"**{'met' if worst <= 1.15 else 'not met'}** ({worst:.3f}).")
    return "\n".join(out)


def _plots(evs: list[Evaluation], cells_ts: Cells, img: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img.mkdir(parents=True, exist_ok=True)
    split = [ev for ev in evs if ev.protocol == "split"]
    cols = 4
    rows_n = math.ceil(len(split) / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.0 * cols, 3.3 * rows_n), squeeze=False)
    for ax, ev in zip(axes.flat, split):
        rhos = sorted({r.rho for r in ev.rows})
        for m in DEFAULT_METHODS:
            ys = [next(r.cost for r in ev.rows if r.rho == x and r.shift == 1.0 and r.method == m) for x in rhos]
            ax.plot(rhos, ys, marker="o", ms=3, lw=2.2 if m == "default" else 1.0, label=m)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(Path(ev.trace).stem, fontsize=9)
        ax.set_xlabel("rho")
    for ax in list(axes.flat)[len(split):]:
        ax.axis("off")
    axes[0][0].set_ylabel("cost / request (token slots)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower right", fontsize=8, ncol=2)
    fig.suptitle("Cost across rho, split protocol, no shift (Table II/IV style)")
    fig.tight_layout()
    p1 = img / "cost_vs_rho.png"
    fig.savefig(p1, dpi=100)
    plt.close(fig)
    keys = sorted(cells_ts, key=lambda k: (0 if k[0] == "split" else 1, k[1]))
    fig, ax = plt.subplots(figsize=(10, 3.8))
    width = 0.8 / len(GM_TABLE)
    for i, m in enumerate(GM_TABLE):
        vals = [cells_ts[k][m].gm for k in keys]
        ax.bar([j + i * width for j in range(len(keys))], vals, width, label=m)
    ax.axhline(1.0, color="k", lw=0.6)
    ax.axhline(1.03, color="g", lw=0.6, ls="--")
    ax.axhline(1.15, color="r", lw=0.6, ls="--")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(keys))], [f"{p} {s:g}x" for p, s in keys])
    ax.set_ylabel("gm of cost / best")
    ax.set_yscale("log")
    ax.legend(fontsize=8, ncol=3)
    ax.set_title("Issue 5: gm over (trace, rho), traces with timestamps (dashed: 1.03 and 1.15 targets)")
    fig.tight_layout()
    p2 = img / "gm_policies.png"
    fig.savefig(p2, dpi=100)
    plt.close(fig)
    return [p1, p2]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--traces", type=Path, default=REPO / "kvcore" / "data" / "traces")
    ap.add_argument("--out", type=Path, default=REPO / "docs")
    ap.add_argument("--seeds", type=int, default=3, help="simulator seeds for the ablation (mean +- sd)")
    ap.add_argument("--quick", action="store_true", help="smoke test: rho 2,100 and shifts 1,2.5")
    args = ap.parse_args(argv)
    paths = sorted(args.traces.glob("*.csv"))
    if not paths:
        print(f"no traces in {args.traces}", file=sys.stderr)
        return 2
    rhos = (2.0, 100.0) if args.quick else DEFAULT_RHOS
    shifts = (1.0, 2.5) if args.quick else DEFAULT_SHIFTS
    started = time.perf_counter()
    print("evaluating ...", file=sys.stderr)
    evs = _run_all(paths, rhos, shifts)
    ts = [e for e in evs if e.timestamps]
    nts = [e for e in evs if not e.timestamps]
    cells_ts = ratio_cells(ts, GM_TABLE)
    cells_nts = ratio_cells(nts, GM_TABLE)
    cells_ts5 = ratio_cells(ts, GM_TABLE, reference=GM_TABLE[:-1])
    cells_nts5 = ratio_cells(nts, GM_TABLE, reference=GM_TABLE[:-1])
    fleet = EngineFleet()
    print("simulating rho = 10 ...", file=sys.stderr)
    sim_md, _ = _sim_table(paths, fleet)
    print("ablation ...", file=sys.stderr)
    ablation_md = run_ablation(args.traces, seeds=args.seeds)
    print("binning ...", file=sys.stderr)
    binning_md = binning_markdown(run_binning(paths, rhos=rhos, shifts=shifts), paths, rhos=rhos, shifts=shifts)
    imgs = _plots(evs, cells_ts, args.out / "img")
    print("oracle bound ...", file=sys.stderr)
    oracle_sc = _oracle_scenarios(paths, evs, shifts)
    bound = {k: _oracle_bound(sc) for k, (sc, _keys) in oracle_sc.items()}
    oracle = "\n".join(
        f"- {'traces with timestamps' if k else 'trace without timestamps'}: certified lower bound "
        f"**{b.lower:.3f}**; achieved {b.upper:.3f} (levels " + " / ".join(f"{v:.3f}" for v in b.levels_at_upper)
        + f" at split {' / '.join(f'{s:g}' for s in shifts)})."
        for k, b in sorted(bound.items(), key=lambda kv: not kv[0]))
    paper_gm = {key: tuple(cells[("split", s)]["dro-paper"].gm for s in shifts)
                for key, cells in ((True, cells_ts5), (False, cells_nts5)) if ("split", shifts[0]) in cells}
    vs_paper = {k: (_oracle_bound(sc, paper_gm[k]), keys) for k, (sc, keys) in oracle_sc.items()}
    oracle_vs_paper = "\n".join(
        f"- {'traces with timestamps' if k else 'trace without timestamps'}: certified lower bound "
        f"**{b.lower:.3f}** x the paper's gm; achieved {b.upper:.3f} (levels "
        + " / ".join(f"{v * g:.3f}" for v, g in zip(b.levels_at_upper, paper_gm[k]))
        + f"); the achieving reserves over SAA's: {_hindsight_reserves(evs, b, keys)}."
        for k, (b, keys) in sorted(vs_paper.items(), key=lambda kv: not kv[0]))
    elapsed = time.perf_counter() - started
    ts_names = ", ".join(sorted({Path(e.trace).stem for e in ts}))
    nts_names = ", ".join(sorted({Path(e.trace).stem for e in nts}))
    md = RESULTS_TEMPLATE.format(
        command="python benchmarks/paper_tables.py" + (" --quick" if args.quick else ""),
        machine=f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, load average "
        f"{os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC", elapsed=elapsed,
        default=DEFAULT_RADIUS.model_dump(), ts_names=ts_names, nts_names=nts_names,
        gm_ts=gm_markdown(cells_ts, GM_TABLE, GM_LABELS), gm_nts=gm_markdown(cells_nts, GM_TABLE, GM_LABELS),
        gm_ts5=gm_markdown(cells_ts5, GM_TABLE, GM_LABELS), gm_nts5=gm_markdown(cells_nts5, GM_TABLE, GM_LABELS),
        targets="Best over the six listed policies (strict: the default's wins count as 1):\n\n"
        + _targets(cells_ts, cells_nts, shifts) + "\n\nBest over the issue's five policies:\n\n"
        + _targets(cells_ts5, cells_nts5, shifts),
        issue5=ISSUE5_REPORTED, regret=_regret_table(evs), cost_tables=_cost_tables(evs), paper_iv=PAPER_TABLE_IV,
        sim=sim_md, fleet=fleet.model_dump(), sim_load=SIMULATE_LOAD, ablation=ablation_md, ablation_notes=ABLATION_NOTES,
        imgs="\n".join(f"![{p.stem}](img/{p.name})" for p in imgs), oracle=oracle, oracle_vs_paper=oracle_vs_paper,
        disagree=_disagreements(evs), binning=binning_md, **_kept(args.out / "results.md"),
    )
    (args.out / "results.md").write_text(md.rstrip("\n") + "\n", encoding="utf-8")
    print(f"wrote {args.out / 'results.md'} and {len(imgs)} images in {elapsed:.0f} s", file=sys.stderr)
    return 0


def _kept(results: Path) -> dict[str, str]:
    """The template's ``kept_NAME`` fields: each section of ``KEPT`` as the previous file holds it, markers
    included, or nothing when it has none."""
    old = results.read_text(encoding="utf-8") if results.exists() else ""
    out = {}
    for name in KEPT:
        block = find(old, *marks(name))
        out[f"kept_{name.replace('-', '_')}"] = block + "\n\n" if block is not None else ""
    return out


if __name__ == "__main__":
    sys.exit(main())
