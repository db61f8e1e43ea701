"""PromQL -> samples path: the query text (both vllm: and vllm_ spellings, selector, window), a recorded
Prometheus range-query result (one series per ``le``, several sub-windows) -> History windows with the right
weights, empty/NaN windows dropped, too-few-samples counting, arrival-rate queries (scalar and vector), and
Deployments/autoscalers read through the operator's own API wrapper (a fake; the raw client must not be called)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from kvplan_operator.snapshot import (PrometheusUnavailable, histogram_query, history_from_windows, observe_class,
                                      scalar_from_vector, take_snapshot, windows_from_matrix)
from kvplan_operator.spec import parse_spec
from test_op_builders import SPEC  # type: ignore[import-not-found]

# Recorded shape of /api/v1/query_range for `sum by (le) (increase(...[3600s]))`, 3 steps (values are strings).
T = [1700000000, 1700003600, 1700007200]
MATRIX = [
    {"metric": {"le": "10.0"}, "values": [[T[0], "2"], [T[1], "0"], [T[2], "1"]]},
    {"metric": {"le": "100.0"}, "values": [[T[0], "6"], [T[1], "0"], [T[2], "4"]]},
    {"metric": {"le": "1000.0"}, "values": [[T[0], "10"], [T[1], "0"], [T[2], "5"]]},
    {"metric": {"le": "+Inf"}, "values": [[T[0], "12"], [T[1], "NaN"], [T[2], "5"]]},
]


def test_histogram_query_matches_both_spellings():
    q = histogram_query('model_name="chat"', 3600)
    assert q == ('sum by (le) (increase({__name__=~"vllm:request_generation_tokens_bucket|'
                 'vllm_request_generation_tokens_bucket", model_name="chat"}[3600s]))')
    assert histogram_query("", 60).endswith('_bucket"}[60s]))')


def test_matrix_to_windows_to_history():
    rows = windows_from_matrix(MATRIX)
    assert [r[0] for r in rows] == [float(t) for t in T]
    assert rows[1][2] == [0.0, 0.0, 0.0, 0.0]  # NaN counts as 0
    hist, total = history_from_windows(rows, max_model_len=2048)
    assert hist is not None and len(hist.windows) == 2  # the empty middle window is dropped
    # Each bucket keeps its share; inside it the within-bucket model spreads it (kvcore.binned_model); +Inf is
    # closed at max_model_len.
    edges = [0, 10, 100, 1000, 2048]
    for w, shares in ((hist.windows[0], [2, 4, 4, 2]), (hist.windows[1], [1, 3, 1, 0])):
        got = [w.weights[(w.values > lo) & (w.values <= hi)].sum() for lo, hi in zip(edges[:-1], edges[1:])]
        np.testing.assert_allclose(got, np.array(shares) / sum(shares), atol=1e-12)
    assert hist.windows[0].max() <= 2048 and hist.windows[1].max() <= 1000
    assert total == 17


def test_decreasing_counts_are_not_read():
    # le=100 below le=10: kvcore refuses such a window (a running max would pile requests into the lowest bucket);
    # today the operator skips it (issue 14 item 1 gives it a named reason).
    rows = [(0.0, ["+Inf", "10", "100"], [5.0, 3.0, 2.0])]
    hist, total = history_from_windows(rows, max_model_len=500)
    assert hist is None and total == 0.0


def test_no_data_gives_no_history():
    assert history_from_windows(windows_from_matrix([]), max_model_len=10) == (None, 0.0)


@pytest.mark.parametrize(
    ("result", "value"),
    [
        pytest.param({"resultType": "scalar", "result": [1, "2.5"]}, 2.5, id="scalar"),
        pytest.param({"resultType": "vector", "result": [{"metric": {}, "value": [1, "1.5"]},
                                                         {"metric": {"x": "b"}, "value": [1, "0.5"]}]}, 2.0, id="vector-sum"),
        pytest.param({"resultType": "vector", "result": []}, 0.0, id="empty"),
        pytest.param([{"metric": {}, "value": [1, "3"]}], 3.0, id="bare-list"),
    ],
)
def test_scalar_from_vector(result, value):
    assert scalar_from_vector(result) == value


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


class FakeKube:
    def __init__(self, deployments, scaled=None):
        self.deployments, self.scaled = deployments, scaled or {}

    def get_deployment(self, namespace, name):
        return self.deployments.get((namespace, name))

    def autoscaled_deployments(self, namespace):
        return self.scaled


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


def test_take_snapshot_reads_deployments_and_autoscalers():
    spec = parse_spec(copy.deepcopy(SPEC))
    kube = FakeKube({("ns", "vllm-big"): {"metadata": {"name": "vllm-big"}}}, {"vllm-big": "HorizontalPodAutoscaler/h"})
    snap = take_snapshot(spec, namespace="ns", prom=RecordedProm(), kube=kube, now=1700007200.0)
    assert snap.deployments["big"].autoscaler == "HorizontalPodAutoscaler/h"
    assert snap.deployments["small"].body is None
    assert set(snap.classes) == {"chat", "code-gen"}


def test_take_snapshot_propagates_prometheus_failure():
    spec = parse_spec(copy.deepcopy(SPEC))
    with pytest.raises(PrometheusUnavailable):
        take_snapshot(spec, namespace="ns", prom=RecordedProm(fail=True), kube=FakeKube({}), now=1.0)
