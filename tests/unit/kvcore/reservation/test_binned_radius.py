"""The radius's binning term: which part of a bucketed history's binning bound joins the sampling floor
(``RadiusPolicy.binning``: open / all / none), that raw histories get none, that pooling mixes the windows' bounds
(checked against scipy on the pooled requests), and that the choice says so in its reason."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import wasserstein_distance

from kvcore.history.buckets import bin_lengths
from kvcore.history.bucket_model import bucket_samples
from kvcore.reservation.radius import DEFAULT_RADIUS, RadiusPolicy, choose_radius
from kvcore.reservation.radius_drift import drift_radius
from kvcore.history.samples import History, Samples
from kvcore.history.series import powers_of_4_buckets

LMAX = 8192.0
RATIO = 300.0 / 21600.0  # the operator's default horizon ratio: the horizon term is negligible


def _raw_windows(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.minimum(np.round(rng.lognormal(5.5, 1.0, 1500)) + 1, LMAX) for _ in range(4)]


def _binned(raws: list[np.ndarray], top: float = 2048.0) -> History:
    """Powers-of-4 buckets up to ``top``: the +Inf bucket (1024, 8192] is open and holds requests."""
    return History(tuple(bucket_samples(bin_lengths(r, powers_of_4_buckets(int(top)), max_model_len=LMAX))
                         for r in raws))


def test_default_counts_the_open_bucket() -> None:
    assert DEFAULT_RADIUS.binning == "open"


@pytest.mark.parametrize("side_costs", [(10.0, 1.0, "up"), (1.0, 10.0, "down"), (1.0, 1.0, "both")])
@pytest.mark.parametrize("binning", ["open", "all", "none"])
def test_term_is_the_pooled_bound_on_the_exposed_side(binning: str, side_costs: tuple[float, float, str]) -> None:
    cp, cw, side = side_costs
    hist = _binned(_raw_windows())
    pooled = hist.pooled()
    assert pooled.binning is not None
    d = drift_radius(hist, LMAX, side=side, horizon_ratio=RATIO, binning=binning)  # type: ignore[arg-type]
    expected = 0.0 if binning == "none" else pooled.binning.term(side, binning)  # type: ignore[arg-type]
    assert d.binning == pytest.approx(expected)
    if binning != "none":
        assert d.binning > 0
    assert d.eps == pytest.approx(min(d.cap, max(d.floor + d.binning + d.drift, d.horizon)))
    choice = choose_radius(RadiusPolicy(binning=binning, horizon_ratio=RATIO), hist, lmax=LMAX,  # type: ignore[arg-type]
                           cp=cp, cw=cw)
    assert choice.eps == pytest.approx(d.eps)
    assert ("binning" in choice.reason) == (binning != "none")


def test_all_is_at_least_open_and_raw_histories_have_no_term() -> None:
    raws = _raw_windows(1)
    hist = _binned(raws)
    d_open, d_all = (drift_radius(hist, LMAX, side="up", horizon_ratio=RATIO, binning=b)  # type: ignore[arg-type]
                     for b in ("open", "all"))
    assert d_all.binning > d_open.binning > 0
    raw = History(tuple(Samples.from_arrays(r) for r in raws))
    assert raw.pooled().binning is None
    assert drift_radius(raw, LMAX, side="up", horizon_ratio=RATIO, binning="all").binning == 0.0


def test_pooled_bound_covers_the_pooled_requests() -> None:
    """Pooling four bucketed windows: their mixture is within the pooled (mean) bound of the mixture of the raw
    windows (scipy's W1 on the pooled requests)."""
    raws = _raw_windows(2)
    hist = _binned(raws)
    pooled = hist.pooled()
    assert pooled.binning is not None
    parts = [w.binning for w in hist.windows]
    assert all(p is not None for p in parts)
    assert pooled.binning.both == pytest.approx(np.mean([p.both for p in parts if p is not None]))
    w1 = wasserstein_distance(pooled.values, np.concatenate(raws), pooled.weights)
    assert 0 < w1 <= pooled.binning.both


def test_mixed_raw_and_bucketed_windows() -> None:
    raws = _raw_windows(3)
    bucketed = _binned(raws[:2]).windows
    hist = History((*bucketed, *(Samples.from_arrays(r) for r in raws[2:])))
    pooled = hist.pooled()
    assert pooled.binning is not None
    assert pooled.binning.up == pytest.approx(sum(w.binning.up for w in bucketed if w.binning) / 4)


def test_binning_policy_is_validated() -> None:
    with pytest.raises(ValueError, match="binning"):
        RadiusPolicy(binning="some")  # type: ignore[arg-type]
