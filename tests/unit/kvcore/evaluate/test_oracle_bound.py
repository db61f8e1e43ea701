"""The shift-blind oracle bound: prefix-sum costs against a direct evaluation, the exact kink-point minimum against
a dense grid, the lower bound against a brute force over every choice of a coarse grid, the achieved upper bound
re-scored by hand, the one-level case against a dense grid, zero-cost levels, and bad input naming its field."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from kvcore.errors import InputError
from kvcore.evaluate import oracle
from kvcore.evaluate.oracle import Scenario, scenario_costs, scenario_minimum, shift_blind_bound


def _direct(x: np.ndarray, rho: float, ys: np.ndarray) -> np.ndarray:
    """Mean cost at each y by the n x m matrix (the independent reference)."""
    x = np.asarray(x, dtype=np.float64)
    return np.asarray(
        (rho * np.maximum(x[:, None] - ys, 0.0) + np.maximum(ys - x[:, None], 0.0)).mean(0), dtype=np.float64
    )


def _log_ratio(sc: Scenario, level: int, ys: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(_direct(sc.tests[level], sc.rho, ys) / sc.best[level])


def _random_scenario(rng: np.random.Generator, levels: int, *, integer: bool = False) -> Scenario:
    lmax = 100.0
    base = rng.uniform(1.0, 40.0, size=int(rng.integers(5, 31)))
    if integer:
        base = np.round(base)
    shifts = (1.0, 1.5, 2.5)[:levels]
    tests = tuple(np.minimum(s * base[: int(rng.integers(5, base.size + 1))], lmax) for s in shifts)
    rho = float(rng.choice([2.0, 5.0, 20.0]))
    # A reference cost somewhere around the cost of a plausible reservation (any value > 0 is legal).
    best = tuple(float(_direct(t, rho, np.array([np.quantile(t, 0.8)]))[0] * rng.uniform(0.6, 1.2)) for t in tests)
    return Scenario(tests=tests, best=best, rho=rho, lmax=lmax)


# --- scenario_costs --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_scenario_costs_match_direct_evaluation(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    x = rng.integers(0, 50, size=n).astype(np.float64)  # many ties
    if seed % 2:
        x = x + rng.uniform(0, 1, size=n).round(2)
    ys = np.concatenate([
        rng.uniform(-20.0, 80.0, size=300),  # below, inside and above the data
        x[: min(n, 50)],  # exactly at data points (ties on both sides)
        [x.min(), x.max(), x.min() - 1.0, x.max() + 1.0],
    ])
    rho = float(rng.choice([1.0, 2.0, 17.5, 100.0]))
    got = scenario_costs(x, rho, ys)
    assert got.shape == ys.shape
    np.testing.assert_allclose(got, _direct(x, rho, ys), rtol=1e-11, atol=1e-9)


def test_scenario_costs_constant_data_is_exactly_zero_at_the_value() -> None:
    x = np.full(7, 0.1)
    got = scenario_costs(x, 3.0, np.array([0.1, 0.0, 0.3]))
    assert got[0] == 0.0
    np.testing.assert_allclose(got[1:], [0.3, 0.2], rtol=1e-12)


def test_scenario_costs_keeps_the_shape_of_ys() -> None:
    x = np.array([1.0, 2.0, 5.0])
    ys = np.array([[0.0, 2.0], [3.0, 9.0]])
    np.testing.assert_allclose(scenario_costs(x, 4.0, ys), _direct(x, 4.0, ys.ravel()).reshape(2, 2), rtol=1e-12)


# --- exact minimisation over the kink set ----------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_kink_minimum_is_exact_against_a_dense_grid(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    levels = int(rng.integers(2, 4))
    for _ in range(int(rng.integers(2, 4))):
        sc = _random_scenario(rng, levels)
        grid = np.linspace(0.0, sc.lmax, 20_001)
        logs = np.stack([_log_ratio(sc, lv, grid) for lv in range(levels)])
        for w in [np.eye(levels)[0], np.eye(levels)[-1], np.full(levels, 1.0 / levels), rng.dirichlet(np.ones(levels))]:
            kink_min, y_star = scenario_minimum(sc, w.tolist())
            obj = w @ logs
            # The grid never beats the exact minimum ...
            assert obj.min() >= kink_min - 1e-12
            # ... and gets arbitrarily close to it (spacing 0.005 tokens).
            assert obj.min() - kink_min < 5e-3
            # The reported minimiser is in range and attains the value.
            assert 0.0 <= y_star <= sc.lmax
            direct = sum(wl * _log_ratio(sc, lv, np.array([y_star]))[0] for lv, wl in enumerate(w) if wl > 0)
            assert direct == pytest.approx(kink_min, abs=1e-10)


# --- the bounds ------------------------------------------------------------------------------------------------


def _level_gms(scs: list[Scenario], ys: tuple[float, ...]) -> list[float]:
    levels = len(scs[0].tests)
    return [
        math.exp(float(np.mean([_log_ratio(sc, lv, np.array([y]))[0] for sc, y in zip(scs, ys, strict=True)])))
        for lv in range(levels)
    ]


@pytest.mark.parametrize("seed", range(6))
def test_bounds_bracket_a_brute_force_over_every_grid_choice(seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    levels = int(rng.integers(2, 4))
    scs = [_random_scenario(rng, levels, integer=bool(seed % 2)) for _ in range(2)]
    res = shift_blind_bound(scs, steps=20)
    assert res.lower <= res.upper
    assert res.upper == max(res.levels_at_upper)
    assert len(res.levels_at_upper) == levels
    assert len(res.weights_lower) == len(res.weights_upper) == levels
    assert sum(res.weights_lower) == pytest.approx(1.0) and sum(res.weights_upper) == pytest.approx(1.0)
    # The upper bound is achieved: re-score its reservations by hand.
    assert len(res.ys_upper) == 2
    assert all(0.0 <= y <= sc.lmax for y, sc in zip(res.ys_upper, scs, strict=True))
    np.testing.assert_allclose(_level_gms(scs, res.ys_upper), res.levels_at_upper, rtol=1e-10)
    # Every choice on a 41-point grid per scenario (41^2 combinations) is at least the certified lower bound.
    grids = [np.linspace(0.0, sc.lmax, 41) for sc in scs]
    per = [np.stack([_log_ratio(sc, lv, g) for lv in range(levels)]) for sc, g in zip(scs, grids, strict=True)]
    level_logs = (per[0][:, :, None] + per[1][:, None, :]) / 2.0  # [level, y_0, y_1]
    brute = math.exp(float(level_logs.max(axis=0).min()))
    assert brute >= res.lower - 1e-12
    # Sanity of the brute force itself against one combination scored by the helper.
    i0, i1 = 7, 33
    assert math.exp(float(level_logs[:, i0, i1].max())) == pytest.approx(
        max(_level_gms(scs, (float(grids[0][i0]), float(grids[1][i1])))), rel=1e-12
    )


@pytest.mark.parametrize("seed", range(4))
def test_lower_bound_holds_for_every_choice_of_the_kink_sets(seed: int) -> None:
    # Tighter than a coarse grid: every combination of points of K_0 x K_1 (the per-w minimisers live there).
    rng = np.random.default_rng(300 + seed)
    scs = [_random_scenario(rng, 2) for _ in range(2)]
    res = shift_blind_bound(scs, steps=40)
    ks = [np.unique(np.concatenate([*sc.tests, [0.0, sc.lmax]])) for sc in scs]
    per = [np.stack([_log_ratio(sc, lv, k) for lv in range(2)]) for sc, k in zip(scs, ks, strict=True)]
    level_logs = (per[0][:, :, None] + per[1][:, None, :]) / 2.0
    best_on_kinks = math.exp(float(level_logs.max(axis=0).min()))
    assert best_on_kinks >= res.lower - 1e-12
    # The reported upper bound is one of these combinations, so it cannot beat their minimum.
    assert res.upper >= best_on_kinks - 1e-12


@pytest.mark.parametrize("seed", range(4))
def test_one_level_bounds_meet_at_the_per_scenario_optimum(seed: int) -> None:
    rng = np.random.default_rng(400 + seed)
    scs = [_random_scenario(rng, 1) for _ in range(int(rng.integers(1, 5)))]
    res = shift_blind_bound(scs)
    assert res.lower == res.upper
    assert res.weights_lower == res.weights_upper == (1.0,)
    grid = np.linspace(0.0, 100.0, 200_001)
    dense = math.exp(float(np.mean([_log_ratio(sc, 0, grid).min() for sc in scs])))
    assert dense >= res.lower - 1e-12
    assert dense == pytest.approx(res.lower, rel=1e-3)


def test_a_level_whose_outputs_are_all_capped_can_cost_zero() -> None:
    # Level 1: every output capped at lmax, so y = lmax costs 0 there (log ratio -inf, level gm 0).
    lmax = 50.0
    sc = Scenario(
        tests=(np.array([10.0, 20.0, 30.0]), np.array([lmax, lmax, lmax])),
        best=(4.0, 1.0),
        rho=5.0,
        lmax=lmax,
    )
    value, y = scenario_minimum(sc, [0.0, 1.0])
    assert value == -math.inf and y == lmax
    res = shift_blind_bound([sc], steps=10)
    assert not math.isnan(res.lower) and not math.isnan(res.upper)
    assert res.lower <= res.upper == max(res.levels_at_upper)
    # One scenario: the best single y, by a dense grid (y = lmax gives a level-1 gm of 0).
    grid = np.linspace(0.0, lmax, 50_001)
    worst = np.maximum(_log_ratio(sc, 0, grid), _log_ratio(sc, 1, grid))
    assert math.exp(float(worst.min())) >= res.lower - 1e-12
    assert 0.0 < res.upper < math.inf


@pytest.mark.parametrize("seed", range(3))
def test_bounds_are_the_best_over_every_weight_of_the_grid(seed: int) -> None:
    # steps=4 over 3 levels: 15 weights, each re-evaluated scenario by scenario through scenario_minimum.
    rng = np.random.default_rng(500 + seed)
    scs = [_random_scenario(rng, 3) for _ in range(3)]
    res = shift_blind_bound(scs, steps=4)
    grid = [np.array(k, dtype=np.float64) / 4 for k in itertools.product(range(5), repeat=3) if sum(k) == 4]
    assert len(grid) == 15
    duals, uppers = [], []
    for w in grid:
        mins = [scenario_minimum(sc, w.tolist()) for sc in scs]
        duals.append(math.exp(float(np.mean([m for m, _ in mins]))))
        uppers.append(max(_level_gms(scs, tuple(y for _, y in mins))))
    assert res.lower == pytest.approx(max(duals), rel=1e-12)
    assert res.upper == pytest.approx(min(uppers), rel=1e-10)
    # The reported weights reproduce the reported bounds.
    at_lower = [scenario_minimum(sc, list(res.weights_lower))[0] for sc in scs]
    assert math.exp(float(np.mean(at_lower))) == pytest.approx(res.lower, rel=1e-12)
    ys = tuple(scenario_minimum(sc, list(res.weights_upper))[1] for sc in scs)
    assert ys == res.ys_upper


def test_chunking_the_weights_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    scs = [_random_scenario(rng, 3) for _ in range(2)]
    whole = shift_blind_bound(scs, steps=12)
    monkeypatch.setattr(oracle, "_CHUNK_ENTRIES", 7)  # one weight per block
    assert shift_blind_bound(scs, steps=12) == whole


def test_more_weights_never_loosen_the_bounds() -> None:
    rng = np.random.default_rng(7)
    scs = [_random_scenario(rng, 3) for _ in range(3)]
    coarse = shift_blind_bound(scs, steps=5)
    fine = shift_blind_bound(scs, steps=20)  # 20 is a multiple of 5: every coarse weight is also tried
    assert fine.lower >= coarse.lower
    assert fine.upper <= coarse.upper


# --- bad input -------------------------------------------------------------------------------------------------


def _ok() -> Scenario:
    return Scenario(tests=(np.array([1.0, 2.0]), np.array([2.0, 3.0])), best=(1.0, 1.0), rho=2.0, lmax=10.0)


def _with(**kw: object) -> Scenario:
    base = _ok()
    fields = {"tests": base.tests, "best": base.best, "rho": base.rho, "lmax": base.lmax, **kw}
    return Scenario(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("scenarios", "field"),
    [
        pytest.param([], "scenarios", id="no-scenarios"),
        pytest.param([_with(tests=())], "scenarios[0].tests", id="no-levels"),
        pytest.param([_ok(), _with(tests=(np.array([1.0]),), best=(1.0,))], "scenarios[1].tests",
                     id="level-count-differs"),
        pytest.param([_with(best=(1.0,))], "scenarios[0].best", id="best-count-differs"),
        pytest.param([_with(best=(1.0, 0.0))], "scenarios[0].best[1]", id="best-zero"),
        pytest.param([_with(best=(-1.0, 1.0))], "scenarios[0].best[0]", id="best-negative"),
        pytest.param([_with(best=(math.nan, 1.0))], "scenarios[0].best[0]", id="best-nan"),
        pytest.param([_with(tests=(np.array([1.0, -2.0]), np.array([1.0])))], "scenarios[0].tests[0][1]",
                     id="test-negative"),
        pytest.param([_with(tests=(np.array([1.0]), np.array([math.inf])))], "scenarios[0].tests[1][0]",
                     id="test-infinite"),
        pytest.param([_with(tests=(np.array([1.0]), np.array([math.nan])))], "scenarios[0].tests[1][0]",
                     id="test-nan"),
        pytest.param([_with(tests=(np.array([1.0]), np.array([], dtype=np.float64)))], "scenarios[0].tests[1]",
                     id="test-empty"),
        pytest.param([_ok(), _with(tests=(np.array([1.0, 11.0]), np.array([1.0])))], "scenarios[1].tests[0][1]",
                     id="test-above-lmax"),
        pytest.param([_with(rho=0.0)], "scenarios[0].rho", id="rho-zero"),
        pytest.param([_with(rho=-3.0)], "scenarios[0].rho", id="rho-negative"),
        pytest.param([_with(rho=math.inf)], "scenarios[0].rho", id="rho-infinite"),
        pytest.param([_with(lmax=0.0)], "scenarios[0].lmax", id="lmax-zero"),
        pytest.param([_with(lmax=math.nan)], "scenarios[0].lmax", id="lmax-nan"),
    ],
)
def test_bad_scenarios_name_the_field(scenarios: list[Scenario], field: str) -> None:
    with pytest.raises(InputError) as exc:
        shift_blind_bound(scenarios)
    assert exc.value.field == field


@pytest.mark.parametrize("steps", [0, -1, 2.5, True])
def test_bad_steps(steps: object) -> None:
    with pytest.raises(InputError) as exc:
        shift_blind_bound([_ok()], steps=steps)  # type: ignore[arg-type]
    assert exc.value.field == "steps"


@pytest.mark.parametrize(
    ("x", "rho", "ys", "field"),
    [
        pytest.param([], 2.0, [1.0], "test_outputs", id="empty"),
        pytest.param([1.0, -1.0], 2.0, [1.0], "test_outputs[1]", id="negative"),
        pytest.param([1.0, math.nan], 2.0, [1.0], "test_outputs[1]", id="nan"),
        pytest.param([1.0], 0.0, [1.0], "rho", id="rho-zero"),
        pytest.param([1.0], 2.0, [1.0, math.inf], "ys[1]", id="ys-infinite"),
    ],
)
def test_bad_scenario_costs_input(x: list[float], rho: float, ys: list[float], field: str) -> None:
    with pytest.raises(InputError) as exc:
        scenario_costs(np.array(x, dtype=np.float64), rho, np.array(ys, dtype=np.float64))
    assert exc.value.field == field


@pytest.mark.parametrize("weights", [[1.0], [0.0, 0.0], [-0.5, 1.5], [math.nan, 1.0]],
                         ids=["wrong-length", "all-zero", "negative", "nan"])
def test_bad_weights(weights: list[float]) -> None:
    with pytest.raises(InputError) as exc:
        scenario_minimum(_ok(), weights)
    assert exc.value.field == "weights"
