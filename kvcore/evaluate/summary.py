"""Summaries across traces: the geometric mean (gm) of cost ratios that policies are scored by.

A *scenario* is (trace, protocol, rho, shift). In each, a policy's ratio is its cost over the cheapest cost among
the *reference* policies in that scenario. For one protocol and shift level, a policy's gm is the geometric mean
of its ratios over every (trace, rho), and its worst is the largest of them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kvcore.evaluate.harness import Evaluation, Row

GM_POLICIES: tuple[str, ...] = ("saa", "dro-paper", "dro-0.02", "p95", "p99", "default")
"""The policies of the radius-rule table (docs/results.md §1), plus the default."""


@dataclass(frozen=True)
class Cell:
    """One policy at one (protocol, shift) level: gm and worst of cost / best, over ``scenarios`` (trace, rho)."""

    gm: float
    worst: float
    worst_at: str
    scenarios: int


def ratio_cells(
    evaluations: Iterable[Evaluation], policies: Sequence[str], *, reference: Sequence[str] | None = None
) -> dict[tuple[str, float], dict[str, Cell]]:
    """``{(protocol, shift): {policy: Cell}}``. ``reference`` (default: ``policies``) defines "best"."""
    ref = tuple(reference) if reference is not None else tuple(policies)
    scen: dict[tuple[str, str, float, float], dict[str, Row]] = {}
    for ev in evaluations:
        for r in ev.rows:
            scen.setdefault((r.trace, r.protocol, r.rho, r.shift), {})[r.method] = r
    logs: dict[tuple[str, float], dict[str, list[tuple[float, str]]]] = {}
    for (trace, protocol, rho, shift), rows in scen.items():
        have = [rows[m].cost for m in ref if m in rows]
        if not have:
            continue
        best = min(have)
        for m in policies:
            if m not in rows:
                continue
            ratio = rows[m].cost / best if best > 0 else (1.0 if rows[m].cost == 0 else math.inf)
            logs.setdefault((protocol, shift), {}).setdefault(m, []).append(
                (math.log(ratio) if ratio > 0 else 0.0, f"{trace} rho={rho:g}")
            )
    out: dict[tuple[str, float], dict[str, Cell]] = {}
    for key, per in logs.items():
        out[key] = {}
        for m, vals in per.items():
            top = max(vals)
            out[key][m] = Cell(gm=math.exp(sum(v for v, _ in vals) / len(vals)), worst=math.exp(top[0]),
                               worst_at=top[1], scenarios=len(vals))
    return out


def gm_markdown(cells: dict[tuple[str, float], dict[str, Cell]], policies: Sequence[str],
                labels: dict[str, str] | None = None) -> str:
    """A Markdown table: one row per policy, one column per (protocol, shift), each cell ``gm (worst)``."""
    keys = sorted(cells, key=lambda k: (0 if k[0] == "split" else 1, k[1]))
    head = "| policy | " + " | ".join(f"{p} {s:g}" for p, s in keys) + " |"
    lines = [head, "|---|" + "---|" * len(keys)]
    for m in policies:
        row = []
        for k in keys:
            c = cells[k].get(m)
            row.append("-" if c is None else f"{c.gm:.3f} ({c.worst:.2f})")
        lines.append(f"| {(labels or {}).get(m, m)} | " + " | ".join(row) + " |")
    return "\n".join(lines)
