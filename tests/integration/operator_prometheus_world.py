"""The shared world of ``test_operator_prometheus.py`` and the tests that reuse it: the operator's Prometheus reads (operator/observe/sources over operator/prom.py's client) against a real Prometheus."""

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


LMAX = 8192


SPEC = {
    "groups": [{"name": "a", "deployment": "a", "model": "llama-8b", "nodePool": {"gpuCount": 8}}],
    "classes": [
        {"name": "chat", "inputTokens": 1000, "maxOutputTokens": LMAX, "arrivalRate": 1.0,
         "history": {"selector": 'model_name="chat"'}, "costs": {"preemption": 10, "waste": 1}},
        {"name": "code", "inputTokens": 2000, "maxOutputTokens": LMAX, "arrivalRate": 1.0,
         "history": {"selector": 'model_name="code"'}, "costs": {"preemption": 10, "waste": 1}},
    ],
    "prometheus": {"url": "http://placeholder", "lookback": "6h", "windows": 6},
}


@pytest.fixture(scope="module")
def backfilled(traces_dir):
    """One Prometheus with chat (vllm: spelling) and code (vllm_ spelling) over the last 6 h."""
    server = LocalPrometheus()
    try:
        server.start()
        end = time.time() - 120
        window = Window(end_unix_s=end, duration_s=6 * 3600, step_s=30)
        chat = series_from_trace(traces_dir / "azure2023_conv.csv", labels={"model_name": "chat"}, window=window,
                                 max_model_len=LMAX)
        code = series_from_trace(traces_dir / "azure2023_code.csv", labels={"model_name": "code"}, window=window,
                                 max_model_len=LMAX, metric=VLLM_UNDERSCORE)
        stats = server.backfill([chat, code], window)
        yield server, end, (chat, code), stats
    finally:
        server.stop()
        pytest_fixtures.STARTED.extend(server.history)


def bucketed(values, lmax=LMAX) -> np.ndarray:
    bounds = np.array(build_1_2_5_buckets(lmax) + [np.inf])
    idx = np.searchsorted(bounds, np.asarray(values, dtype=float), side="left")
    return np.minimum(bounds[idx], lmax)
