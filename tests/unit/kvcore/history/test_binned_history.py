"""Per-class histories from one ``sum by (le, <class label>)`` range query (kvcore.history.bucketed): regrouping
the matrix by class and window, empty windows skipped, request counts, a bad class isolated with a named error
(decreasing counts, NaN, +Inf below the last finite bucket, a missing bucket), refusal of malformed series and of a
class label with too many values, and per-class max_model_len."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from kvcore.history.bucketed import class_histories, windows_from_matrix
from kvcore.errors import InputError
from kvcore.history.traces import histogram_to_samples

T = [1700000000, 1700003600, 1700007200]
LES = ["10", "100", "1000", "+Inf"]


def _series(cls: str, per_le: dict[str, list[str]], label: str = "kvplan_class") -> list[dict[str, Any]]:
    return [{"metric": {"le": le, label: cls}, "values": [[t, v] for t, v in zip(T, vals)]}
            for le, vals in per_le.items()]


GOOD = {"10": ["2", "0", "1"], "100": ["6", "0", "4"], "1000": ["10", "0", "5"], "+Inf": ["12", "0", "5"]}


def test_matrix_regroups_by_class_and_window() -> None:
    matrix = _series("chat", GOOD) + _series("code", {le: ["1", "1", "1"] for le in LES})
    w = windows_from_matrix(matrix, "kvplan_class")
    assert list(w) == ["chat", "code"]
    assert len(w["chat"]) == 3 and w["chat"][0] == {"10": 2.0, "100": 6.0, "1000": 10.0, "+Inf": 12.0}
    assert w["chat"][1] == {le: 0.0 for le in LES}


def test_class_histories_read_each_window_like_histogram_to_samples() -> None:
    out = class_histories(windows_from_matrix(_series("chat", GOOD), "kvplan_class"), max_model_len=2048)
    chat = out["chat"]
    assert chat.error is None and chat.history is not None
    assert chat.windows == 2 and chat.empty_windows == 1 and chat.requests == 17
    first = histogram_to_samples(LES, [2, 6, 10, 12], max_model_len=2048)
    np.testing.assert_array_equal(chat.history.windows[0].values, first.values)
    np.testing.assert_allclose(chat.history.windows[0].weights, first.weights)
    assert chat.history.windows[0].binning == first.binning
    assert [w.observations for w in chat.history.windows] == [12, 5]


@pytest.mark.parametrize(
    ("bad", "field", "needle"),
    [
        pytest.param({"10": ["2", "0", "5"], "100": ["6", "0", "1"]}, "chat.windows[2].le=100", "decreases",
                     id="decreasing"),
        pytest.param({"+Inf": ["12", "0", "2"]}, "chat.windows[2].le=+Inf", "the +Inf bucket", id="inf-below"),
        pytest.param({"1000": ["10", "0", "NaN"]}, "chat.windows[2].le=1000", "finite", id="nan"),
    ],
)
def test_a_bad_class_gets_a_named_error_and_others_are_unaffected(bad: dict[str, list[str]], field: str,
                                                                     needle: str) -> None:
    matrix = _series("chat", {**GOOD, **bad}) + _series("code", GOOD)
    out = class_histories(windows_from_matrix(matrix, "kvplan_class"), max_model_len=2048)
    err = out["chat"].error
    assert err is not None and out["chat"].history is None
    assert err.field == field and needle in str(err)
    assert out["code"].error is None and out["code"].history is not None


def test_a_window_missing_a_bucket_is_refused() -> None:
    matrix = _series("chat", GOOD)
    matrix[1]["values"] = matrix[1]["values"][:2]  # le=100 has no value at the last step
    out = class_histories(windows_from_matrix(matrix, "kvplan_class"), max_model_len=2048)
    err = out["chat"].error
    assert err is not None and err.field == "chat.windows[2].le" and "le=100 is missing" in str(err)


def test_per_class_max_model_len() -> None:
    w = windows_from_matrix(_series("a", GOOD) + _series("b", GOOD), "kvplan_class")
    out = class_histories(w, max_model_len={"a": 500, "b": 4096})
    ha, hb = out["a"].history, out["b"].history
    assert ha is not None and hb is not None
    assert ha.pooled().max() <= 500 < hb.pooled().max() <= 4096
    missing = class_histories(w, max_model_len={"a": 500})
    assert missing["b"].error is not None and missing["b"].error.field == "max_model_len[b]"
    bad = class_histories(w, max_model_len={"a": math.nan, "b": 1})
    assert bad["a"].error is not None and bad["a"].error.field == "max_model_len[a]"


@pytest.mark.parametrize(
    ("matrix", "field"),
    [
        pytest.param([{"metric": {"kvplan_class": "a"}, "values": [[T[0], "1"]]}], "result[0].metric", id="no-le"),
        pytest.param([{"metric": {"le": "1"}, "values": [[T[0], "1"]]}], "result[0].metric", id="no-class"),
        pytest.param([{"metric": {"le": "1", "kvplan_class": "a"}}], "result[0].values", id="no-values"),
        pytest.param([{"metric": {"le": "1", "kvplan_class": "a"}, "values": [[T[0]]]}], "result[0].values[0]",
                     id="short-point"),
        pytest.param([{"metric": {"le": "1", "kvplan_class": "a"}, "values": [[T[0], "x"]]}],
                     "result[0].values[0][1]", id="bad-value"),
        pytest.param([{"values": []}], "result[0].metric", id="no-metric"),
        pytest.param("matrix", "result", id="not-a-list"),
    ],
)
def test_malformed_series_are_refused(matrix: Any, field: str) -> None:
    with pytest.raises(InputError) as info:
        windows_from_matrix(matrix, "kvplan_class")
    assert info.value.field == field


def test_a_label_with_too_many_values_is_refused() -> None:
    matrix = [s for i in range(300) for s in _series(f"req-{i}", {"+Inf": ["1", "1", "1"]})]
    with pytest.raises(InputError, match="more than 256 values") as info:
        windows_from_matrix(matrix, "kvplan_class")
    assert info.value.field == "kvplan_class"
    assert len(windows_from_matrix(matrix, "kvplan_class", max_classes=300)) == 300


def test_bad_le_names_the_class() -> None:
    out = class_histories({"x": [{"ten": 1.0, "+Inf": 2.0}]}, max_model_len=100)
    assert out["x"].error is not None and out["x"].error.field == "x.le"


def test_unknown_model_is_raised() -> None:
    with pytest.raises(InputError, match="within-bucket model"):
        class_histories({}, max_model_len=100, model="midpoint")
