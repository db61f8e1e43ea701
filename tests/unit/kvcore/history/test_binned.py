"""Histogram buckets (kvcore.history.buckets, kvcore.history.bucket_model, kvcore.history.bucket_bound): parsing cumulative counts and its
bad-input refusals, the within-bucket models (bucket counts kept exactly, whole tokens, monotone), and the binning
bound checked against scipy's brute-force 1-Wasserstein distance on synthetic requests, including the placements
that attain it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import wasserstein_distance

from kvcore.history.buckets import SKEW_FRACTION, SKEW_REQUESTS, Buckets, bin_lengths, buckets_from_cumulative, cumulative_from_lengths
from kvcore.history.bucket_bound import support_floor
from kvcore.history.bucket_model import MODELS, bucket_samples, shape, slice_edges
from kvcore.errors import InputError
from kvcore.reservation import reserve
from kvcore.history.samples import Samples
from kvcore.history.series import kvplan_buckets, powers_of_4_buckets, vllm_buckets

INF = math.inf


def _synthetic(kind: str, n: int, seed: int, top: int) -> np.ndarray:
    """Whole-token output lengths in [1, top] of a few shapes seen in real traces."""
    rng = np.random.default_rng(seed)
    if kind == "lognormal":
        x = rng.lognormal(5.0, 1.0, n)
    elif kind == "bimodal":
        x = np.where(rng.random(n) < 0.6, rng.normal(45, 3, n), rng.lognormal(6.0, 0.5, n))
    elif kind == "spike-at-cap":
        x = np.where(rng.random(n) < 0.1, top, rng.gamma(2.0, 150.0, n))
    else:
        x = rng.uniform(1, top, n)
    return np.clip(np.ceil(x), 1, top)


def _one_sided_up(sv: np.ndarray, sw: np.ndarray, raw: np.ndarray) -> float:
    """Brute-force integral of (F_samples - F_raw)^+ on the union grid (independent of kvcore's W1 code)."""
    grid = np.union1d(sv, raw)
    order = np.argsort(sv)
    fs = np.concatenate(([0.0], np.cumsum(sw[order])))[np.searchsorted(sv[order], grid, side="right")]
    fr = np.searchsorted(np.sort(raw), grid, side="right") / raw.size
    return float(np.sum(np.maximum(fs - fr, 0.0)[:-1] * np.diff(grid)))


def _mass_per_bucket(values: np.ndarray, weights: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    out = np.zeros(lower.size)
    for j, (lo, hi) in enumerate(zip(lower, upper)):
        if hi <= lo:
            continue  # a zero-width bucket (the +Inf one of a layout ending at max_model_len) holds nothing here
        inside = (values > lo) & (values <= hi)
        if j == 0:
            inside |= values == 0
        out[j] = weights[inside].sum()
    return out


# ---- parsing -------------------------------------------------------------------------------------------------


def test_pairs_in_any_order_give_the_same_buckets() -> None:
    bounds = [1, 2, 5, 10, 20, 50, INF]
    cum = [1, 3, 10, 40, 70, 95, 100]
    ordered = buckets_from_cumulative(bounds, cum, max_model_len=100)
    rev = buckets_from_cumulative(bounds[::-1], cum[::-1], max_model_len=100)
    strings = buckets_from_cumulative(["50", "+Inf", "1", "20", "2", "10", "5"], [95, 100, 1, 70, 3, 40, 10],
                                      max_model_len=100)
    for b in (rev, strings):
        assert b.lower.tolist() == ordered.lower.tolist() and b.upper.tolist() == ordered.upper.tolist()
        assert b.counts.tolist() == ordered.counts.tolist() == [1, 2, 7, 30, 30, 25, 5]
    assert ordered.open_top and ordered.upper[-1] == 100 and ordered.total == 100


def test_counts_reversed_against_their_bounds_are_refused_not_piled_into_one_bucket() -> None:
    """The operator once paired vLLM's bounds with their counts in reverse order; a running max then put every
    request in the first bucket and the reservation fell from about 2,048 tokens to 10. Now it is refused."""
    top = 4096
    rng = np.random.default_rng(0)
    lengths = np.minimum(rng.integers(1500, 2049, 3000), top).astype(float)
    bounds = [*map(float, vllm_buckets(top)), INF]
    cum = cumulative_from_lengths(lengths, bounds)
    good = reserve(bucket_samples(buckets_from_cumulative(bounds, cum, max_model_len=top)), cp=10, cw=1, lmax=top,
                   method="saa").reserve_tokens
    assert 1900 <= good <= top  # the open bucket (2000, 4096] is read up to max_model_len, as it must be
    reversed_pairs = reserve(bucket_samples(buckets_from_cumulative(bounds[::-1], cum[::-1], max_model_len=top)),
                             cp=10, cw=1, lmax=top, method="saa").reserve_tokens
    assert reversed_pairs == good
    with pytest.raises(InputError, match="cumulative count decreases") as info:
        buckets_from_cumulative(bounds, cum[::-1], max_model_len=top)
    assert info.value.field.startswith("cumulative_counts[")


@pytest.mark.parametrize(
    ("bounds", "counts", "field", "needle"),
    [
        pytest.param([1, 2, 5, INF], [5, 2, 6, 6], "cumulative_counts[1]", "decreases: le=2 has 2 requests but le=1 "
                     "has 5", id="decrease"),
        pytest.param([1, 2, 5, INF], [1, 2, 9, 6], "cumulative_counts[3]", "the +Inf bucket has 6",
                     id="inf-below-last-finite"),
        pytest.param([1, 2, INF], [1, float("nan"), 3], "cumulative_counts[1]", "finite", id="nan-count"),
        pytest.param([1, 2, INF], [1, float("inf"), 3], "cumulative_counts[1]", "finite", id="infinite-count"),
        pytest.param([1, 2, INF], [1, -2, 3], "cumulative_counts[1]", ">= 0", id="negative-count"),
        pytest.param([1, 5, 5, INF], [1, 2, 2, 3], "bounds", "duplicate le bound 5", id="duplicate-bound"),
        pytest.param(["+Inf", 1, "inf"], [3, 1, 3], "bounds", "duplicate le bound +Inf", id="duplicate-inf"),
        pytest.param([1, float("nan")], [1, 2], "bounds", "NaN", id="nan-bound"),
        pytest.param([-1, 2], [1, 2], "bounds", ">= 0", id="negative-bound"),
        pytest.param(["1", "two"], [1, 2], "bounds[1]", "not a number", id="bad-bound"),
        pytest.param([1, 2], [0, 0], "cumulative_counts", "all buckets are empty", id="all-empty"),
        pytest.param([1, 2], [1], "cumulative_counts", "2 bounds", id="length-mismatch"),
        pytest.param([], [], "bounds", "no buckets", id="no-buckets"),
    ],
)
def test_bad_buckets_are_named(bounds: list[object], counts: list[float], field: str, needle: str) -> None:
    with pytest.raises(InputError) as info:
        buckets_from_cumulative(bounds, counts, max_model_len=100)  # type: ignore[arg-type]
    assert info.value.field == field
    assert needle in str(info.value)


@pytest.mark.parametrize("mml", [0, -5, float("nan"), float("inf")])
def test_max_model_len_must_be_positive(mml: float) -> None:
    with pytest.raises(InputError) as info:
        buckets_from_cumulative([1, INF], [1, 2], max_model_len=mml)
    assert info.value.field == "max_model_len"


@pytest.mark.parametrize(
    ("counts", "ok"),
    [
        pytest.param([500.0, 499.0, 1000.0], True, id="one-request"),
        pytest.param([500.0, 489.5, 1000.0], True, id="one-plus-one-percent"),
        pytest.param([500.0, 488.5, 1000.0], False, id="beyond-skew"),
        pytest.param([500.0, 520.0, 480.0], False, id="inf-below-skew"),
    ],
)
def test_scrape_skew_is_repaired_and_larger_dips_refused(counts: list[float], ok: bool) -> None:
    """A dip of at most SKEW_REQUESTS + SKEW_FRACTION x the window's requests is skew (running max); more is not."""
    tol = SKEW_REQUESTS + SKEW_FRACTION * max(counts)
    assert tol == pytest.approx(11.0 if max(counts) == 1000 else 6.2)
    if ok:
        b = buckets_from_cumulative([1, 2, INF], counts, max_model_len=10)
        assert b.counts.tolist() == [500.0, 0.0, 500.0]
    else:
        with pytest.raises(InputError, match="scrape skew explains"):
            buckets_from_cumulative([1, 2, INF], counts, max_model_len=10)


def test_bounds_above_max_model_len_are_capped() -> None:
    b = buckets_from_cumulative([1, 200, INF], [1, 2, 3], max_model_len=100)
    assert b.lower.tolist() == [0, 1, 100] and b.upper.tolist() == [1, 100, 100]
    s = bucket_samples(b)
    assert s.max() == 100 and math.isclose(float(s.weights[s.values == 100].sum()) * 3, 1 + 1 / 99, rel_tol=0.2)


def test_without_inf_bucket_only_counted_requests_are_used() -> None:
    b = buckets_from_cumulative([1, 2, 5], [0, 3, 3], max_model_len=100)
    assert not b.open_top and b.total == 3
    s = bucket_samples(b)
    assert s.values.tolist() == [2.0] and s.observations == 3


# ---- within-bucket models ------------------------------------------------------------------------------------

LAYOUTS = {"vllm": vllm_buckets, "powers-of-4": powers_of_4_buckets, "kvplan": kvplan_buckets}
KINDS = ["lognormal", "bimodal", "spike-at-cap", "uniform"]


def _read_back(kind: str, layout: str, model: str, top: int, n: int, seed: int) -> tuple[np.ndarray, Buckets, Samples]:
    """Synthetic requests, their bucket counts in ``layout`` and the samples ``model`` reads back."""
    raw = _synthetic(kind, n, seed, top)
    b = bin_lengths(raw, LAYOUTS[layout](top), max_model_len=top)
    return raw, b, bucket_samples(b, model)  # type: ignore[arg-type]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("kind", KINDS)
def test_models_keep_every_bucket_count(model: str, layout: str, kind: str) -> None:
    top = 2048
    raw, b, s = _read_back(kind, layout, model, top, 2000, 7)
    assert s.observations == raw.size
    np.testing.assert_allclose(_mass_per_bucket(s.values, s.weights, b.lower, b.upper), b.counts / b.total,
                               atol=1e-12)
    assert (s.values == np.round(s.values)).all(), "bucket edges are whole tokens, so samples are too"
    assert s.values.min() >= 1 and s.values.max() <= top


@pytest.mark.parametrize("model", [m for m in MODELS if m != "upper"])
def test_one_token_buckets_are_exact(model: str) -> None:
    """kvplan's layout has one-token buckets up to 10 tokens: lengths there are recovered exactly."""
    raw = _synthetic("lognormal", 500, 3, 2048)
    raw = raw[raw <= 10] if (raw <= 10).sum() > 20 else np.arange(1, 11, dtype=float).repeat(5)
    b = bin_lengths(raw, kvplan_buckets(2048), max_model_len=2048)
    s = bucket_samples(b, model)  # type: ignore[arg-type]
    assert wasserstein_distance(s.values, raw, s.weights) < 1e-12


@pytest.mark.parametrize("model", ["spline", "log-spline"])
def test_spline_shape_is_a_cdf_through_every_cumulative_count(model: str) -> None:
    raw = _synthetic("bimodal", 3000, 11, 4096)
    b = bin_lengths(raw, vllm_buckets(4096), max_model_len=4096)
    g = shape(b, model)  # type: ignore[arg-type]
    x = np.linspace(0, 4096, 20001)
    assert (np.diff(g(x)) >= -1e-9 * b.total).all()
    edges = np.concatenate(([0.0], b.upper))
    np.testing.assert_allclose(g(edges), np.concatenate(([0.0], np.cumsum(b.counts))), rtol=1e-12, atol=1e-9)


def test_linear_model_is_uniform_over_whole_tokens() -> None:
    b = buckets_from_cumulative([10, 20, INF], [0, 10, 10], max_model_len=100)
    s = bucket_samples(b, "linear")
    assert s.values.tolist() == list(map(float, range(11, 21)))
    np.testing.assert_allclose(s.weights, 0.1)


def test_slices_of_a_wide_bucket() -> None:
    e = slice_edges(1000, 2000, 128)
    assert e[0] == 1000 and e[-1] == 2000 and (np.diff(e) > 0).all() and e.size == 129
    assert (e == np.round(e)).all()
    assert slice_edges(5, 10, 128).tolist() == [5, 6, 7, 8, 9, 10]
    f = slice_edges(0.5, 1.5, 4)
    assert f.tolist() == [0.5, 0.75, 1.0, 1.25, 1.5]


@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_quantiles_stay_in_the_true_quantile_bucket(q: float) -> None:
    raw = _synthetic("lognormal", 5000, 5, 4096)
    bounds = vllm_buckets(4096)
    b = bin_lengths(raw, bounds, max_model_len=4096)
    true = float(np.quantile(raw, q, method="inverted_cdf"))
    j = int(np.searchsorted(b.upper, true, side="left"))
    for model in MODELS:
        est = bucket_samples(b, model).quantile(q)  # type: ignore[arg-type]
        assert b.lower[j] < est <= b.upper[j], (model, est, true)


# ---- the binning bound against brute force -------------------------------------------------------------------


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("kind", KINDS)
def test_bound_holds_against_scipy(model: str, layout: str, kind: str) -> None:
    raw, b, s = _read_back(kind, layout, model, 3000, 1500, 13)
    assert s.binning is not None
    w1 = wasserstein_distance(s.values, raw, s.weights)
    assert w1 <= s.binning.both + 1e-9
    assert _one_sided_up(s.values, s.weights, raw) <= s.binning.up + 1e-9
    assert max(s.binning.up, s.binning.down) <= s.binning.both + 1e-9 <= s.binning.up + s.binning.down + 2e-9


def _bucket_means(values: np.ndarray, weights: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    out = np.zeros(lower.size)
    for j, (lo, hi) in enumerate(zip(lower, upper)):
        inside = (values > lo) & (values <= hi)
        if weights[inside].sum() > 0:
            out[j] = float(np.dot(values[inside], weights[inside]) / weights[inside].sum())
    return out


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("layout", ["vllm", "powers-of-4"])
def test_bound_is_attained_by_placing_requests_at_bucket_ends(model: str, layout: str) -> None:
    """Requests all at their buckets' upper ends reach ``up``; all at the lowest whole token ``down``; each bucket
    at its farther end ``both``: the bound is exact, not loose."""
    _raw, b, s = _read_back("lognormal", layout, model, 3000, 1500, 17)
    assert s.binning is not None
    a = support_floor(b)
    n = b.counts.astype(int)
    at_hi = np.repeat(b.upper, n)
    at_lo = np.repeat(a, n)
    assert wasserstein_distance(s.values, at_hi, s.weights) == pytest.approx(s.binning.up, rel=1e-9, abs=1e-9)
    assert wasserstein_distance(s.values, at_lo, s.weights) == pytest.approx(s.binning.down, rel=1e-9, abs=1e-9)
    m = _bucket_means(s.values, s.weights, b.lower, b.upper)
    far = np.where(b.upper - m >= m - a, b.upper, a)
    worst = np.repeat(far, n)
    assert wasserstein_distance(s.values, worst, s.weights) == pytest.approx(s.binning.both, rel=1e-9, abs=1e-9)


def test_open_bucket_terms_are_the_last_buckets_share() -> None:
    top = 2100
    raw = np.concatenate([np.full(90, 100.0), np.full(10, 2090.0)])
    b = bin_lengths(raw, vllm_buckets(2000), max_model_len=top)  # +Inf is (2000, 2100]
    s = bucket_samples(b, "log-linear")
    assert s.binning is not None
    # +Inf bucket: share 0.1 over the whole tokens 2001..2100; a_b = 2001.
    inf = s.values > 2000
    mean = float(np.dot(s.values[inf], s.weights[inf]) / s.weights[inf].sum())
    assert s.weights[inf].sum() == pytest.approx(0.1) and 2050 < mean < 2051
    assert s.binning.open_up == pytest.approx(0.1 * (top - mean))
    assert s.binning.open_down == pytest.approx(0.1 * (mean - 2001))
    assert s.binning.open_both == pytest.approx(max(s.binning.open_up, s.binning.open_down))
    closed = bucket_samples(bin_lengths(raw, kvplan_buckets(top), max_model_len=top), "linear")  # ends at top
    assert closed.binning is not None and closed.binning.open_both == 0.0 and closed.binning.both > 0


def test_upper_placement_can_only_be_too_high() -> None:
    raw = _synthetic("lognormal", 800, 2, 2048)
    s = bucket_samples(bin_lengths(raw, vllm_buckets(2048), max_model_len=2048), "upper")
    assert s.binning is not None and s.binning.up == 0.0 and s.binning.down > 0
    assert wasserstein_distance(s.values, raw, s.weights) <= s.binning.down + 1e-9
