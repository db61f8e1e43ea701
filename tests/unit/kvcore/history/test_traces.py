"""Trace CSV and length-file loaders (errors name file, line and column) and the conversion of Prometheus
cumulative histogram buckets into weighted samples, on vLLM's 1-2-5 bucket layout."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvcore.errors import InputError
from kvcore.history.traces import build_1_2_5_buckets, histogram_to_samples, load_lengths, load_trace

# vLLM's request_generation_tokens buckets for max_model_len = 4096 (vllm/v1/metrics/loggers.py,
# build_1_2_5_buckets(max_model_len); its docstring example is build_1_2_5_buckets(100) = [1, 2, 5, 10, 20, 50, 100]).
VLLM_4096 = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000]


def _write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_bucket_layout_matches_vllm() -> None:
    assert build_1_2_5_buckets(100) == [1, 2, 5, 10, 20, 50, 100]
    assert build_1_2_5_buckets(4096) == VLLM_4096


def _cumulative(lengths: np.ndarray, bounds: list[float]) -> list[float]:
    """What Prometheus reports: for each le, how many observations are <= le."""
    return [float(np.count_nonzero(lengths <= b)) for b in bounds]


def test_histogram_on_vllm_layout() -> None:
    rng = np.random.default_rng(3)
    lengths = np.minimum(np.floor(rng.lognormal(5.0, 1.2, 5000)) + 1, 4096)
    bounds: list[float] = [*map(float, VLLM_4096), float("inf")]
    counts = _cumulative(lengths, bounds)
    s = histogram_to_samples([*map(str, VLLM_4096), "+Inf"], counts, max_model_len=4096)
    # Each bucket keeps its share of the requests; +Inf is closed at max_model_len.
    edges = [0.0, *map(float, VLLM_4096), 4096.0]
    per_bucket = np.diff([0.0, *counts]) / lengths.size
    got = [float(s.weights[(s.values > lo) & (s.values <= hi)].sum()) for lo, hi in zip(edges[:-1], edges[1:])]
    assert got == pytest.approx(per_bucket.tolist(), abs=1e-12)
    assert s.observations == lengths.size and s.binning is not None and s.binning.both > 0
    # Inside the buckets the samples follow the lengths far closer than the buckets' upper bounds did.
    upper = [float(np.quantile(lengths, q, method="inverted_cdf")) for q in (0.5, 0.9, 0.99)]
    for q, true in zip((0.5, 0.9, 0.99), upper):
        hi = min(b for b in edges[1:] if b >= true)
        assert abs(s.quantile(q) - true) < 0.5 * abs(hi - true) + 1.0


@pytest.mark.parametrize(
    ("bounds", "counts", "edges", "shares"),
    [
        pytest.param(["5", "1", "+Inf", "2"], [6, 1, 10, 3], [0, 1, 2, 5, 100], [1, 2, 3, 4], id="unsorted-bounds"),
        pytest.param([1, 2, 5], [0, 3, 3], [1, 2], [1], id="no-inf-bucket"),
        pytest.param([1.0, 2.0, "inf"], [0.5, 1.5, 2.0], [0, 1, 2, 100], [0.5, 1, 0.5], id="fractional-increase"),
    ],
)
def test_histogram_steps(bounds: list[object], counts: list[float], edges: list[float], shares: list[float]) -> None:
    s = histogram_to_samples(bounds, counts, max_model_len=100)  # type: ignore[arg-type]
    w = np.array(shares, dtype=float)
    got = [float(s.weights[(s.values > lo) & (s.values <= hi)].sum()) for lo, hi in zip(edges[:-1], edges[1:])]
    assert got == pytest.approx((w / w.sum()).tolist())
    assert s.observations == pytest.approx(max(counts))


def test_histogram_bound_above_max_model_len() -> None:
    s = histogram_to_samples([1, 200, "+Inf"], [1, 2, 3], max_model_len=100)
    assert s.max() == 100 and float(s.weights[s.values <= 1].sum()) == pytest.approx(1 / 3)
    assert float(s.weights[s.values > 1].sum()) == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    ("bounds", "counts", "field"),
    [
        pytest.param([1, 2], [0, 0], "cumulative_counts", id="all-empty"),
        pytest.param([1, 2], [1], "cumulative_counts", id="length-mismatch"),
        pytest.param(["x", 2], [1, 2], "bounds[0]", id="bad-bound"),
        pytest.param([1, 1], [1, 2], "bounds", id="duplicate-bound"),
        pytest.param([1, 2], [1, float("nan")], "cumulative_counts[1]", id="nan-count"),
        pytest.param([], [], "bounds", id="no-buckets"),
        pytest.param([1, 2, 5, "+Inf"], [5, 1, 6, 6], "cumulative_counts[1]", id="decreasing-count"),
        pytest.param([1, 2, "+Inf"], [1, 9, 5], "cumulative_counts[2]", id="inf-below-last-finite"),
    ],
)
def test_histogram_rejects(bounds: list[object], counts: list[float], field: str) -> None:
    with pytest.raises(InputError) as info:
        histogram_to_samples(bounds, counts, max_model_len=100)  # type: ignore[arg-type]
    assert info.value.field == field


def test_histogram_rejects_unknown_model() -> None:
    with pytest.raises(InputError, match="unknown within-bucket model"):
        histogram_to_samples([1, "+Inf"], [1, 2], max_model_len=100, model="midpoint")


def test_load_trace_with_and_without_timestamps(tmp_path: Path) -> None:
    t = load_trace(_write(tmp_path, "arrival_s,input_tokens,output_tokens\n0.0,10,5\n1.5,20,7\n"))
    assert t.has_timestamps and t.arrival_s is not None
    assert t.arrival_s.tolist() == [0.0, 1.5] and t.output_tokens.tolist() == [5, 7]
    u = load_trace(_write(tmp_path, "arrival_s,input_tokens,output_tokens\n,10,5\n,20,7\n", "sg.csv"))
    assert not u.has_timestamps and u.arrival_s is None and len(u) == 2


def test_load_shared_traces(traces_dir: Path) -> None:
    for name, stamped in (("azure2023_conv.csv", True), ("sharegpt_llama2tok_8k.csv", False)):
        t = load_trace(traces_dir / name)
        assert t.has_timestamps is stamped
        assert len(t) > 1000 and (t.output_tokens >= 0).all()


HEADER = "arrival_s,input_tokens,output_tokens\n"


@pytest.mark.parametrize(
    ("text", "field", "needle"),
    [
        pytest.param("", "t.csv", "empty", id="empty-file"),
        pytest.param(HEADER, "t.csv", "empty", id="header-only"),
        pytest.param("arrival_s,input_tokens\n0,1\n", "t.csv line 1", "output_tokens", id="missing-column"),
        pytest.param(HEADER + "0,1,2\n1,1,-3\n", "t.csv line 3 output_tokens", "negative", id="negative-output"),
        pytest.param(HEADER + "0,nan,2\n", "t.csv line 2 input_tokens", "not finite", id="nan-input"),
        pytest.param(HEADER + "0,1,abc\n", "t.csv line 2 output_tokens", "not a number", id="text-output"),
        pytest.param(HEADER + "0,1,2\n5,1,2\n4,1,2\n", "t.csv line 4 arrival_s", "backwards", id="non-monotonic"),
        pytest.param(HEADER + "0,1,2\n,1,2\n", "t.csv line 3 arrival_s", "some lines", id="mixed-timestamps"),
        pytest.param(HEADER + "0,1\n", "t.csv line 2", "fields", id="short-row"),
    ],
)
def test_load_trace_errors(tmp_path: Path, text: str, field: str, needle: str) -> None:
    with pytest.raises(InputError) as info:
        load_trace(_write(tmp_path, text))
    assert info.value.field == field
    assert needle in str(info.value)


@pytest.mark.parametrize(
    ("text", "column", "expected"),
    [
        pytest.param("5\n7\n\n9\n", "output_tokens", [5, 7, 9], id="one-column-no-header"),
        pytest.param("len\n5\n7\n", "output_tokens", [5, 7], id="one-column-header"),
        pytest.param(HEADER + ",3,5\n,4,6\n", "input_tokens", [3, 4], id="csv-column"),
    ],
)
def test_load_lengths(tmp_path: Path, text: str, column: str, expected: list[float]) -> None:
    assert load_lengths(_write(tmp_path, text), column).tolist() == expected
