"""The multi-group exact reference (``kvcore.planner.exact`` with K = 2 groups: enumerated layouts and admission,
spatial branch and bound over the routing box with a certified relative gap) against BCD on tiny seeded 2-group
instances from ``kvcore.planner.synthetic.generate(..., groups=2)``:

1. BCD's objective is never below the certified lower bound (always checked);
2. where the certificate reaches 1e-4, BCD is within 1e-4 of the exact upper bound (the cases marked as
   certifying do so within their node limit; the others are near saturation, where a test-sized node limit leaves a
   gap of 1e-3 or more: they check (1) only, and docs/benchmarks.md gives their measured gaps). Every limit is a
   node limit (boxes branched), never a time limit, so the outcome does not depend on the machine's load;
3. a brute-force grid over the routing of a 2-class 2-group instance (every layout pair, all admitted, each grid
   point's (y, delta) block solved with its certificate) agrees with the branch and bound;
4. beyond the size limit the reference answers status ``error`` with a reason (two groups, and one group with 2^25
   admission sets), one-group instances keep the one-group path, whose node limit stops it with a valid bound; a
   3-group instance keeps the bound valid (1);
5. a known BCD gap (2x2x50 seed 5, a better routing found by the branch and bound) is pinned as a strict xfail,
   so it is visible and flips when the routing block reaches it.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kvcore.planner.instance import Instance
from kvcore.planner.planmodel import PlanStatus
from kvcore.planner import plan
from kvcore.planner.continuous import solve_continuous
from kvcore.planner.exact import exact_bounds, solve_exact
from kvcore.planner.problem import compile_problem
from kvcore.planner.synthetic import generate

TOL = 1e-4

# (classes, configs, samples, seed, node limit, certifies TOL within the limit). Node limits, not time limits, so the
# outcome is the same on an idle or a loaded machine. The certifying cases need 14-230 branched boxes (measured
# 2026-11-30) and get 2,000; the others (near-saturated instances; see docs/benchmarks.md) would need far more, stop
# at a test-sized limit (about what 3-4 s reached before) and still check (1) with the bound they reach.
CASES = [
    (2, 2, 50, 1, 2_000, True),
    (2, 2, 50, 3, 2_000, True),
    (2, 2, 50, 4, 2_000, True),
    (2, 2, 50, 0, 120, False),
    (2, 2, 50, 5, 120, False),
    (3, 3, 100, 0, 80, False),
    (3, 3, 100, 3, 80, False),
]


@pytest.mark.slow
@pytest.mark.parametrize("c,z,n,seed,limit,certifies", CASES,
                         ids=[f"{c}x{z}x{n}-seed{s}" for c, z, n, s, _, _ in CASES])
def test_bcd_against_multigroup_exact(c: int, z: int, n: int, seed: int, limit: int, certifies: bool) -> None:
    inst = generate(c, z, n, seed=seed, groups=2)
    bcd = plan(inst)
    ref = solve_exact(inst, tol=TOL, node_limit=limit)
    lower, upper, gap = exact_bounds(ref)
    assert bcd.objective is not None and ref.objective is not None
    assert ref.objective.total == pytest.approx(upper, rel=1e-12)
    assert lower <= upper and gap == pytest.approx((upper - lower) / upper, rel=1e-9)
    # (1) always: BCD is a feasible point, so it cannot be below a valid lower bound.
    assert bcd.objective.total >= lower * (1 - 1e-7)
    # The exact reference starts from BCD's plan: its upper bound is never worse.
    assert upper <= bcd.objective.total * (1 + 1e-9)
    if certifies:
        # (2) the certificate reaches TOL, and then BCD must be within TOL of the exact upper bound.
        assert ref.status is PlanStatus.OPTIMAL, ref.reason
        assert gap <= TOL * (1 + 1e-9)
        assert (bcd.objective.total - upper) / upper <= TOL
    else:
        assert ref.status in (PlanStatus.OPTIMAL, PlanStatus.FEASIBLE)
        assert ref.status is PlanStatus.OPTIMAL or "stopped by the node limit" in ref.reason


@pytest.mark.slow
def test_grid_agrees_with_branch_and_bound() -> None:
    inst = generate(2, 2, 50, seed=1, groups=2)
    ref = solve_exact(inst, tol=1e-3, node_limit=2_000)  # certifies in 64 boxes
    lower, upper, _ = exact_bounds(ref)
    assert ref.status is PlanStatus.OPTIMAL
    prob = compile_problem(inst)
    a = np.ones(prob.n_classes, dtype=bool)
    grid = np.linspace(0.0, 1.0, 13)
    best = np.inf
    for z in itertools.product(*(g.feasible_indices for g in prob.groups)):
        fixed = prob.kappa * sum(prob.groups[k].configs[z[k]].phi for k in range(2))
        for p0, p1 in itertools.product(grid, grid):
            pi = np.array([p0, p1])
            x = np.stack([prob.lam * pi, prob.lam * (1 - pi)], axis=1)
            res = solve_continuous(prob, tuple(int(j) for j in z), a, x, tol=1e-9)
            if res.ok:
                best = min(best, fixed + res.value)
    assert np.isfinite(best)
    assert best >= lower * (1 - 1e-7)          # the lower bound holds at every grid point
    assert upper <= best * (1 + 1e-3)          # the branch and bound's incumbent is within its tol of the grid's best
    assert (best - upper) / upper <= 5e-3      # and the grid, at spacing 1/12, comes close to it


@pytest.mark.slow
def test_size_limit_and_one_group_path() -> None:
    big = solve_exact(generate(7, 2, 30, seed=0, groups=2))
    assert big.status is PlanStatus.ERROR
    assert "size limit" in big.reason
    one = solve_exact(generate(2, 2, 50, seed=1))
    assert one.status is PlanStatus.OPTIMAL
    lower, upper, gap = exact_bounds(one)
    assert lower <= upper and gap <= 1e-8
    # one group: 25 classes are 2^25 admission sets per layout, refused before enumerating them
    huge = solve_exact(generate(25, 4, 20, seed=0))
    assert huge.status is PlanStatus.ERROR and "size limit" in huge.reason
    # the node limit stops the one-group enumeration deterministically, with a valid bound
    inst = generate(4, 4, 100, seed=0, load=0.5)  # the first pair tried is infeasible, the second is not
    none = solve_exact(inst, node_limit=1)
    assert none.status is PlanStatus.ERROR and "before a feasible point" in none.reason  # not "infeasible"
    cut, full = solve_exact(inst, node_limit=2), solve_exact(inst)
    assert cut.status is PlanStatus.FEASIBLE and "stopped by the node limit after 2 subproblems" in cut.reason
    lower, upper, _ = exact_bounds(cut)
    assert lower <= exact_bounds(full)[1] <= upper


@pytest.mark.xfail(strict=True, reason="known BCD gap with 2 groups (docs/benchmarks.md): on 2x2x50 seed 5 the branch "
                   "and bound found a routing ~1.2e-4 cheaper than BCD's (the two classes swap groups), a basin the "
                   "routing block's local moves do not reach; flips to a pass when BCD finds it")
def test_known_bcd_gap_two_groups_seed5() -> None:
    inst = generate(2, 2, 50, seed=5, groups=2)
    prob = compile_problem(inst)
    bcd = plan(inst)
    assert bcd.objective is not None
    z = (1, 1)  # BCD's layouts (4x1 in both pools)
    pi = np.array([0.15918, 0.99902])  # the branch and bound's routing to `pool`, rounded
    x = np.stack([prob.lam * pi, prob.lam * (1 - pi)], axis=1)
    res = solve_continuous(prob, z, np.ones(2, dtype=bool), x, tol=1e-9)
    assert res.ok
    better = prob.kappa * sum(prob.groups[k].configs[1].phi for k in range(2)) + res.value
    assert (bcd.objective.total - better) / better <= TOL


@pytest.mark.slow
def test_three_groups_bound_holds() -> None:
    inst = generate(2, 2, 50, seed=1, groups=2)
    third = inst.groups[1].model_copy(update={"name": "pool3", "gpus": 8})
    inst = Instance(classes=inst.classes, groups=inst.groups + (third,), costs=inst.costs)
    bcd = plan(inst)
    ref = solve_exact(inst, tol=TOL, node_limit=150)
    lower, upper, _ = exact_bounds(ref)
    assert bcd.objective is not None
    assert ref.status in (PlanStatus.OPTIMAL, PlanStatus.FEASIBLE)
    assert lower <= upper <= bcd.objective.total * (1 + 1e-9)
    assert bcd.objective.total >= lower * (1 - 1e-7)
