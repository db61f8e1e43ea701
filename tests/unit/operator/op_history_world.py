"""The shared world of ``test_op_history.py`` and the tests that reuse it: prometheus answers -> per-class observations (operator/observe/history.py): a recorded range-query result (one series per."""

from __future__ import annotations

import copy
import re
import numpy as np
import pytest
from kvplan_operator import conditions as C
from kvplan_operator.observe.history import (KEY_LABEL, MAX_KEYS, MAX_SERIES, history_from_windows, newest_rate,
                                     rate_value, windows_by_key, windows_from_matrix)
from kvplan_operator.prom import PromError, PrometheusUnavailable


T = [1700000000, 1700003600, 1700007200]


MATRIX = [
    {"metric": {"le": "10.0"}, "values": [[T[0], "2"], [T[1], "0"], [T[2], "1"]]},
    {"metric": {"le": "100.0"}, "values": [[T[0], "6"], [T[1], "0"], [T[2], "4"]]},
    {"metric": {"le": "1000.0"}, "values": [[T[0], "10"], [T[1], "0"], [T[2], "5"]]},
    {"metric": {"le": "+Inf"}, "values": [[T[0], "12"], [T[1], "0"], [T[2], "5"]]},
]


def tagged(matrix: list, label: str, value: str) -> list:
    """``matrix`` with ``label=value`` on every series."""
    out = copy.deepcopy(matrix)
    for s in out:
        s["metric"][label] = value
    return out


def matrix(result) -> dict:
    return {"resultType": "matrix", "result": result}


def _shares(window, edges):
    """Each bucket's share of a window: the within-bucket model (kvcore.history.bucket_model) spreads a bucket's requests
    inside it, and keeps its count exactly."""
    return [float(window.weights[(window.values > lo) & (window.values <= hi)].sum())
            for lo, hi in zip(edges[:-1], edges[1:])]


def _one_window(counts: dict[str, str]) -> dict:
    return matrix([{"metric": {"le": le}, "values": [[T[0], v]]} for le, v in counts.items()])


class RecordedProm:
    """A recorded Prometheus: every history source's range query gets ``matrix`` once per key it asks for (the
    ``kvplan_key`` values of a stock-vLLM union, or ``values`` of a labelled source's class label); the capacity
    query gets ``engines`` (a vector; none by default: the groups stay on their profiles); any other instant query
    (an ``arrivalRateQuery``) gets ``rate``; the step-time range query gets ``steps(start, end, step)`` (none by
default). Records every call. As a real Prometheus, it answers the times asked:
    ``matrix``'s timestamps are read relative to ``anchor`` (the fixtures' "now", ``T[-1]``) and moved with the
    query's ``end`` (a point an hour before ``anchor`` is an hour before ``end``)."""

    def __init__(self, matrix=MATRIX, rate=0.7, fail=False, values=("chat", "code-gen"), engines=(), anchor=T[-1],
                 steps=None):
        self.matrix, self.rate, self.fail, self.values, self.engines = matrix, rate, fail, values, list(engines)
        self.anchor = anchor
        #: the step-time query's answer: ``steps(start, end, step)`` -> series (None: no engine step series)
        self.steps = steps
        self.calls: list[tuple] = []

    def query(self, promql, *, at=None):
        self.calls.append(("query", promql, at))
        if self.fail:
            raise PrometheusUnavailable("down")
        if "cache_config_info" in promql:
            result = copy.deepcopy(self.engines)
            for s in result:  # stamped at the time asked, as Prometheus does
                if at is not None and isinstance(s.get("value"), list) and len(s["value"]) == 2:
                    s["value"][0] = at
            return {"resultType": "vector", "result": result}
        return {"resultType": "vector", "result": [{"metric": {}, "value": [at, str(self.rate)]}]}

    def query_range(self, promql, *, start, end, step):
        self.calls.append(("range", promql, start, end, step))
        if self.fail:
            raise PrometheusUnavailable("down")
        if "iteration_tokens_total" in promql:
            return {"resultType": "matrix", "result": self.steps(start, end, step) if self.steps else []}
        keys = re.findall(r'"kvplan_key", "([^"]+)"', promql)
        by = re.match(r"sum by \(le, (\w+)\)", promql)
        if keys:
            result = [s for k in keys for s in tagged(self.matrix, KEY_LABEL, k)]
        elif by:
            result = [s for v in self.values for s in tagged(self.matrix, by.group(1), v)]
        else:
            result = copy.deepcopy(self.matrix)
        for s in result:
            s["values"] = [[float(t) + end - self.anchor, v] for t, v in s.get("values") or []]
        return {"resultType": "matrix", "result": result}


#: Two groups of llama-70b on A100-80GB (Deployments vllm-i and vllm-b, TP 4 or 8), one class each: the capacity and
#: step-time tests' KVPlan.
TWO_GROUPS: dict = {
    "groups": [
        {"name": "interactive", "deployment": "vllm-i", "model": "llama-70b", "nodePool": {"gpuCount": 16},
         "layouts": [{"tp": 4}, {"tp": 8}]},
        {"name": "batch", "deployment": "vllm-b", "model": "llama-70b", "nodePool": {"gpuCount": 8},
         "layouts": [{"tp": 4}, {"tp": 8}]},
    ],
    "classes": [
        {"name": "interactive", "inputTokens": 500, "maxOutputTokens": 2048, "history": {"group": "interactive"},
         "costs": {"preemption": 10, "waste": 1}},
        {"name": "batch", "inputTokens": 500, "maxOutputTokens": 2048, "history": {"group": "batch"},
         "costs": {"preemption": 2, "waste": 1}},
    ],
    "prometheus": {"url": "http://prom:9090", "lookback": "3h", "windows": 3},
}
