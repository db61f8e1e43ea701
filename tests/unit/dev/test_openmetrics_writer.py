"""Unit tests of kvplan_dev.openmetrics: vLLM's 1-2-5 buckets, cumulative histogram lines, counter resets, the
time mapping and the OpenMetrics framing promtool needs (one # TYPE per family, # EOF last). Pure, no binaries."""

from __future__ import annotations

import io
import re

import pytest

from kvplan_dev.openmetrics import (
    VLLM_COLON, VLLM_UNDERSCORE, HistogramSeries, SeriesStats, Window, build_1_2_5_buckets, format_le,
    histogram_lines, write_openmetrics,
)

LINE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<labels>[^}]*)\} (?P<value>\S+) (?P<ts>\d+\.\d{3})$')


@pytest.mark.parametrize(
    ("max_value", "expected"),
    [
        pytest.param(1, [1], id="one"),
        pytest.param(100, [1, 2, 5, 10, 20, 50, 100], id="vllm-docstring-example"),
        pytest.param(8192, [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000], id="max-model-len-8192"),
        pytest.param(4, [1, 2], id="stops-before-5"),
    ],
)
def test_build_1_2_5_buckets(max_value: int, expected: list[int]) -> None:
    assert build_1_2_5_buckets(max_value) == expected


def test_build_1_2_5_buckets_rejects_zero() -> None:
    with pytest.raises(ValueError, match="max_value"):
        build_1_2_5_buckets(0)


@pytest.mark.parametrize(
    ("bound", "text"),
    [pytest.param(1.0, "1.0", id="one"), pytest.param(5000.0, "5000.0", id="5000"),
     pytest.param(float("inf"), "+Inf", id="inf")],
)
def test_format_le_matches_prometheus_client(bound: float, text: str) -> None:
    assert format_le(bound) == text


def _parse(lines: list[str]) -> dict[tuple[str, str, str], float]:
    """(name, le or '', timestamp) -> value."""
    out: dict[tuple[str, str, str], float] = {}
    for line in lines:
        match = LINE.match(line)
        assert match, f"not an OpenMetrics sample line: {line!r}"
        le = re.search(r'le="([^"]+)"', match["labels"])
        out[(match["name"], le.group(1) if le else "", match["ts"])] = float(match["value"])
    return out


WINDOW = Window(end_unix_s=1000.0, duration_s=100.0, step_s=10.0)


def _series(**kwargs: object) -> HistogramSeries:
    base: dict[str, object] = dict(labels={"model_name": "m"}, output_tokens=[1, 3, 7, 700, 9000],
                                   arrival_s=[0.0, 5.0, 25.0, 25.0, 55.0], buckets=(1.0, 2.0, 5.0, 10.0, 1000.0))
    base.update(kwargs)
    return HistogramSeries(**base)  # type: ignore[arg-type]


def test_cumulative_buckets_count_sum_and_inf() -> None:
    stats = SeriesStats()
    samples = _parse(list(histogram_lines(_series(), WINDOW, stats)))
    # Window 900..1000; arrivals at 900, 905, 925, 925, 955 (compression 1).
    at = {"900.000": [1, 1, 1, 1, 1, 1], "910.000": [1, 1, 2, 2, 2, 2], "930.000": [1, 1, 2, 3, 4, 4],
          "1000.000": [1, 1, 2, 3, 4, 5]}
    for ts, expected in at.items():
        got = [samples[(f"{VLLM_COLON}_bucket", le, ts)] for le in ("1.0", "2.0", "5.0", "10.0", "1000.0", "+Inf")]
        assert got == expected, ts
        assert samples[(f"{VLLM_COLON}_count", "", ts)] == expected[-1]
    assert samples[(f"{VLLM_COLON}_sum", "", "1000.000")] == 1 + 3 + 7 + 700 + 9000
    assert stats.kept == 5 and stats.dropped == 0 and stats.samples == 11 * 8
    assert stats.last_values["+Inf"] == 5 and stats.last_values["_sum"] == 9711


def test_counter_reset_drops_to_zero_and_loses_unscraped_requests() -> None:
    # Reset at wall offset 30 (t=930): arrivals up to 930 belong to the dead process.
    samples = _parse(list(histogram_lines(_series(reset_at_s=(30.0,)), WINDOW)))
    assert samples[(f"{VLLM_COLON}_count", "", "920.000")] == 2
    assert samples[(f"{VLLM_COLON}_count", "", "930.000")] == 0
    assert samples[(f"{VLLM_COLON}_count", "", "950.000")] == 0
    assert samples[(f"{VLLM_COLON}_count", "", "960.000")] == 1
    assert samples[(f"{VLLM_COLON}_bucket", "+Inf", "1000.000")] == 1
    assert samples[(f"{VLLM_COLON}_bucket", "1000.0", "1000.000")] == 0
    assert samples[(f"{VLLM_COLON}_sum", "", "1000.000")] == 9000


def test_compression_and_offset_map_trace_time_onto_the_window() -> None:
    stats = SeriesStats()
    # compression 0.5 stretches: trace 55 s -> wall +110 s, beyond the 100 s window: dropped.
    samples = _parse(list(histogram_lines(_series(compression=0.5, offset_s=0.0), WINDOW, stats)))
    assert stats.kept == 4 and stats.dropped == 1
    assert samples[(f"{VLLM_COLON}_count", "", "940.000")] == 2  # 900, 910
    assert samples[(f"{VLLM_COLON}_count", "", "950.000")] == 4  # + 950, 950
    stats2 = SeriesStats()
    list(histogram_lines(_series(offset_s=50.0), WINDOW, stats2))
    assert stats2.kept == 4 and stats2.dropped == 1  # 55 + 50 > 100


def test_write_openmetrics_framing_and_both_names() -> None:
    buffer = io.StringIO()
    series = [_series(), _series(labels={"model_name": "m2", "engine": "0"}, metric=VLLM_UNDERSCORE)]
    stats = write_openmetrics(buffer, series, WINDOW)
    text = buffer.getvalue()
    lines = text.splitlines()
    assert lines[-1] == "# EOF" and text.endswith("\n")
    assert lines.count(f"# TYPE {VLLM_COLON} histogram") == 1
    assert lines.count(f"# TYPE {VLLM_UNDERSCORE} histogram") == 1
    assert f'{VLLM_UNDERSCORE}_bucket{{engine="0",model_name="m2",le="+Inf"}} 5 1000.000' in lines
    assert len(stats) == 2 and all(s.kept == 5 for s in stats)
    # Every family's samples follow its own # TYPE line (promtool rejects samples of an undeclared family).
    underscore_at = lines.index(f"# TYPE {VLLM_UNDERSCORE} histogram")
    assert all(not line.startswith(VLLM_UNDERSCORE) for line in lines[:underscore_at])


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        pytest.param({"output_tokens": [1]}, "output_tokens/arrival_s", id="length-mismatch"),
        pytest.param({"compression": 0.0}, "compression", id="zero-compression"),
        pytest.param({"buckets": (2.0, 1.0)}, "buckets", id="unsorted-buckets"),
        pytest.param({"labels": {"le": "1"}}, "labels.le", id="reserved-le"),
    ],
)
def test_invalid_series_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=re.escape(field)):
        _series(**kwargs)


def test_window_rejects_non_positive_step() -> None:
    with pytest.raises(ValueError, match="step_s"):
        Window(end_unix_s=0.0, duration_s=10.0, step_s=0.0)
