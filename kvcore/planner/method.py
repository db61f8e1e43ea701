"""Which method ``plan(method="auto")`` uses: BCD on small instances, the fleet method on large ones.

One BCD sweep solves the (y, delta) block about twice per (group, layout), once per class and once per (refused,
admitted) pair, each solve growing with classes x groups; the fleet method's steps grow no faster than
classes x groups (docs/model.md). The thresholds below are where BCD's time, measured against the fleet method's
on the same instances (docs/benchmarks.md, "Choosing the method"), stops being worth its objective: past them the
fleet method plans in a fraction of a second at an objective within a percent of BCD's.
"""

from __future__ import annotations

from typing import Literal

from kvcore.planner.problem import Problem

Method = Literal["auto", "bcd", "fleet"]

BCD_SIZE = 4096
"""Largest ``classes x groups x feasible layouts (summed over groups)`` planned by BCD under ``method="auto"``."""
BCD_MAX_CLASSES = 32
"""Most classes planned by BCD under ``method="auto"``: its admission block tries every (refused, admitted) pair,
so its time grows with the square of the classes (docs/benchmarks.md, "Choosing the method")."""


def bcd_fits(classes: int, groups: int, layouts: int) -> bool:
    """Whether ``auto`` picks BCD, from counts: ``layouts`` is the feasible layouts summed over the groups."""
    return classes <= BCD_MAX_CLASSES and classes * groups * layouts <= BCD_SIZE


def choose_method(prob: Problem) -> Literal["bcd", "fleet"]:
    """BCD up to :data:`BCD_SIZE` and :data:`BCD_MAX_CLASSES`, the fleet method above."""
    layouts = sum(len(g.feasible_indices) for g in prob.groups)
    return "bcd" if bcd_fits(prob.n_classes, prob.n_groups, layouts) else "fleet"
