"""PromQL -> samples path (operator/history.py): the query text (both vllm: and vllm_ spellings, selector, window),
a recorded Prometheus range-query result (one series per ``le``, several sub-windows) -> History windows with the
right weights, empty windows dropped, scrape skew repaired but reversed buckets, NaN, infinite and absurd counts
refused with ``InvalidHistogram``, arrival-rate queries (scalar and vector; an empty result is ``NoRateData``, not
0 req/s; NaN/Inf/negative/absurd rates are ``InvalidRate``)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from kvplan_operator import conditions as C
from kvplan_operator.history import histogram_query, history_from_windows, observe_class, rate_value, windows_from_matrix
from kvplan_operator.prom import PromError, PrometheusUnavailable
from kvplan_operator.spec import parse_spec
from test_op_targets import SPEC  # type: ignore[import-not-found]

# Recorded shape of /api/v1/query_range for `sum by (le) (increase(...[3600s]))`, 3 steps (values are strings).
T = [1700000000, 1700003600, 1700007200]
MATRIX = [
    {"metric": {"le": "10.0"}, "values": [[T[0], "2"], [T[1], "0"], [T[2], "1"]]},
    {"metric": {"le": "100.0"}, "values": [[T[0], "6"], [T[1], "0"], [T[2], "4"]]},
    {"metric": {"le": "1000.0"}, "values": [[T[0], "10"], [T[1], "0"], [T[2], "5"]]},
    {"metric": {"le": "+Inf"}, "values": [[T[0], "12"], [T[1], "0"], [T[2], "5"]]},
]


def matrix(result) -> dict:
    return {"resultType": "matrix", "result": result}


def test_histogram_query_matches_both_spellings():
    q = histogram_query('model_name="chat"', 3600)
    assert q == ('sum by (le) (increase({__name__=~"vllm:request_generation_tokens_bucket|'
                 'vllm_request_generation_tokens_bucket", model_name="chat"}[3600s]))')
    assert histogram_query("", 60).endswith('_bucket"}[60s]))')


def _shares(window, edges):
    """Each bucket's share of a window: the within-bucket model (kvcore.binned_model) spreads a bucket's requests
    inside it, and keeps its count exactly."""
    return [float(window.weights[(window.values > lo) & (window.values <= hi)].sum())
            for lo, hi in zip(edges[:-1], edges[1:])]


def test_matrix_to_windows_to_history():
    rows = windows_from_matrix(matrix(MATRIX))
    assert [r[0] for r in rows] == [float(t) for t in T]
    assert rows[1][2] == [0.0, 0.0, 0.0, 0.0]
    hist, total = history_from_windows(rows, max_model_len=2048)
    assert hist is not None and len(hist.windows) == 2  # the empty middle window is dropped
    edges = [0, 10, 100, 1000, 2048]  # +Inf closed at max_model_len
    np.testing.assert_allclose(_shares(hist.windows[0], edges), np.array([2, 4, 4, 2]) / 12, atol=1e-12)
    np.testing.assert_allclose(_shares(hist.windows[1], edges), np.array([1, 3, 1, 0]) / 5, atol=1e-12)
    assert hist.windows[0].max() <= 2048 and hist.windows[1].max() <= 1000
    assert total == 17


def test_non_monotone_counts_use_running_max():
    rows = [(0.0, ["+Inf", "10", "100"], [5.0, 3.0, 2.0])]  # scrape skew: le=100 dipped below le=10
    hist, total = history_from_windows(rows, max_model_len=500)
    assert hist is not None
    np.testing.assert_allclose(_shares(hist.windows[0], [0, 10, 100, 500]), [3 / 5, 0, 2 / 5], atol=1e-12)


def test_scrape_skew_within_tolerance_is_repaired():
    """A dip of one request (scrape skew between le series) is repaired by the running max, not refused."""
    skew = [{"metric": {"le": "10"}, "values": [[T[0], "50"]]}, {"metric": {"le": "100"}, "values": [[T[0], "49"]]},
            {"metric": {"le": "+Inf"}, "values": [[T[0], "80"]]}]
    rows = windows_from_matrix(matrix(skew))
    hist, total = history_from_windows(rows, max_model_len=500)
    assert total == 80 and hist is not None
    np.testing.assert_allclose(_shares(hist.windows[0], [0, 10, 100, 500]), [50 / 80, 0, 30 / 80], atol=1e-12)


def _one_window(counts: dict[str, str]) -> dict:
    return matrix([{"metric": {"le": le}, "values": [[T[0], v]]} for le, v in counts.items()])


@pytest.mark.parametrize(
    ("counts", "reason", "needle"),
    [
        # every request would land in the lowest bucket: 2,048-token reservations became 10 (issue 12)
        pytest.param({"10": "120", "100": "40", "+Inf": "5"}, C.INVALID_HISTOGRAM, "reversed", id="reversed-buckets"),
        pytest.param({"10": "1", "100": "NaN", "+Inf": "5"}, C.INVALID_HISTOGRAM, "nan", id="nan-count"),
        pytest.param({"10": "1", "100": "2", "+Inf": "+Inf"}, C.INVALID_HISTOGRAM, "inf", id="inf-count"),
        pytest.param({"10": "1", "100": "2", "+Inf": "1e308"}, C.INVALID_HISTOGRAM, "1e+308", id="1e308-count"),
        pytest.param({"10": "-3", "+Inf": "5"}, C.INVALID_HISTOGRAM, "-3", id="negative-count"),
        pytest.param({"ten": "1", "+Inf": "5"}, C.INVALID_HISTOGRAM, "le='ten'", id="bad-le"),
        pytest.param({"-10": "1", "+Inf": "5"}, C.INVALID_HISTOGRAM, "le=-10", id="negative-le"),
        pytest.param({"10": "many", "+Inf": "5"}, C.PROMETHEUS_BAD_RESPONSE, "not a number", id="non-numeric"),
    ],
)
def test_doubtful_histograms_are_refused_with_a_reason(counts, reason, needle):
    with pytest.raises(PromError) as info:
        windows_from_matrix(_one_window(counts), what="class chat")
    assert info.value.reason == reason
    assert needle in str(info.value).lower() and "class chat" in str(info.value)


def test_wrong_result_type_is_a_bad_response():
    with pytest.raises(PromError) as info:
        windows_from_matrix({"resultType": "vector", "result": []})
    assert info.value.reason == C.PROMETHEUS_BAD_RESPONSE


def test_no_data_gives_no_history():
    assert history_from_windows(windows_from_matrix(matrix([])), max_model_len=10) == (None, 0.0)


@pytest.mark.parametrize(
    ("result", "value"),
    [
        pytest.param({"resultType": "scalar", "result": [1, "2.5"]}, 2.5, id="scalar"),
        pytest.param({"resultType": "vector", "result": [{"metric": {}, "value": [1, "1.5"]},
                                                         {"metric": {"x": "b"}, "value": [1, "0.5"]}]}, 2.0, id="vector-sum"),
        pytest.param({"resultType": "vector", "result": [{"metric": {}, "value": [1, "0"]}]}, 0.0, id="zero-sample"),
    ],
)
def test_rate_value(result, value):
    assert rate_value(result) == value


@pytest.mark.parametrize(
    ("result", "reason"),
    [
        pytest.param({"resultType": "vector", "result": []}, C.NO_RATE_DATA, id="empty-is-not-zero"),
        pytest.param({"resultType": "scalar", "result": [1, "NaN"]}, C.INVALID_RATE, id="nan"),
        pytest.param({"resultType": "vector", "result": [{"value": [1, "+Inf"]}]}, C.INVALID_RATE, id="inf"),
        pytest.param({"resultType": "vector", "result": [{"value": [1, "1e308"]}]}, C.INVALID_RATE, id="1e308"),
        pytest.param({"resultType": "vector", "result": [{"value": [1, "-2"]}]}, C.INVALID_RATE, id="negative"),
        pytest.param({"resultType": "matrix", "result": []}, C.PROMETHEUS_BAD_RESPONSE, id="matrix"),
        pytest.param({"resultType": "vector", "result": [{"value": "x"}]}, C.PROMETHEUS_BAD_RESPONSE, id="shape"),
    ],
)
def test_bad_rates_are_refused_with_a_reason(result, reason):
    with pytest.raises(PromError) as info:
        rate_value(result)
    assert info.value.reason == reason


class RecordedProm:
    """Returns recorded results; records the queries it was asked."""

    def __init__(self, matrix=MATRIX, rate=0.7, fail=False):
        self.matrix, self.rate, self.fail = matrix, rate, fail
        self.calls: list[tuple] = []

    def query(self, promql, *, at=None):
        self.calls.append(("query", promql, at))
        if self.fail:
            raise PrometheusUnavailable("down")
        return {"resultType": "vector", "result": [{"metric": {}, "value": [at, str(self.rate)]}]}

    def query_range(self, promql, *, start, end, step):
        self.calls.append(("range", promql, start, end, step))
        if self.fail:
            raise PrometheusUnavailable("down")
        return {"resultType": "matrix", "result": copy.deepcopy(self.matrix)}


def test_observe_class_windows_and_rate_query():
    raw = copy.deepcopy(SPEC) | {"prometheus": {"url": "http://p", "lookback": "3h", "windows": 3}}
    del raw["classes"][1]["arrivalRate"]
    raw["classes"][1]["arrivalRateQuery"] = 'sum(rate(vllm:request_success_total{model_name="code"}[5m]))'
    spec = parse_spec(raw)
    prom = RecordedProm()
    obs = observe_class(prom, spec.classes[0], lookback_s=10800, windows=3, now=1700007200.0)
    kind, q, start, end, step = prom.calls[0]
    assert (kind, start, end, step) == ("range", 1700007200.0 - 7200, 1700007200.0, 3600)
    assert "[3600s]" in q and 'model_name="chat"' in q
    assert obs.arrival_rate == 2.0 and obs.windows == 2 and obs.requests == 17
    code = observe_class(prom, spec.classes[1], lookback_s=10800, windows=3, now=1700007200.0)
    assert code.arrival_rate == 0.7
    assert prom.calls[-1][0] == "query"
