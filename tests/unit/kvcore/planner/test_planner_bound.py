"""The certified lower bound (kvcore.planner.bound, docs/model.md "A certified lower bound"):

1. it never exceeds the optimum: against the one-group exact reference (within 1e-8 of the global optimum) on the
   paper's three small Table III sizes over four seeds and on instances whose KV memory binds (the memory-time
   price then engages), and against the multi-group branch and bound's incumbent (a feasible point) on 2-group
   instances, stopped by a node limit;
2. its pieces: the tilted class minimum against a brute-force grid of exact DRO evaluations, the vectorised class
   pieces against the one-class ones, the closed-form group piece against a numerical minimisation;
3. the price matters: with the fleet busy the best price's bound is above the price-free bound L(0) (every class
   at its own best reservation, every group at its cheapest layout, no queueing).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from kvcore.planner.bound import Dual, lower_bound
from kvcore.planner.bound_pieces import ClassPieces, GroupPieces
from kvcore.planner.dro import DroCurve, dro_eval
from kvcore.planner.exact import exact_bounds, exact_objective, solve_exact
from kvcore.planner.problem import compile_problem
from kvcore.planner.synthetic import LAYOUTS, MODEL, generate
from kvcore.planner.synthetic_fleet import generate_fleet
from kvcore.profiles import ProfileOverride, roofline
from kvcore.history.samples import Samples

SMALL = [(c, z, n, seed) for (c, z, n) in [(3, 4, 100), (4, 4, 150), (5, 5, 200)] for seed in range(4)]


@pytest.mark.slow
@pytest.mark.parametrize("c,z,n,seed", SMALL, ids=[f"{c}x{z}x{n}-seed{s}" for c, z, n, s in SMALL])
def test_bound_below_the_one_group_optimum(c: int, z: int, n: int, seed: int) -> None:
    inst = generate(c, z, n, seed=seed)
    bound = lower_bound(compile_problem(inst))
    exact = exact_objective(solve_exact(inst))
    assert bound.value <= exact * (1 + 1e-8)
    assert bound.value > 0.5 * exact  # not vacuous (measured 0.929 .. 0.9995 of the optimum)


MEMORY = [(shrink, seed) for shrink in (100.0, 200.0) for seed in range(3)]


@pytest.mark.slow
@pytest.mark.parametrize("shrink,seed", MEMORY, ids=[f"kv-over-{s:g}-seed{d}" for s, d in MEMORY])
def test_bound_below_the_optimum_when_memory_binds(shrink: float, seed: int) -> None:
    # Measured KV capacities `shrink` times below the roofline's: the memory rows bind at the optimum.
    inst = generate(4, 4, 150, seed=seed, load=0.6)
    overrides = tuple(ProfileOverride(gpu_type="A100-80GB", model=MODEL, tp=tp, pp=pp,
                                      kv_capacity_tokens=roofline("A100-80GB", MODEL, tp, pp).kv_capacity_tokens
                                      / shrink)
                      for tp, pp in LAYOUTS[:4] if roofline("A100-80GB", MODEL, tp, pp).feasible)
    inst = inst.model_copy(update={"profiles": overrides})
    bound = lower_bound(compile_problem(inst))
    exact = exact_objective(solve_exact(inst))
    assert bound.point.beta > 0   # memory-time is short at beta = 0 on every one of these
    assert bound.value <= exact * (1 + 1e-8)
    assert bound.value > lower_bound(compile_problem(generate(4, 4, 150, seed=seed, load=0.6))).value


MULTI = [(2, 2, 50, seed) for seed in range(6)] + [(3, 3, 100, 2)]


@pytest.mark.slow
@pytest.mark.parametrize("c,z,n,seed", MULTI, ids=[f"{c}x{z}x{n}-seed{s}" for c, z, n, s in MULTI])
def test_bound_below_the_multigroup_incumbent(c: int, z: int, n: int, seed: int) -> None:
    inst = generate(c, z, n, seed=seed, groups=2)
    bound = lower_bound(compile_problem(inst))
    ref = solve_exact(inst, node_limit=40)  # a work limit: the incumbent is a feasible point either way
    lower, upper, _ = exact_bounds(ref)
    assert bound.value <= upper * (1 + 1e-9)


TILT_CASES = [(10.0, 1.0), (1.0, 10.0), (3.0, 3.0), (100.0, 1.0), (0.0, 1.0), (1.0, 0.0)]


@pytest.mark.slow
@pytest.mark.parametrize("cp,cw", TILT_CASES, ids=[f"cp{cp:g}-cw{cw:g}" for cp, cw in TILT_CASES])
def test_tilted_minimum_against_a_grid(cp: float, cw: float) -> None:
    # lower <= the grid's minimum (a certified bound) and upper is attained (within the grid's reach).
    rng = np.random.default_rng(11)
    lmax = 2000.0
    for trial in range(8):
        n = int(rng.integers(1, 60))
        xi = np.minimum(np.round(rng.lognormal(5, 1, n)), lmax)
        eps = float(rng.choice([0.0, 0.5, 10.0, 200.0]))
        curve = DroCurve.build(Samples.from_arrays(xi, rng.random(n) if trial % 2 else None), cp=cp, cw=cw,
                               lmax=lmax, eps=eps)
        grid = np.unique(np.concatenate([np.linspace(0, lmax, 801), xi]))
        vals = np.array([dro_eval(float(y), curve.xi, curve.w, cp=cp, cw=cw, lmax=lmax, eps=eps)[0] for y in grid])
        for theta in (0.0, 0.01, 0.5, 3.0, 200.0):
            lower, y, upper = curve.tilted_min(theta)
            brute = float(np.min(vals + theta * grid))
            assert lower <= brute + 1e-9 * max(1.0, abs(brute))
            assert upper <= brute + 1e-7 * max(1.0, abs(brute))
            assert upper == pytest.approx(curve.value(y) + theta * y, rel=1e-12)


def test_vectorised_class_pieces_match_one_by_one() -> None:
    for inst in (generate_fleet(48, 6, 12, 400, seed=3), generate(15, 12, 2000, seed=1)):
        prob = compile_problem(inst)
        classes = ClassPieces(prob)
        assert classes.closed.size > 0
        for theta in (0.0, 1e-4, 0.01, 0.3, 1.0, 5.0, 50.0, 200.0):
            low, y = classes.tilted(np.full(classes.closed.size, theta))
            for r, i in enumerate(classes.closed):
                one = prob.curves[int(i)].tilted_min(theta)
                assert low[r] == pytest.approx(one[0], rel=1e-9, abs=1e-9)
                assert y[r] == pytest.approx(one[1], abs=1e-9)


def test_group_piece_is_the_minimum_over_loads() -> None:
    prob = compile_problem(generate_fleet(4, 5, 12, 50, seed=2))
    groups = GroupPieces(prob)
    for theta in (1e-5, 1e-3, 0.05, 1.0):
        value, layout, load, _ = groups.pieces(theta, 0.0)
        best = 0.0
        for k, g in enumerate(prob.groups):
            per = []
            for j in g.feasible_indices:
                mu, cap = g.configs[j].mu, prob.umax * g.configs[j].mu
                res = minimize_scalar(lambda u: prob.c_slo * u * u / (2 * mu * (mu - u)) - theta * u,
                                      bounds=(0.0, cap), method="bounded", options={"xatol": 1e-9 * cap})
                per.append(prob.kappa * g.configs[j].phi + min(float(res.fun), -theta * cap
                                                                + prob.c_slo * cap * cap / (2 * mu * (mu - cap))))
            best += min(per)
            assert layout[k] in g.feasible_indices
            assert 0.0 <= load[k] <= prob.umax * g.configs[layout[k]].mu * (1 + 1e-12)
        assert value <= best + 1e-9 * max(1.0, abs(best))   # certified: never above the true minimum
        assert value == pytest.approx(best, rel=1e-7)


def test_the_price_lifts_the_bound_when_the_fleet_is_busy() -> None:
    prob = compile_problem(generate_fleet(32, 6, 12, 300, seed=1, load=1.05))
    dual = Dual(prob)
    free = dual.point(0.0)
    best = lower_bound(dual)
    assert best.point.theta > 0 and best.value > free.value * (1 + 1e-4)
    assert best.value >= max(free.value, dual.point(best.point.theta * 2).value) * (1 - 1e-9)
