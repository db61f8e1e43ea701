"""Samples validation, weighted statistics against numpy, History pooling, and the radius policies."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from kvcore.errors import InputError
from kvcore.reservation.radius import RULES, RadiusChoice, RadiusPolicy, choose_radius, register_rule
from kvcore.history.samples import History, Samples, weighted_mean, weighted_quantile, weighted_std


@pytest.mark.parametrize(
    ("values", "weights", "field", "needle"),
    [
        pytest.param([], None, "samples", "empty", id="empty"),
        pytest.param([1.0, float("nan")], None, "samples[1]", "not finite", id="nan"),
        pytest.param([1.0, float("inf")], None, "samples[1]", "not finite", id="inf"),
        pytest.param([3.0, -1.0], None, "samples[1]", "negative", id="negative"),
        pytest.param([[1.0, 2.0]], None, "samples", "one-dimensional", id="2d"),
        pytest.param(["a"], None, "samples", "not numeric", id="text"),
        pytest.param([1.0, 2.0], [0.0, 0.0], "samples.weights", "all weights are zero", id="zero-weights"),
        pytest.param([1.0, 2.0], [1.0, -1.0], "samples.weights[1]", "negative", id="negative-weight"),
        pytest.param([1.0, 2.0], [1.0], "samples.weights", "2 samples", id="weight-length"),
        pytest.param([1.0], [float("nan")], "samples.weights[0]", "not finite", id="nan-weight"),
    ],
)
def test_from_arrays_rejects(values: Any, weights: Any, field: str, needle: str) -> None:
    with pytest.raises(InputError) as info:
        Samples.from_arrays(values, weights)
    assert info.value.field == field
    assert needle in str(info.value)


def test_weights_normalised_and_frozen() -> None:
    s = Samples.from_arrays([1, 2, 3], [2, 2, 4])
    assert s.weights.sum() == pytest.approx(1.0)
    assert s.weights.tolist() == pytest.approx([0.25, 0.25, 0.5])
    with pytest.raises(ValueError):
        s.values[0] = 7.0
    with pytest.raises(AttributeError):
        s.values = np.zeros(3)  # type: ignore[misc]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=40),
    st.sampled_from([0.0, 0.1, 0.5, 0.9, 0.95, 0.99, 1.0, 1 / 3, 10 / 11]),
)
def test_uniform_quantile_matches_numpy_inverted_cdf(values: list[int], q: float) -> None:
    s = Samples.from_arrays(values)
    expected = float(np.quantile(np.array(values, dtype=float), q, method="inverted_cdf"))
    assert s.quantile(q) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 5)), min_size=1, max_size=20), st.floats(0.0, 1.0))
def test_weighted_quantile_equals_repeated_samples(pairs: list[tuple[int, int]], q: float) -> None:
    # Integer weights: the weighted quantile equals the plain quantile of the samples repeated weight times.
    if sum(w for _, w in pairs) == 0:
        pairs = [(pairs[0][0], 1)] + pairs[1:]
    values = np.array([v for v, _ in pairs], dtype=float)
    weights = np.array([w for _, w in pairs], dtype=float)
    repeated = np.repeat(values, weights.astype(int))
    got = weighted_quantile(values, weights, q)
    k = max(0, int(np.ceil(q * repeated.size - 1e-9)) - 1)
    assert got == float(np.sort(repeated)[k])
    assert weighted_mean(values, weights) == pytest.approx(repeated.mean())
    assert weighted_std(values, weights) == pytest.approx(repeated.std(), abs=1e-9)


def test_history_pools_windows_with_equal_shares() -> None:
    old = Samples.from_arrays([1.0, 1.0, 1.0, 1.0])
    new = Samples.from_arrays([9.0])
    pooled = History.of([old, new]).pooled()
    assert pooled.mean() == pytest.approx(5.0)
    assert History.of(old).pooled() is old
    with pytest.raises(InputError):
        History(())


@pytest.mark.parametrize(
    ("policy", "eps", "rule"),
    [
        pytest.param(RadiusPolicy(kind="absolute", eps=12.5), 12.5, "absolute", id="absolute"),
        pytest.param(RadiusPolicy(kind="fraction", frac=0.5), 0.5 * 25.0, "fraction", id="fraction"),
        pytest.param(RadiusPolicy(kind="fraction", frac=0.15), 0.15 * 25.0, "fraction", id="paper-rule"),
    ],
)
def test_choose_radius(policy: RadiusPolicy, eps: float, rule: str) -> None:
    s = Samples.from_arrays([10.0, 20.0, 30.0, 40.0])
    choice = choose_radius(policy, s, lmax=100)
    assert choice.eps == pytest.approx(eps)
    assert choice.rule == rule
    assert choice.reason


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"kind": "absolute", "eps": -1.0}, id="negative-eps"),
        pytest.param({"kind": "fraction", "frac": -0.1}, id="negative-frac"),
        pytest.param({"kind": "bogus"}, id="unknown-kind"),
        pytest.param({"kind": "absolute", "radius": 3}, id="extra-key"),
    ],
)
def test_radius_policy_rejects(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        RadiusPolicy(**kwargs)


def test_rule_registry_is_extensible() -> None:
    seen: list[str] = []

    def constant(policy: RadiusPolicy, history: History, lmax: float, side: str) -> RadiusChoice:
        seen.append(side)
        return RadiusChoice(eps=lmax / 10, rule="absolute", reason="test rule")

    saved = RULES["absolute"]
    try:
        register_rule("absolute", constant)
        assert choose_radius(RadiusPolicy(kind="absolute"), Samples.from_arrays([1.0]), lmax=50).eps == 5.0
        choose_radius(RadiusPolicy(kind="absolute"), Samples.from_arrays([1.0]), lmax=50, cp=10.0, cw=1.0)
        assert seen == ["both", "up"]  # the rule is told which side the reservation is exposed on
    finally:
        register_rule("absolute", saved)
