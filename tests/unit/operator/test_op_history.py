"""Prometheus answers -> per-class observations (operator/observe/history.py): a recorded range-query result (one series per
``le`` and key, several sub-windows) -> History windows with the right weights, empty windows dropped, scrape skew
repaired but reversed buckets, a +Inf bucket below the last finite one, NaN, infinite and absurd counts refused with
``InvalidHistogram``, a class label with more than 256 values or more than 10,240 series refused with
``TooManySeries``, the arrival rate from the newest window's +Inf bucket (``NoRateData`` when the series stopped or
there is no +Inf), arrival-rate queries (scalar and vector; an empty result is ``NoRateData``, not 0 req/s;
NaN/Inf/negative/absurd rates are ``InvalidRate``). ``RecordedProm`` here is the fake Prometheus of the operator's
unit tests: it answers each source's query with recorded windows for every key the query asks."""

from __future__ import annotations

import copy
import re
import numpy as np
import pytest
from kvplan_operator import conditions as C
from kvplan_operator.observe.history import (KEY_LABEL, MAX_KEYS, MAX_SERIES, history_from_windows, newest_rate,
                                     rate_value, windows_by_key, windows_from_matrix)
from kvplan_operator.prom import PromError, PrometheusUnavailable
from op_history_world import (MATRIX, RecordedProm, T, _one_window, _shares, matrix, tagged)  # noqa: F401 - fixtures are found by name


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


@pytest.mark.parametrize(
    ("counts", "reason", "needle"),
    [
        # every request would land in the lowest bucket: 2,048-token reservations became 10 (issue 12)
        pytest.param({"10": "120", "100": "40", "+Inf": "5"}, C.INVALID_HISTOGRAM, "reversed", id="reversed-buckets"),
        pytest.param({"10": "1", "100": "NaN", "+Inf": "5"}, C.INVALID_HISTOGRAM, "nan", id="nan-count"),
        pytest.param({"10": "1", "100": "2", "+Inf": "+Inf"}, C.INVALID_HISTOGRAM, "inf", id="inf-count"),
        pytest.param({"10": "1", "100": "2", "+Inf": "1e308"}, C.INVALID_HISTOGRAM, "1e+308", id="1e308-count"),
        pytest.param({"10": "-3", "+Inf": "5"}, C.INVALID_HISTOGRAM, "-3", id="negative-count"),
        pytest.param({"ten": "1", "+Inf": "5"}, C.INVALID_HISTOGRAM, "bucket bound (le) is not a number",
                     id="bad-le"),
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


def test_windows_by_key_splits_keys_and_checks_each():
    data = matrix(tagged(MATRIX, "kvplan_class", "chat") + tagged(MATRIX[:2], "kvplan_class", "code"))
    rows = windows_by_key(data, "kvplan_class")
    assert set(rows) == {"chat", "code"}
    assert [r[0] for r in rows["chat"]] == [float(t) for t in T]
    assert rows["code"][0][1] == ["10.0", "100.0"]
    bad = tagged(MATRIX, "kvplan_class", "code")
    bad[1]["values"][0][1] = "NaN"
    with pytest.raises(PromError) as info:
        windows_by_key(matrix(tagged(MATRIX, "kvplan_class", "chat") + bad), "kvplan_class",
                       describe={"code": "class code-gen"})
    assert info.value.reason == C.INVALID_HISTOGRAM and "class code-gen" in str(info.value)


def test_inf_bucket_below_the_last_finite_one_is_named():
    with pytest.raises(PromError) as info:
        windows_from_matrix(_one_window({"10": "5", "100": "40", "+Inf": "12"}), what="class chat")
    assert info.value.reason == C.INVALID_HISTOGRAM
    assert "+Inf bucket (12) is lower than the last finite bucket le=100 (40)" in str(info.value)


@pytest.mark.slow
def test_a_class_label_with_thousands_of_values_is_refused():
    """A request id as class label: one series per request. Refused by name, not turned into thousands of plans."""
    result = [{"metric": {"le": "+Inf", "request_id": f"r{i}"}, "values": [[T[0], "1"]]} for i in range(MAX_KEYS + 1)]
    with pytest.raises(PromError) as info:
        windows_by_key(matrix(result), "request_id", what="source custom")
    assert info.value.reason == C.TOO_MANY_SERIES and "request_id" in str(info.value)
    huge = [{"metric": {"le": str(i)}, "values": [[T[0], "1"]]} for i in range(MAX_SERIES + 1)]
    with pytest.raises(PromError) as info:
        windows_by_key(matrix(huge), None)
    assert info.value.reason == C.TOO_MANY_SERIES and str(MAX_SERIES + 1) in str(info.value)


def test_rate_from_the_newest_windows_inf_bucket():
    rows = windows_from_matrix(matrix(MATRIX))
    assert newest_rate(rows, end=T[2], window_s=3600, what="c") == pytest.approx(5 / 3600)
    with pytest.raises(PromError) as info:  # the series stopped before the newest window
        newest_rate(rows[:2], end=T[2], window_s=3600, what="class chat")
    assert info.value.reason == C.NO_RATE_DATA and "class chat" in str(info.value)
    finite_only = windows_from_matrix(matrix(MATRIX[:3]))
    with pytest.raises(PromError) as info:
        newest_rate(finite_only, end=T[2], window_s=3600, what="c")
    assert info.value.reason == C.NO_RATE_DATA and "+Inf" in str(info.value)


def test_what_kvcore_refuses_is_a_named_reason():
    """The adapter to kvcore.history.bucketed: a class whose windows kvcore refuses (here one window lacks a bucket
    the other has) is InvalidHistogram naming the class and the bucket, never skipped silently."""
    from kvplan_operator.observe.history import class_histories

    windows = {"chat": [{"10": 1.0, "+Inf": 3.0}, {"+Inf": 2.0}], "code": [{"10": 1.0, "+Inf": 2.0}]}
    with pytest.raises(PromError) as info:
        class_histories(windows, max_model_len={"chat": 100.0, "code": 100.0})
    assert info.value.reason == C.INVALID_HISTOGRAM and "class chat" in str(info.value) and "le=10" in str(info.value)
    ok = class_histories({"code": windows["code"]}, max_model_len={"code": 100.0})["code"]
    assert ok.requests == 2.0 and ok.windows == 1 and ok.history is not None
