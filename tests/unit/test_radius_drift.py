"""The data-driven radius (``kind="drift"``, the default): its pieces and the behaviour issue 5 pins.

Covers the exact 1-Wasserstein distance against scipy, the sampling spread S, the floor's 1/N scaling and its effect on high-rho reserves, that a
stationary history stays at the floor, that a step change raises eps, that eps never exceeds the saturation radius
(past which the DRO reserve cannot move), and that the choice explains itself.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import wasserstein_distance

from kvcore.radius import DEFAULT_RADIUS, RadiusPolicy, choose_radius
from kvcore.radius_drift import drift_radius, saturation_radius, spread, wasserstein1
from kvcore.reservation import reserve
from kvcore.samples import History, Samples


def _windows(rng: np.random.Generator, scales: list[float], n: int = 600) -> History:
    return History.of([Samples.from_arrays(np.round(rng.gamma(2.0, s, n))) for s in scales])


@pytest.mark.parametrize(
    ("a", "b", "wa", "wb"),
    [
        pytest.param([0.0], [5.0], None, None, id="point-masses"),
        pytest.param([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], None, None, id="identical"),
        pytest.param([1.0, 5.0, 9.0], [2.0, 2.0, 7.0, 30.0], None, None, id="uneven-sizes"),
        pytest.param([10.0, 20.0], [15.0, 40.0], [0.9, 0.1], [0.3, 0.7], id="weighted"),
    ],
)
def test_wasserstein1_matches_scipy(a: list[float], b: list[float], wa: list[float] | None,
                                    wb: list[float] | None) -> None:
    got = wasserstein1(Samples.from_arrays(a, wa), Samples.from_arrays(b, wb))
    assert got == pytest.approx(wasserstein_distance(a, b, wa, wb), abs=1e-9)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param([7.0], 0.0, id="one-sample"),
        pytest.param([0.0, 10.0], 5.0, id="two-points"),  # F = 1/2 on [0, 10): sqrt(1/4) * 10
        pytest.param([3.0, 3.0, 3.0], 0.0, id="constant"),
    ],
)
def test_spread(values: list[float], expected: float) -> None:
    assert spread(Samples.from_arrays(values)) == pytest.approx(expected)


def test_floor_shrinks_like_one_over_n() -> None:
    rng = np.random.default_rng(1)
    small = drift_radius(_windows(rng, [100.0], n=400), 5000.0)
    big = drift_radius(_windows(rng, [100.0], n=6400), 5000.0)
    assert big.floor == pytest.approx(small.floor / 16.0, rel=0.15)
    assert small.floor == pytest.approx(3.0 * small.spread / 400)


@pytest.mark.parametrize(
    ("n", "flips"),
    [pytest.param(30, True, id="thin-history-goes-robust"), pytest.param(3000, False, id="thick-history-stays-saa")],
)
def test_floor_decides_high_rho_reserve_by_history_size(n: int, flips: bool) -> None:
    rng = np.random.default_rng(5)
    hist = _windows(rng, [100.0] * 4, n=n // 4)
    saa = reserve(hist, cp=100.0, cw=1.0, lmax=2000.0, method="saa").reserve_tokens
    dro = reserve(hist, cp=100.0, cw=1.0, lmax=2000.0).reserve_tokens
    assert (dro > saa + 1.0) == flips


@pytest.mark.parametrize("seed", [0, 1, 2, 3], ids=lambda s: f"seed{s}")
def test_stationary_history_stays_at_the_floor(seed: int) -> None:
    rng = np.random.default_rng(seed)
    d = drift_radius(_windows(rng, [100.0] * 4), 5000.0)
    assert d.drift == 0.0
    assert d.eps == pytest.approx(d.floor)
    assert d.eps < 0.02 * d.mean  # SAA-like: well under the paper's 0.15 E[xi]
    assert "no significant drift" in d.reason


@pytest.mark.parametrize(
    ("scales", "min_ratio"),
    [
        pytest.param([100.0, 100.0, 100.0, 200.0], 5.0, id="step-up-2x"),
        pytest.param([100.0, 100.0, 100.0, 250.0], 20.0, id="step-up-2.5x"),
        pytest.param([200.0, 200.0, 200.0, 100.0], 5.0, id="step-down-2x"),
    ],
)
def test_step_change_raises_the_radius(scales: list[float], min_ratio: float) -> None:
    # 600-request windows: a 2x step is ~15 noise scales, well past drift_z = 6 (a 1.5x step is ~6, the edge).
    rng = np.random.default_rng(7)
    steady = drift_radius(_windows(rng, [scales[0]] * 4), 10_000.0)
    step = drift_radius(_windows(rng, scales), 10_000.0)
    assert step.drift > 0.0
    assert step.eps > min_ratio * steady.eps
    assert "drift" in step.reason


@pytest.mark.parametrize(
    ("values", "lmax"),
    [
        pytest.param([1.0, 2.0], 3.0, id="two-samples-tight-support"),
        pytest.param([5.0], 100.0, id="one-sample"),
        pytest.param([0.0, 0.0, 1000.0], 1000.0, id="extremes"),
    ],
)
def test_radius_never_exceeds_saturation(values: list[float], lmax: float) -> None:
    s = Samples.from_arrays(values)
    hist = History.of([s, Samples.from_arrays([lmax] * 3)])  # a huge jump, to push the drift term past the cap
    d = drift_radius(hist, lmax)
    assert d.eps <= saturation_radius(hist.pooled(), lmax) + 1e-12
    # Past the saturation radius the DRO reserve cannot move: eps = cap and eps = 10 x cap give one reserve.
    for rho in (2.0, 20.0, 100.0):
        at_cap = reserve(hist, cp=rho, cw=1.0, lmax=lmax, radius=RadiusPolicy(kind="absolute", eps=d.cap))
        beyond = reserve(hist, cp=rho, cw=1.0, lmax=lmax, radius=RadiusPolicy(kind="absolute", eps=10 * d.cap))
        assert at_cap.reserve_tokens == pytest.approx(beyond.reserve_tokens)
        assert at_cap.reserve_tokens == pytest.approx(rho / (rho + 1.0) * lmax)  # fully robust, still < L_max


def test_default_is_drift_and_explains_itself() -> None:
    assert DEFAULT_RADIUS.kind == "drift"
    rng = np.random.default_rng(3)
    choice = choose_radius(DEFAULT_RADIUS, _windows(rng, [100.0] * 4), lmax=5000.0)
    assert choice.rule == "drift"
    assert choice.reason.startswith(f"eps = {choice.eps:.2f} tokens")
    r = reserve(_windows(rng, [100.0] * 4), cp=10.0, cw=1.0, lmax=5000.0)
    assert r.radius is not None and r.radius.rule == "drift"


def test_one_window_has_no_drift_term() -> None:
    d = drift_radius(History.of(Samples.from_arrays(np.arange(100.0))), 1000.0)
    assert d.windows == 1 and d.drift == 0.0 and d.eps == pytest.approx(d.floor)
    assert "one window" in d.reason
