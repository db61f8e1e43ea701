"""Read the previous plan back as a starting point: the operator always has one, and a re-plan after a small change
in traffic should not start from nothing.

:func:`previous_state` maps a :class:`~kvcore.planner.planmodel.Plan` onto the current problem by name (classes and groups
may have been added or removed since): layouts by (TP, PP), admission, routing fractions times the current rates,
reservations and prefix fractions. :func:`revealed_price` reads the work price the previous reservations imply:
a class whose reservation sits below its own best one was held there by the price of work, so minus the slope of
its DRO curve there estimates theta (token slots per token); the median over such classes is returned.
"""

from __future__ import annotations

import numpy as np

from kvcore.planner.planmodel import Plan, PlanStatus
from kvcore.planner.problem import Problem
from kvcore.planner.state import State


def previous_state(prob: Problem, previous: Plan | None) -> State | None:
    """The previous plan's decisions on the current problem, or None when there is no usable plan."""
    if previous is None or previous.status not in (PlanStatus.FEASIBLE, PlanStatus.OPTIMAL) or not previous.classes:
        return None
    C, K = prob.n_classes, prob.n_groups
    groups = {g.name: g for g in previous.groups}
    z = []
    for g in prob.groups:
        was = groups.get(g.name)
        match = [j for j, c in enumerate(g.configs) if c.feasible and was is not None and (c.tp, c.pp) ==
                 (was.tp, was.pp)]
        z.append(match[0] if match else max(g.feasible_indices, key=lambda j: g.configs[j].mu, default=-1))
    names = [g.name for g in prob.groups]
    classes = {c.name: c for c in previous.classes}
    a = np.ones(C, dtype=bool)
    x = np.zeros((C, K))
    y = np.array([c.y_star for c in prob.curves])
    delta = np.zeros((C, K))
    for i, name in enumerate(prob.class_names):
        old = classes.get(name)
        if old is None:
            continue
        a[i] = old.admitted
        y[i] = min(max(old.reserve_tokens, 0.0), float(prob.lmax[i]))
        share = np.array([old.routing.get(n, 0.0) for n in names])
        if a[i] and share.sum() > 0:
            x[i] = prob.lam[i] * share / share.sum()
        delta[i] = [min(max(old.prefix_fraction.get(n, 0.0), 0.0), 1.0) for n in names]
    return State(tuple(z), a, x, y, delta)


def revealed_price(prob: Problem, state: State | None) -> float | None:
    """The median of -DRO_i'(y_i) over admitted classes held below their best reservation; None if none is."""
    if state is None:
        return None
    prices = []
    for i, curve in enumerate(prob.curves):
        if state.a[i] and prob.lam[i] > 0 and state.y[i] < curve.y_star - 0.5:
            _, slope = curve.value_slope(float(state.y[i]))
            if slope < 0:
                prices.append(-slope)
    return float(np.median(prices)) if prices else None
