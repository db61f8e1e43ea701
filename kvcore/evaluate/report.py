"""Files for ``kvcore evaluate --out DIR``: a CSV of every row, a Markdown table, and PNG plots.

Written explicitly to the directory given, never elsewhere. matplotlib is imported lazily with the Agg backend
(no display), so planning code never pulls it in.

Files (``<stem>`` is ``<trace>-<protocol>``, then ``-<layout>`` when trained on bucket counts):
- ``<stem>.csv``: every :class:`~kvcore.evaluate.harness.Row` field;
- ``<stem>.md``: cost per policy (rows) and rho (columns), one table per shift level;
- ``<stem>-cost-vs-rho.png``: cost against rho per policy (log-log), one panel per shift level;
- ``<stem>-cost-vs-shift.png``: cost against shift per policy, one panel per rho.
"""

from __future__ import annotations

import csv
from pathlib import Path

from kvcore.evaluate.harness import Evaluation, Row

COLUMNS: tuple[str, ...] = tuple(Row.model_fields)


def stem(ev: Evaluation) -> str:
    """File-name stem: trace name without extension, the protocol, and the layout observed (unless raw)."""
    base = f"{Path(ev.trace).stem}-{ev.protocol}"
    return base if ev.observe == "raw" else f"{base}-{ev.observe}"


def write_csv(ev: Evaluation, path: Path) -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(COLUMNS))
        w.writeheader()
        for r in ev.rows:
            w.writerow({k: ("" if v is None else v) for k, v in r.model_dump().items()})
    return path


def cost_markdown(ev: Evaluation, *, extra: str | None = None) -> str:
    """Markdown: for each shift, cost per policy x rho (best per column in bold); ``extra`` adds a simulated
    column such as ``p99_latency_s``."""
    rhos = sorted({r.rho for r in ev.rows})
    shifts = sorted({r.shift for r in ev.rows})
    methods = list(dict.fromkeys(r.method for r in ev.rows))
    cell = {(r.rho, r.shift, r.method): r for r in ev.rows}
    seen = "" if ev.observe == "raw" else f", trained on {ev.observe} bucket counts ({ev.bucket_model})"
    out = [f"### {ev.trace}, {ev.protocol} protocol ({ev.requests} requests, L_max = {ev.lmax:g}, "
           f"{ev.plans} plan(s){seen})", ""]
    for s in shifts:
        out.append(f"Shift {s:g}x: mean cost per request (token slots), c_w = 1, c_p = rho.")
        out.append("")
        head = "| policy | " + " | ".join(f"rho={r:g}" for r in rhos) + " |"
        out += [head, "|---|" + "---|" * len(rhos)]
        best = {r: min(cell[(r, s, m)].cost for m in methods if (r, s, m) in cell) for r in rhos}
        for m in methods:
            vals = []
            for r in rhos:
                row = cell.get((r, s, m))
                if row is None:
                    vals.append("-")
                    continue
                txt = f"{row.cost:.4g}"
                if extra is not None and getattr(row, extra, None) is not None:
                    txt += f" / {getattr(row, extra):.3g}"
                vals.append(f"**{txt}**" if row.cost == best[r] else txt)
            out.append(f"| {m} | " + " | ".join(vals) + " |")
        out.append("")
    return "\n".join(out)


def write_plots(ev: Evaluation, directory: Path) -> list[Path]:
    """The two PNGs (module docstring)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rhos = sorted({r.rho for r in ev.rows})
    shifts = sorted({r.shift for r in ev.rows})
    methods = list(dict.fromkeys(r.method for r in ev.rows))
    cell = {(r.rho, r.shift, r.method): r.cost for r in ev.rows}
    paths = []
    fig, axes = plt.subplots(1, len(shifts), figsize=(4.2 * len(shifts), 3.6), squeeze=False)
    for ax, s in zip(axes[0], shifts):
        for m in methods:
            ax.plot(rhos, [cell.get((r, s, m), float("nan")) for r in rhos], marker="o", ms=3, label=m)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("rho = c_p / c_w")
        ax.set_title(f"shift {s:g}x")
    axes[0][0].set_ylabel("cost per request (token slots)")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle(f"{ev.trace}, {ev.protocol}: cost vs rho")
    fig.tight_layout()
    p = directory / f"{stem(ev)}-cost-vs-rho.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    fig, axes = plt.subplots(1, len(rhos), figsize=(3.2 * len(rhos), 3.4), squeeze=False)
    for ax, r in zip(axes[0], rhos):
        for m in methods:
            ax.plot(shifts, [cell.get((r, s, m), float("nan")) for s in shifts], marker="o", ms=3, label=m)
        ax.set_yscale("log")
        ax.set_xlabel("output shift")
        ax.set_title(f"rho = {r:g}")
    axes[0][0].set_ylabel("cost per request (token slots)")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle(f"{ev.trace}, {ev.protocol}: cost vs shift")
    fig.tight_layout()
    p = directory / f"{stem(ev)}-cost-vs-shift.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    return paths


def write_report(ev: Evaluation, directory: Path, *, plots: bool = True) -> list[Path]:
    """CSV, Markdown and (unless ``plots`` is false) PNGs into ``directory`` (created); returns the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [write_csv(ev, directory / f"{stem(ev)}.csv")]
    md = directory / f"{stem(ev)}.md"
    sim = any(r.p99_latency_s is not None for r in ev.rows)
    text = cost_markdown(ev)
    if sim:
        text += "\n" + cost_markdown(ev, extra="p99_latency_s").replace(
            "mean cost per request (token slots)", "cost / simulated P99 end-to-end latency (s)")
    md.write_text(text, encoding="utf-8")
    paths.append(md)
    if plots:
        paths += write_plots(ev, directory)
    return paths
