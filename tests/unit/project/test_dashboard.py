"""The Grafana dashboard shipped in the chart: the JSON file is exactly what grafanalib builds from
``kvplan_dev/dashboard.py`` (run ``make dashboard`` after a change), every panel has a query, every query and
variable names only metrics the operator really exports (read from a populated ``Metrics`` registry), and the
PromQL metric-name extraction itself finds what it should (table-driven)."""

from __future__ import annotations

import json

import pytest

from kvplan_dev import dashboard
from kvplan_dev.promql import exported_names, metric_names, unknown_names


def test_file_is_what_grafanalib_builds() -> None:
    assert dashboard.OUT.read_text() == dashboard.render(), "run `make dashboard`"


def test_every_panel_has_a_query() -> None:
    doc = json.loads(dashboard.render())
    panels = [p for p in doc["panels"] if p["type"] != "row"]
    assert len(panels) >= 15
    assert all(p.get("targets") and all(t["expr"] for t in p["targets"]) for p in panels)
    assert doc["uid"] == "kvplan-operator"


def test_every_query_names_exported_metrics_only() -> None:
    queries = dashboard.expressions(json.loads(dashboard.render()))
    assert unknown_names(queries, exported_names()) == []
    read = {name for _, expr in queries for name in metric_names(expr)}
    for wanted in ("kvplan_reservation_tokens", "kvplan_radius_tokens", "kvplan_group_tensor_parallel",
                   "kvplan_group_pipeline_parallel", "kvplan_group_replicas", "kvplan_routing_weight",
                   "kvplan_last_successful_plan_timestamp_seconds", "kvplan_build_info"):
        assert wanted in read, f"the dashboard shows no {wanted}"


def test_a_missing_metric_is_reported() -> None:
    assert unknown_names([("panel", "rate(kvplan_typo_total[5m])")], exported_names()) == ["panel: kvplan_typo_total"]


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        pytest.param('kvplan_condition{type="Ready", name=~"$name"} == 0', {"kvplan_condition"}, id="matchers"),
        pytest.param("histogram_quantile(0.95, sum by (le, namespace) (rate(kvplan_solve_seconds_bucket[5m])))",
                     {"kvplan_solve_seconds_bucket"}, id="functions-and-grouping"),
        pytest.param("time() - kvplan_last_successful_plan_timestamp_seconds > 1800",
                     {"kvplan_last_successful_plan_timestamp_seconds"}, id="time-and-number"),
        pytest.param("a_total >= 0.75 * b and on (name) c > 0", {"a_total", "b", "c"}, id="binary-and-on"),
        pytest.param('label_values(kvplan_condition{namespace=~"$namespace"}, name)', {"kvplan_condition"},
                     id="grafana-label-values"),
        pytest.param("absent(kvplan_build_info)", {"kvplan_build_info"}, id="absent"),
    ],
)
def test_metric_names(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names
