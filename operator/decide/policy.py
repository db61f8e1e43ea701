"""Disruption control: when a new plan may re-lay-out Deployments. Pure.

A layout change (TP/PP, hence GPUs per pod, pod template, rolling restart) is disruptive; routing weights and
reservations (ConfigMaps) are not. So, per reconcile, the planner solves twice when the free plan moves a layout:
``free`` (every allowed layout) and ``hold`` (each group pinned to its current layout). The free plan's layouts are
taken only when

1. its objective beats hold's by at least ``minImprovement`` (relative), and
2. fewer than ``maxLayoutChangesPerHour`` layout changes were attempted in the last hour;

otherwise the hold plan is used: new routing and reservations, old layouts. A group with no current layout (first
adoption) is never held back. A change of the spec itself (new generation) skips ``minImprovement``, never the
hourly budget (issue 26: every re-layout that is written counts, whatever the reason).

**Resuming.** The only re-layout that is not counted again is the continuation of the *newest* attempt of the hour
(:func:`resumes`): after a failure or a kill between its Deployment patches, the Deployments it did not reach yet
get the layouts already counted. A plan that returns to the target of an older attempt (A -> B -> A, A -> B -> C ->
A, ...) is a new re-layout: before issue 26 "any attempt of the hour" counted as resumed, so a plan oscillating
between two layouts re-laid a Deployment out 10 times in 8.4 s under ``maxLayoutChangesPerHour: 2``.
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


def resumes(recorded: Sequence[str], key: str) -> bool:
    """Whether an apply aiming at ``key`` continues the newest attempt of the hour (``recorded``: the keys of the
    hour's attempts, oldest first; layouts and engine-knob restarts alike). Only the newest one can be unfinished:
    any later attempt was recorded after it, so returning to an older target is a new re-layout."""
    return bool(key) and bool(recorded) and recorded[-1] == key


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


class BudgetSpent(Exception):
    """The current layouts cannot be kept (the hold plan is unusable) and the budget allows no re-layout: nothing
    can be applied; the last good plan stays in force. The message says why."""


def decide(free: Plan, hold: Plan | None, *, current: Mapping[str, tuple[int, int]], min_improvement: float,
           changes_last_hour: int, max_per_hour: int, spec_changed: bool, resuming: bool = False) -> Decision:
    """Pick the plan to apply (see the module docstring). ``resuming``: the free plan's target is the newest
    attempt's of the hour (:func:`resumes`), already counted. Raises :class:`BudgetSpent` when the hold plan is
    unusable and the budget is spent."""
    moves = layout_moves(free, current)
    if not moves:
        first = sorted(set(layouts_of(free)) - set(current))
        if first:
            return Decision(free, False, f"first layout of {', '.join(first)} (not yet managed by kvplan)")
        return Decision(free, False, "layouts unchanged")
    which = ", ".join(moves)
    if resuming:
        return Decision(free, True, f"resuming the re-layout attempted within the hour: re-layout of {which}")
    spent = changes_last_hour >= max_per_hour
    budget = f"{changes_last_hour} layout changes in the last hour (maxLayoutChangesPerHour {max_per_hour})"
    if hold is None or hold.status not in OK_STATUSES:
        if spent:
            raise BudgetSpent(f"the current layouts are infeasible now and the re-layout of {which} is held: "
                              f"{budget}; the last good plan stays in force")
        return Decision(free, True, ("spec changed: " if spec_changed else "current layouts infeasible now: ")
                        + f"re-layout of {which}")
    gain = math.inf if spec_changed else improvement(free, hold)
    if gain < min_improvement:
        return Decision(hold, False, f"re-layout of {which} held: objective gain {gain:.1%} "
                                     f"< minImprovement {min_improvement:.1%}")
    if spent:
        return Decision(hold, False, ("spec changed: " if spec_changed else "") + f"re-layout of {which} held: "
                        + budget)
    if spec_changed:
        return Decision(free, True, f"spec changed: re-layout of {which}")
    return Decision(free, True, f"re-layout of {which}: objective gain {gain:.1%}")
