"""The operator's Prometheus reads (operator/observe/sources over operator/prom.py's client) against a real Prometheus
(Debian's) backfilled from the vendored traces: the one range query of the vllm source (a branch per class
selector) returns one histogram per class and sub-window; the History the planner gets matches the trace's bucketed output lengths; both the ``vllm:`` and
``vllm_`` spellings are read; a stopped Prometheus is ``PrometheusUnavailable``, a PromQL error is
``PrometheusQueryError`` (status code and error type, never the body), an arrival-rate query that matches nothing
is ``NoRateData`` (not 0 req/s). Needs only Prometheus/promtool (not the apiserver)."""

from __future__ import annotations

import copy
import time
import numpy as np
import pytest
from kvcore.reservation.radius_drift import drift_radius
from kvcore.history.traces import build_1_2_5_buckets
from kvplan_dev import pytest_fixtures
from kvplan_dev.openmetrics import VLLM_UNDERSCORE, Window
from kvplan_dev.prom import LocalPrometheus, series_from_trace
from kvplan_operator import conditions as C
from kvplan_operator.observe.history import rate_value
from kvplan_operator.observe.sources import observe_histories
from kvplan_operator.prom import PromClient, PromError, PrometheusUnavailable
from kvplan_operator.spec import parse_spec
from operator_prometheus_world import (LMAX, SPEC, backfilled, bucketed)  # noqa: F401 - fixtures are found by name


pytestmark = pytest.mark.integration


@pytest.mark.parametrize("cls_index", [pytest.param(0, id="vllm-colon"), pytest.param(1, id="vllm-underscore")])
def test_history_matches_trace(backfilled, cls_index):
    server, end, series, _ = backfilled
    spec = parse_spec(copy.deepcopy(SPEC) | {"prometheus": {"url": server.url}})
    prom = PromClient(server.url, timeout_s=10)
    obs = observe_histories(prom, spec, "ns", now=end)[spec.classes[cls_index].name]
    assert prom.requests_sent == 1  # both classes, one range query
    truth = np.asarray(series[cls_index].output_tokens)
    assert obs.history is not None
    assert 5 <= obs.windows <= 6
    # increase() extrapolates at window edges; totals agree to a few percent.
    assert obs.requests == pytest.approx(len(truth), rel=0.05)
    pooled = obs.history.pooled()
    # Inside each bucket the within-bucket model (kvcore.history.bucket_model) spreads the requests over whole tokens; each
    # quantile stays in (or at the edge of) the bucket that holds the trace's own.
    expect = bucketed(truth)
    assert (pooled.values == np.round(pooled.values)).all() and pooled.max() <= LMAX
    for q in (0.5, 0.9, 0.99):
        assert pooled.quantile(q) <= np.quantile(expect, q, method="inverted_cdf") * 1.6
        assert pooled.quantile(q) == pytest.approx(np.quantile(truth, q, method="inverted_cdf"), rel=0.6)
    assert pooled.mean() == pytest.approx(truth.mean(), rel=0.1)
    # The histogram windows count thousands of requests, not their ~10 buckets: the radius rule's effective size is
    # the request count (equal-share pooling of unequal windows can only lower it), so at the operator's default
    # horizon (5m / 6h) the sampling floor is a tiny fraction of the mean instead of saturating (Kish on the
    # bucket weights gave a floor above the mean). Drift, where the trace has it, is a separate term.
    assert 0.5 * obs.requests <= pooled.effective_size() <= obs.requests * 1.0001
    radius = drift_radius(obs.history, LMAX, side="up", horizon_ratio=300 / 21600)
    assert radius.floor < 0.01 * pooled.mean(), radius.reason
    assert radius.eps < radius.cap, radius.reason


def test_every_class_and_the_failures(backfilled):
    server, end, _, _ = backfilled
    spec = parse_spec(copy.deepcopy(SPEC) | {"prometheus": {"url": server.url}})
    prom = PromClient(server.url, timeout_s=10)
    for obs in observe_histories(prom, spec, "ns", now=end).values():
        assert obs.history is not None
    dead = PromClient("http://127.0.0.1:9", timeout_s=1)
    with pytest.raises(PrometheusUnavailable, match="127.0.0.1:9"):
        observe_histories(dead, spec, "ns", now=end)
    with pytest.raises(PromError) as info:
        prom.query("sum(rate(vllm:request_success_total[5m]", at=end)  # unbalanced: a PromQL parse error
    assert info.value.reason == C.PROMETHEUS_QUERY_ERROR
    assert str(info.value) == "instant query: Prometheus answered HTTP 400 status=error (bad_data)"
    with pytest.raises(PromError) as info:
        rate_value(prom.query('sum(rate(vllm:request_success_total{model_name="nobody"}[5m]))', at=end))
    assert info.value.reason == C.NO_RATE_DATA
    with pytest.raises(PromError) as info:
        PromClient(server.url + "/no/such/prefix", timeout_s=5).query("up", at=end)
    assert info.value.reason == C.PROMETHEUS_REJECTED and "HTTP 404" in str(info.value)
