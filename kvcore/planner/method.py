"""Which method ``plan(method="auto")`` uses: BCD on small instances, the fleet method on large ones.

One BCD sweep solves the (y, delta) block about twice per (group, layout), once per class and once per (refused,
admitted) pair, each solve growing with classes x groups; the fleet method's steps grow no faster than
classes x groups (docs/model.md). Measured on the development machine (docs/benchmarks.md): 16 classes x 4 groups
x 24 layouts plans in 1.4 s by BCD (quiet) and 32 classes x 8 groups x 12 layouts in 17 s, where the fleet method
takes 0.02 s at an objective 8e-6 lower. On the Table III generator's 2-group instances (4 layouts, 300 samples,
``benchmarks/fleet.py --two-groups 16 32 64``, load average 4) BCD took 1.4 / 5.7 / 63 s for 16 / 32 / 64 classes
against the fleet method's 0.15-0.20 s, at objectives 0.12 % above / 0.67 % below / 0.37 % above the fleet
method's.
"""

from __future__ import annotations

from typing import Literal

from kvcore.planner.problem import Problem

Method = Literal["auto", "bcd", "fleet"]

BCD_SIZE = 4096
"""Largest ``classes x groups x feasible layouts (summed over groups)`` planned by BCD under ``method="auto"``."""
BCD_MAX_CLASSES = 32
"""Most classes planned by BCD under ``method="auto"``: its admission block tries every (refused, admitted) pair,
so its time grows with the square of the classes (5.7 s at 32, 63 s at 64 with two small groups)."""


def bcd_fits(classes: int, groups: int, layouts: int) -> bool:
    """Whether ``auto`` picks BCD, from counts: ``layouts`` is the feasible layouts summed over the groups."""
    return classes <= BCD_MAX_CLASSES and classes * groups * layouts <= BCD_SIZE


def choose_method(prob: Problem) -> Literal["bcd", "fleet"]:
    """BCD up to :data:`BCD_SIZE` and :data:`BCD_MAX_CLASSES`, the fleet method above."""
    layouts = sum(len(g.feasible_indices) for g in prob.groups)
    return "bcd" if bcd_fits(prob.n_classes, prob.n_groups, layouts) else "fleet"
