"""Integration tests of the Prometheus tier: 6 h of vLLM-style histogram history backfilled with promtool from real
traces into Debian's Prometheus 2.42, read back with prometheus-api-client. Expected bucket counts are computed
here from the CSV files directly (not with kvplan_dev's writer): exact values at given instants, ``+Inf`` equal to
``_count``, a counter reset (``resets()`` and the post-reset values), and both ``vllm:`` and ``vllm_`` names."""

from __future__ import annotations

import csv
import math
import time
from pathlib import Path

import pytest
from prometheus_api_client import PrometheusConnect

from kvplan_dev.openmetrics import VLLM_COLON, VLLM_UNDERSCORE, Window
from kvplan_dev.prom import LocalPrometheus, series_from_trace

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CONV = REPO / "kvcore" / "data" / "traces" / "azure2023_conv.csv"
HOURS = 6.0
STEP_S = 15.0
STRETCH = 6.0
"""The ~1 h Azure traces are stretched 6x (compression 1/6) so they fill the 6 h window."""
RESET_OFFSET_S = 3 * 3600.0 + 7.5
"""The "chat" server restarts 3 h (plus half a scrape) into the window."""
LES = ["1.0", "2.0", "5.0", "10.0", "20.0", "50.0", "100.0", "200.0", "500.0", "1000.0", "2000.0", "5000.0", "+Inf"]
"""vLLM's 1-2-5 buckets for max_model_len 8192, written by hand."""


def _load(path: Path) -> list[tuple[float, int]]:
    with path.open(newline="") as handle:
        return [(float(row["arrival_s"]), int(row["output_tokens"])) for row in csv.DictReader(handle)]


def _expected(rows: list[tuple[float, int]], start: float, at: float, since: float | None) -> dict[str, float]:
    """Cumulative bucket counts, _count and _sum at wall time ``at`` for arrivals in (since, at] (or [start, at])."""
    first = rows[0][0]
    values = [v for arrival, v in rows
              if (wall := start + (arrival - first) * STRETCH) <= at and (since is None or wall > since)]
    out = {le: float(sum(1 for v in values if v <= (math.inf if le == "+Inf" else float(le)))) for le in LES}
    out["_count"] = float(len(values))
    out["_sum"] = float(sum(values))
    return out


def _scrape_at_or_before(window: Window, t: float) -> float:
    return max(s for s in window.scrape_times() if s <= t)


def _by_le(result: list[dict]) -> dict[str, float]:
    return {item["metric"]["le"]: float(item["value"][1]) for item in result}


@pytest.fixture
def backfilled(prometheus: LocalPrometheus, traces_dir: Path) -> tuple[LocalPrometheus, Window, dict[str, Path]]:
    """chat: bundled Azure conv trace as ``vllm:`` with a reset; code: shared Azure code trace as ``vllm_``."""
    window = Window(end_unix_s=math.floor(time.time()) - 120.0, duration_s=HOURS * 3600.0, step_s=STEP_S)
    traces = {"chat": CONV, "code": traces_dir / "azure2023_code.csv"}
    series = [
        series_from_trace(traces["chat"], labels={"model_name": "chat", "engine": "0"}, window=window,
                          compression=1 / STRETCH, reset_at_s=(RESET_OFFSET_S,), metric=VLLM_COLON),
        series_from_trace(traces["code"], labels={"model_name": "code", "engine": "0"}, window=window,
                          compression=1 / STRETCH, metric=VLLM_UNDERSCORE),
    ]
    stats = prometheus.backfill(series, window)  # its speed is measured in docs/testing.md, not asserted here
    assert [s.dropped for s in stats] == [0, 0]  # both traces fit in 6 h when stretched 6x
    return prometheus, window, traces


def test_bucket_counts_are_exact_after_a_counter_reset(backfilled: tuple[LocalPrometheus, Window, dict[str, Path]]) -> None:
    server, window, traces = backfilled
    prom = PrometheusConnect(url=server.url, disable_ssl=True)
    rows = _load(traces["chat"])
    reset_at = window.start_unix_s + RESET_OFFSET_S
    before = _scrape_at_or_before(window, reset_at)
    cases = {
        "one hour in": (window.start_unix_s + 3600.0, None),
        "last scrape before the reset": (before, None),
        "end of window, after the reset": (window.end_unix_s, reset_at),
    }
    for label, (at, since) in cases.items():
        result = prom.custom_query(f'{VLLM_COLON}_bucket{{model_name="chat"}}', params={"time": at})
        got = _by_le(result)
        expected = _expected(rows, window.start_unix_s, at, since)
        assert sorted(got, key=LES.index) == LES, label
        assert got == {le: expected[le] for le in LES}, label
        count = prom.custom_query(f'{VLLM_COLON}_count{{model_name="chat"}}', params={"time": at})
        total = prom.custom_query(f'{VLLM_COLON}_sum{{model_name="chat"}}', params={"time": at})
        assert float(count[0]["value"][1]) == expected["_count"] == got["+Inf"], label
        assert float(total[0]["value"][1]) == expected["_sum"], label
    assert expected["_count"] > 0 and _expected(rows, window.start_unix_s, before, None)["_count"] > expected["_count"]
    resets = prom.custom_query(f'resets({VLLM_COLON}_count{{model_name="chat"}}[{int(HOURS) + 1}h])',
                               params={"time": window.end_unix_s})
    assert float(resets[0]["value"][1]) == 1.0


def test_increase_over_the_window_sees_through_the_reset(
    backfilled: tuple[LocalPrometheus, Window, dict[str, Path]]
) -> None:
    server, window, traces = backfilled
    prom = PrometheusConnect(url=server.url, disable_ssl=True)
    rows = _load(traces["chat"])
    reset_at = window.start_unix_s + RESET_OFFSET_S
    before = _scrape_at_or_before(window, reset_at)
    # What increase() should count: everything scraped before the restart plus everything after it.
    counted = (_expected(rows, window.start_unix_s, before, None)["+Inf"]
               + _expected(rows, window.start_unix_s, window.end_unix_s, reset_at)["+Inf"])
    result = prom.custom_query(f'increase({VLLM_COLON}_bucket{{model_name="chat",le="+Inf"}}[{int(HOURS)}h])',
                               params={"time": window.end_unix_s})
    got = float(result[0]["value"][1])
    # increase() extrapolates to the range edges; over 1440 scrapes that is well under 1 %.
    assert got == pytest.approx(counted, rel=0.01)
    assert got > _expected(rows, window.start_unix_s, window.end_unix_s, reset_at)["+Inf"] * 1.5


def test_escaped_vllm_underscore_name_and_both_names_by_regex(
    backfilled: tuple[LocalPrometheus, Window, dict[str, Path]]
) -> None:
    server, window, traces = backfilled
    prom = PrometheusConnect(url=server.url, disable_ssl=True)
    at = window.end_unix_s
    code = _by_le(prom.custom_query(f'{VLLM_UNDERSCORE}_bucket{{model_name="code"}}', params={"time": at}))
    assert code == {le: v for le, v in _expected(_load(traces["code"]), window.start_unix_s, at, None).items()
                    if le in LES}
    assert code["+Inf"] == 8819.0  # every request of the code trace, no reset on this series
    assert prom.custom_query(f'{VLLM_COLON}_bucket{{model_name="code"}}', params={"time": at}) == []
    both = prom.custom_query('{__name__=~"vllm[:_]request_generation_tokens_count"}', params={"time": at})
    assert sorted((s["metric"]["__name__"], s["metric"]["model_name"]) for s in both) == [
        (f"{VLLM_COLON}_count", "chat"), (f"{VLLM_UNDERSCORE}_count", "code")]
    resets = prom.custom_query(f'resets({VLLM_UNDERSCORE}_count[{int(HOURS) + 1}h])', params={"time": at})
    assert float(resets[0]["value"][1]) == 0.0


def test_history_starts_at_the_window_start(backfilled: tuple[LocalPrometheus, Window, dict[str, Path]]) -> None:
    server, window, _ = backfilled
    prom = PrometheusConnect(url=server.url, disable_ssl=True)
    earlier = prom.custom_query(f'{VLLM_COLON}_count', params={"time": window.start_unix_s - 600.0})
    assert earlier == []
    first = prom.custom_query(f'{VLLM_COLON}_count{{model_name="chat"}}', params={"time": window.start_unix_s})
    assert float(first[0]["value"][1]) == 1.0  # the first request arrives at trace time 0
