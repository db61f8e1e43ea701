"""Disruption control: when a new plan may re-lay-out Deployments. Pure.

A layout change (TP/PP, hence GPUs per pod, pod template, rolling restart) is disruptive; routing weights and
reservations (ConfigMaps) are not. So, per reconcile, the planner solves twice when the free plan moves a layout:
``free`` (every allowed layout) and ``hold`` (each group pinned to its current layout). The free plan's layouts are
taken only when

1. its objective beats hold's by at least ``minImprovement`` (relative), and
2. fewer than ``maxLayoutChangesPerHour`` layout changes happened in the last hour;

otherwise the hold plan is used: new routing and reservations, old layouts. A change of the spec itself (new
generation) or a group with no current layout (first adoption) is never held back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvcore import Plan, PlanStatus

OK_STATUSES = (PlanStatus.OPTIMAL, PlanStatus.FEASIBLE)
HOUR_S = 3600.0


@dataclass(frozen=True)
class Decision:
    """Which plan to apply, whether it re-lays-out, and why (one line for status)."""

    plan: Plan
    relayout: bool
    reason: str


def layouts_of(plan: Plan) -> dict[str, tuple[int, int]]:
    """Group -> (tp, pp) of the plan's active groups."""
    return {g.name: (g.tp, g.pp) for g in plan.groups if g.tp > 0}


def target_layouts(plan: Plan, current: Mapping[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """Group -> (tp, pp) the Deployments get from ``plan``: an idle group (tp = 0) keeps its ``current`` layout
    (default 1 x 1) with 0 replicas."""
    return {g.name: (g.tp, g.pp) if g.tp > 0 else current.get(g.name, (1, 1)) for g in plan.groups}


def layout_moves(plan: Plan, current: Mapping[str, tuple[int, int]]) -> list[str]:
    """Groups whose planned layout differs from ``current`` (groups without a current layout are not moves)."""
    return sorted(name for name, lay in layouts_of(plan).items() if name in current and current[name] != lay)


def recent_changes(history: Sequence[float], now: float) -> list[float]:
    """Timestamps (unix s) of layout changes within the last hour."""
    return [t for t in history if now - t < HOUR_S]


def improvement(free: Plan, hold: Plan) -> float:
    """Relative objective gain of ``free`` over ``hold`` ((hold - free) / |hold|); +inf when hold is unusable."""
    if hold.status not in OK_STATUSES or hold.objective is None:
        return math.inf
    if free.objective is None:
        return -math.inf
    h, f = hold.objective.total, free.objective.total
    if h == 0:
        return 0.0 if f >= 0 else math.inf
    return (h - f) / abs(h)


def decide(free: Plan, hold: Plan | None, *, current: Mapping[str, tuple[int, int]], min_improvement: float,
           changes_last_hour: int, max_per_hour: int, spec_changed: bool) -> Decision:
    """Pick the plan to apply (see the module docstring)."""
    moves = layout_moves(free, current)
    if not moves:
        first = sorted(set(layouts_of(free)) - set(current))
        if first:
            return Decision(free, False, f"first layout of {', '.join(first)} (not yet managed by kvplan)")
        return Decision(free, False, "layouts unchanged")
    if spec_changed:
        return Decision(free, True, f"spec changed: re-layout of {', '.join(moves)}")
    if hold is None or hold.status not in OK_STATUSES:
        return Decision(free, True, f"current layouts infeasible now: re-layout of {', '.join(moves)}")
    gain = improvement(free, hold)
    if gain < min_improvement:
        return Decision(hold, False, f"re-layout of {', '.join(moves)} held: objective gain {gain:.1%} "
                                     f"< minImprovement {min_improvement:.1%}")
    if changes_last_hour >= max_per_hour:
        return Decision(hold, False, f"re-layout of {', '.join(moves)} held: {changes_last_hour} layout changes in "
                                     f"the last hour (maxLayoutChangesPerHour {max_per_hour})")
    return Decision(free, True, f"re-layout of {', '.join(moves)}: objective gain {gain:.1%}")
