"""The data-driven radius (``kind="drift"``, the default): its pieces and the behaviour issue 5 pins.

Covers the exact 1-Wasserstein distance against scipy (and its one-sided parts), the sampling spread S, the
floor's 1/N scaling and its effect on high-rho reserves, that a stationary history stays at the floor, that a step
change raises eps (a step down only when shorter outputs are the costly side), the horizon term (the paper's
0.15 E[xi] for a plan that holds as long as its history, falling with the square of the ratio), that eps never
exceeds the saturation radius (past which the DRO reserve cannot move), and that the choice explains itself.

Tests of the data terms pass ``horizon_ratio=OPERATOR_RATIO`` (5 min re-plans on 6 h of history, the operator's
defaults), where the horizon term is negligible, so what they pin is the history's doing.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import wasserstein_distance

from kvcore.errors import InputError
from kvcore.reservation.radius import DEFAULT_RADIUS, RadiusPolicy, choose_radius, with_horizon
from kvcore.reservation.radius_drift import drift_radius, saturation_radius, spread, wasserstein1, wasserstein1_side
from kvcore.reservation import reserve
from kvcore.history.samples import History, Samples
from kvcore.history.traces import build_1_2_5_buckets, histogram_to_samples


OPERATOR_RATIO = 300.0 / 21600.0  # spec.replan.interval 5m / spec.prometheus.lookback 6h
FRESH = RadiusPolicy(horizon_ratio=OPERATOR_RATIO)


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
    small = drift_radius(_windows(rng, [100.0], n=400), 5000.0, horizon_ratio=OPERATOR_RATIO)
    big = drift_radius(_windows(rng, [100.0], n=6400), 5000.0, horizon_ratio=OPERATOR_RATIO)
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
    dro = reserve(hist, cp=100.0, cw=1.0, lmax=2000.0, radius=FRESH).reserve_tokens
    assert (dro > saa + 1.0) == flips


@pytest.mark.parametrize("seed", [0, 1, 2, 3], ids=lambda s: f"seed{s}")
def test_stationary_history_stays_at_the_floor(seed: int) -> None:
    rng = np.random.default_rng(seed)
    d = drift_radius(_windows(rng, [100.0] * 4), 5000.0, side="up", horizon_ratio=OPERATOR_RATIO)
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
    steady = drift_radius(_windows(rng, [scales[0]] * 4), 10_000.0, horizon_ratio=OPERATOR_RATIO)
    step = drift_radius(_windows(rng, scales), 10_000.0, horizon_ratio=OPERATOR_RATIO)
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
    d = drift_radius(hist, lmax, horizon_ratio=OPERATOR_RATIO)
    assert d.eps <= saturation_radius(hist.pooled(), lmax) + 1e-12
    assert drift_radius(hist, lmax, horizon_ratio=100.0).eps == pytest.approx(d.cap)  # the horizon term is capped too
    # Past the saturation radius the DRO reserve cannot move: eps = cap and eps = 10 x cap give one reserve.
    for rho in (2.0, 20.0, 100.0):
        at_cap = reserve(hist, cp=rho, cw=1.0, lmax=lmax, radius=RadiusPolicy(kind="absolute", eps=d.cap))
        beyond = reserve(hist, cp=rho, cw=1.0, lmax=lmax, radius=RadiusPolicy(kind="absolute", eps=10 * d.cap))
        assert at_cap.reserve_tokens == pytest.approx(beyond.reserve_tokens)
        assert at_cap.reserve_tokens == pytest.approx(rho / (rho + 1.0) * lmax)  # fully robust, still < L_max


def test_default_is_drift_and_explains_itself() -> None:
    import kvcore.reservation as reservation

    assert DEFAULT_RADIUS.kind == "drift"
    assert reservation.DEFAULT_RADIUS is DEFAULT_RADIUS and reservation.RadiusPolicy is RadiusPolicy
    rng = np.random.default_rng(3)
    choice = choose_radius(FRESH, _windows(rng, [100.0] * 4), lmax=5000.0)
    assert choice.rule == "drift"
    assert choice.reason.startswith(f"eps = {choice.eps:.2f} tokens")
    r = reserve(_windows(rng, [100.0] * 4), cp=10.0, cw=1.0, lmax=5000.0)
    assert r.radius is not None and r.radius.rule == "drift"


def test_one_window_has_no_drift_term() -> None:
    d = drift_radius(History.of(Samples.from_arrays(np.arange(100.0))), 1000.0, horizon_ratio=0.0)
    assert d.windows == 1 and d.drift == 0.0 and d.eps == pytest.approx(d.floor)
    assert "one window" in d.reason


def test_one_sided_parts_add_up_to_w1() -> None:
    rng = np.random.default_rng(11)
    a = Samples.from_arrays(rng.gamma(2.0, 100.0, 300))
    b = Samples.from_arrays(rng.uniform(150.0, 250.0, 200))  # same mean, narrower: the CDFs cross
    up, down = wasserstein1_side(a, b, "up"), wasserstein1_side(a, b, "down")
    assert up > 0.0 and down > 0.0  # the two distributions cross
    assert up + down == pytest.approx(wasserstein_distance(a.values, b.values), rel=1e-12)
    assert wasserstein1_side(a, b, "both") == pytest.approx(up + down, rel=1e-12)
    shifted = Samples.from_arrays(a.values + 50.0)  # every quantile 50 tokens up: all of W1 is "up"
    assert wasserstein1_side(a, shifted, "up") == pytest.approx(50.0)
    assert wasserstein1_side(a, shifted, "down") == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize(
    ("cp", "cw", "counts"),
    [pytest.param(10.0, 1.0, False, id="overflow-costly-ignores-a-step-down"),
     pytest.param(1.0, 10.0, True, id="waste-costly-counts-a-step-down"),
     pytest.param(1.0, 1.0, True, id="equal-costs-count-either-way")],
)
def test_step_down_counts_only_when_shorter_outputs_are_the_risk(cp: float, cw: float, counts: bool) -> None:
    rng = np.random.default_rng(7)
    hist = _windows(rng, [200.0, 200.0, 200.0, 100.0])
    steady = choose_radius(FRESH, _windows(rng, [200.0] * 4), lmax=10_000.0, cp=cp, cw=cw)
    step = choose_radius(FRESH, hist, lmax=10_000.0, cp=cp, cw=cw)
    assert (step.eps > 5.0 * steady.eps) == counts
    assert ("drift:" in step.reason) == counts


def test_step_up_counts_when_overflow_is_costly() -> None:
    rng = np.random.default_rng(7)
    step = choose_radius(FRESH, _windows(rng, [100.0, 100.0, 100.0, 200.0]), lmax=10_000.0, cp=10.0, cw=1.0)
    assert "drift:" in step.reason and "towards longer outputs" in step.reason


def test_horizon_term_is_the_papers_radius_at_ratio_one_and_falls_with_its_square() -> None:
    rng = np.random.default_rng(2)
    hist = _windows(rng, [100.0] * 4, n=2000)
    mean = hist.pooled().mean()
    one = drift_radius(hist, 10_000.0, horizon_ratio=1.0)
    quarter = drift_radius(hist, 10_000.0, horizon_ratio=0.25)
    assert one.horizon == pytest.approx(0.15 * mean) and one.eps == pytest.approx(0.15 * mean)
    assert quarter.horizon == pytest.approx(0.15 * mean / 16.0)
    assert "horizon:" in one.reason
    ratios = [0.0, 0.05, 0.25, 0.5, 1.0, 2.0, 5.0]
    eps = [drift_radius(hist, 10_000.0, horizon_ratio=r).eps for r in ratios]
    assert all(a <= b for a, b in zip(eps, eps[1:]))  # a plan that must hold longer never gets a smaller ball
    assert eps[0] == pytest.approx(one.floor + one.drift)  # no horizon: the data terms alone
    # At ratio 1 on a stationary history the default reserves exactly what the paper's radius reserves.
    paper = RadiusPolicy(kind="fraction", frac=0.15)
    for rho in (2.0, 20.0, 100.0):
        ours = reserve(hist, cp=rho, cw=1.0, lmax=10_000.0)
        theirs = reserve(hist, cp=rho, cw=1.0, lmax=10_000.0, radius=paper)
        assert ours.reserve_tokens == pytest.approx(theirs.reserve_tokens)


def test_horizon_ratio_and_power_are_validated() -> None:
    with pytest.raises(ValueError, match="horizon_ratio"):
        RadiusPolicy(horizon_ratio=-1.0)
    with pytest.raises(ValueError, match="horizon_power"):
        RadiusPolicy(horizon_power=0.0)


def test_histogram_counts_its_requests_not_its_buckets() -> None:
    # 10,000 requests in vLLM's 1-2-5 buckets: ~10 weighted samples. The sampling floor must scale with the
    # 10,000 requests (Kish on the bucket weights would say ~5 and make eps near-saturating).
    rng = np.random.default_rng(8)
    raw = np.round(rng.gamma(2.0, 150.0, 10_000))
    bounds = build_1_2_5_buckets(5000)
    cumulative = [float(np.count_nonzero(raw <= b)) for b in bounds] + [float(raw.size)]
    hist = histogram_to_samples([*bounds, "+Inf"], cumulative, max_model_len=5000, model="upper")
    assert len(hist) < 15 and hist.observations == raw.size and hist.effective_size() == raw.size
    kish = 1.0 / float(np.dot(hist.weights, hist.weights))
    assert kish < 10  # what the floor used to divide by
    spread_out = histogram_to_samples([*bounds, "+Inf"], cumulative, max_model_len=5000)  # the default model
    assert len(spread_out) > 100 and spread_out.effective_size() == raw.size
    d_hist = drift_radius(History.of(hist), 5000.0, horizon_ratio=0.0)
    d_raw = drift_radius(History.of(Samples.from_arrays(raw)), 5000.0, horizon_ratio=0.0)
    # Same request count; the bucketed spread is coarser but of the same order.
    assert d_hist.n_eff == raw.size
    assert 0.5 * d_raw.floor < d_hist.floor < 3.0 * d_raw.floor


def test_pooled_effective_size_mixes_raw_and_counted_windows_consistently() -> None:
    a = Samples.from_arrays(np.arange(1000.0))  # raw: 1000 requests
    b = Samples.from_arrays([10.0, 20.0, 50.0], [1000.0, 1500.0, 500.0], observations=3000.0)
    pooled = History.of([a, b]).pooled()
    assert pooled.effective_size() == pytest.approx(1.0 / (0.25 / 1000 + 0.25 / 3000))
    # Two raw windows: the formula is Kish's on the pooled weights.
    c = Samples.from_arrays(np.arange(300.0))
    raw_pool = History.of([a, c]).pooled()
    assert raw_pool.observations is None
    assert raw_pool.effective_size() == pytest.approx(1.0 / (0.25 / 1000 + 0.25 / 300))


@pytest.mark.parametrize("bad", [0.0, -3.0, float("nan"), float("inf")])
def test_observations_must_be_a_positive_count(bad: float) -> None:
    with pytest.raises(InputError, match=r"win\.observations: must be a finite number > 0"):
        Samples.from_arrays([1.0, 2.0], observations=bad, field="win")


def test_with_horizon_tells_only_the_drift_rule() -> None:
    told = with_horizon(None, 0.5)
    assert told.kind == "drift" and told.horizon_ratio == 0.5 and DEFAULT_RADIUS.horizon_ratio == 1.0
    custom = with_horizon(RadiusPolicy(drift_z=4.0), 0.1)
    assert (custom.drift_z, custom.horizon_ratio) == (4.0, 0.1)  # other settings kept
    paper = RadiusPolicy(kind="fraction", frac=0.15)
    assert with_horizon(paper, 0.1) is paper
    with pytest.raises(ValueError, match="horizon_ratio"):
        with_horizon(None, -1.0)
