"""Reports of ``kvcore evaluate --engine vllm``: the rows as JSON-ready dicts, Markdown tables, the frontier check
and PNG plots (matplotlib imported lazily, Agg backend). Written only where the caller says."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvcore.evaluate.engine import METHODS, EngineEvaluation, EngineRow

ROW_KEYS = ("trace", "load", "method", "preemptions", "recomputed_tokens", "ttft_p50_s", "ttft_p99_s", "e2e_p50_s",
            "e2e_p99_s", "stall_p99_s", "stalled_frac", "goodput_rps", "cost")
"""The keys of a row in ``--json`` output."""


def row_dict(row: EngineRow) -> dict[str, Any]:
    return {k: getattr(row, k) for k in ROW_KEYS}


def main_rows(ev: EngineEvaluation) -> list[EngineRow]:
    return [r for r in ev.rows if r.method in METHODS]


def _f(v: float | None, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{digits}g}"


def table_markdown(ev: EngineEvaluation) -> str:
    """The three variants at every load, one Markdown table."""
    head = ("| load | method | preemptions | recomputed tokens | TTFT P50 / P99 s | e2e P50 / P99 s | stall P99 s | "
            "stalled | goodput req/s | cost |")
    out = [head, "|---|---|---|---|---|---|---|---|---|---|"]
    for r in main_rows(ev):
        out.append(f"| {r.load:g} | {r.method} | {r.preemptions:,} | {r.recomputed_tokens:,} | "
                   f"{_f(r.ttft_p50_s)} / {_f(r.ttft_p99_s)} | {_f(r.e2e_p50_s)} / {_f(r.e2e_p99_s)} | "
                   f"{_f(r.stall_p99_s)} | {_f(r.stalled_frac, 2)} | {_f(r.goodput_rps)} | {_f(r.cost)} |")
    return "\n".join(out)


GRID = "plugin-y="
"""Method prefix of the gate's reservation grid on the frontier (``plugin-y=<short>,<long>,s=<max_num_seqs>``)."""


def seqs_of(method: str) -> int | None:
    """The max_num_seqs of a ``stock-`` or ``plugin-y=`` frontier point (``...,s=<n>``), else None."""
    _, sep, tail = method.rpartition(",s=")
    return int(tail) if sep and tail.isdigit() else None


def matches(plugin: EngineRow, stock: EngineRow, goodput: bool = False) -> bool:
    """``plugin`` reaches ``stock``'s stalled share with a P99 e2e no worse (with ``goodput``: and goodput no lower)."""
    return ((plugin.stalled_frac or 0) <= (stock.stalled_frac or 0)
            and (plugin.e2e_p99_s or math.inf) <= (stock.e2e_p99_s or 0)
            and (not goodput or plugin.goodput_rps >= stock.goodput_rps))


def frontier_check(rows: Sequence[EngineRow], load: float, prefix: str = "plugin-rho=") -> tuple[int, int]:
    """(stock points, stock points the plugin matches): a stock (watermark, max_num_seqs) point is matched when some
    plugin point (methods starting with ``prefix``: the reservations that pay at every rho by default,
    ``plugin-dro-rho=`` for the raw DRO reservations) reaches a stalled share no higher with a P99 e2e no worse."""
    stock = [r for r in rows if r.load == load and r.method.startswith("stock-")]
    plugin = [r for r in rows if r.load == load and r.method.startswith(prefix)]
    return len(stock), sum(any(matches(p, s) for p in plugin) for s in stock)


def grid_check(rows: Sequence[EngineRow], load: float, goodput: bool = False) -> tuple[int, int]:
    """(stock points, stock points the gate's grid matches at the same max_num_seqs): the two instruments compared,
    the reservation vector against the watermark. With ``goodput`` a match must also keep goodput no lower."""
    stock = [r for r in rows if r.load == load and r.method.startswith("stock-")]
    grid = [r for r in rows if r.load == load and r.method.startswith(GRID)]
    return len(stock), sum(any(matches(p, s, goodput) for p in grid if seqs_of(p.method) == seqs_of(s.method))
                           for s in stock)


def write_csv(ev: EngineEvaluation, path: Path) -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(EngineRow.model_fields))
        w.writeheader()
        for r in ev.rows:
            w.writerow({k: ("" if v is None else v) for k, v in r.model_dump().items()})
    return path


SWEEPS = (("plugin-rho=", "tab:orange", "kvplan plugin, reservations that pay: rho 1..100"),
          ("plugin-dro-rho=", "tab:gray", "kvplan plugin, raw DRO reservations: rho 1..100"))


def plot_frontier(ev: EngineEvaluation, path: Path) -> Path:
    """Stalled share against P99 e2e and against goodput, one row of panels per load: stock vLLM's (watermark,
    max_num_seqs) grid, the gate's (reservation vector, max_num_seqs) grid, the plugin's rho sweeps (reservations
    that pay, raw DRO) and the variants."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loads = sorted({r.load for r in ev.rows})
    fig, axes = plt.subplots(len(loads), 2, figsize=(11, 4 * len(loads)), squeeze=False)
    styles = {"vllm-default": ("k", "s"), "kvplan-knobs": ("tab:green", "D"), "kvplan-plugin": ("tab:red", "*"),
              "kvplan-plugin-dro": ("tab:purple", "P"), "kvplan-plugin+knobs": ("tab:brown", "X")}
    for i, load in enumerate(loads):
        rows = [r for r in ev.rows if r.load == load]
        stock = [r for r in rows if r.method.startswith("stock-")]
        sweeps = [(sorted((r for r in rows if r.method.startswith(p) and not r.method.endswith("engine")),
                          key=lambda r: r.rho), color, label) for p, color, label in SWEEPS]
        grid = [r for r in rows if r.method.startswith(GRID)]
        for j, (field, label) in enumerate((("e2e_p99_s", "P99 end-to-end latency (s)"),
                                            ("goodput_rps", "goodput (requests/s within SLO)"))):
            ax = axes[i][j]
            if stock:
                ax.scatter([getattr(r, field) for r in stock], [r.stalled_frac or 0 for r in stock], s=18,
                           color="tab:blue", alpha=0.6, label="stock vLLM: watermark x max_num_seqs")
            if grid:
                ax.scatter([getattr(r, field) for r in grid], [r.stalled_frac or 0 for r in grid], s=14,
                           marker="x", color="tab:red", alpha=0.45,
                           label="kvplan gate: per-class reservation grid x max_num_seqs")
            for sweep, color, name in sweeps:
                if sweep:
                    ax.plot([getattr(r, field) for r in sweep], [r.stalled_frac or 0 for r in sweep], "-o",
                            color=color, ms=4, label=name)
            for r in rows:
                if r.method == "plugin-rho=engine":
                    ax.scatter([getattr(r, field)], [r.stalled_frac or 0], color="tab:orange", marker="^", s=60,
                               zorder=5, label="reservations that pay, engine-priced")
                if r.method in styles:
                    color, marker = styles[r.method]
                    ax.scatter([getattr(r, field)], [r.stalled_frac or 0], color=color, marker=marker, s=70,
                               zorder=5, label=r.method)
            ax.set_yscale("symlog", linthresh=1e-4)
            ax.set_xlabel(label)
            ax.set_ylabel("stalled share (gap > 1 s)")
            ax.set_title(f"{Path(ev.trace).stem}, load {load:g}")
            ax.grid(True, alpha=0.3)
            if i == 0 and j == 0:
                ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_report(ev: EngineEvaluation, out: Path) -> list[Path]:
    """CSV of every row, the Markdown table and (with frontier rows) the PNG, into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{Path(ev.trace).stem}-engine"
    written = [write_csv(ev, out / f"{stem}.csv")]
    md = out / f"{stem}.md"
    md.write_text(f"### {ev.trace}\n\n{table_markdown(ev)}\n", encoding="utf-8")
    written.append(md)
    if any(r.method.startswith(("stock-", "plugin-")) for r in ev.rows):
        written.append(plot_frontier(ev, out / f"{stem}-frontier.png"))
    return written
