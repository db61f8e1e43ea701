"""Operator metrics (own registry, names and labels) and the ``kvplan-operator`` command line."""

from __future__ import annotations

from prometheus_client import generate_latest

from kvcore.planner.planmodel import ObjectiveTerms, Plan, PlanStatus
from kvplan_operator.main import build_parser
from kvplan_operator.record.metrics import Metrics


def test_metrics_exposition():
    m, other = Metrics(), Metrics()  # two registries never collide
    plan = Plan(status=PlanStatus.FEASIBLE, reason="", objective=ObjectiveTerms(
        reservation=1, configuration=2, queueing=3, rejection=0, total=6.0))
    m.planned("ns/a", plan, 0.25, relayout=True)
    m.failure("ns/a", "PrometheusUnavailable")
    text = generate_latest(m.registry).decode()
    assert 'kvplan_replans_total{name="a",namespace="ns"} 1.0' in text
    assert 'kvplan_failures_total{name="a",namespace="ns",reason="PrometheusUnavailable"} 1.0' in text
    assert 'kvplan_objective{name="a",namespace="ns"} 6.0' in text
    assert 'kvplan_layout_changes_total{name="a",namespace="ns"} 1.0' in text
    assert 'kvplan_solve_seconds_count{name="a",namespace="ns"} 1.0' in text
    assert 'namespace="ns"' not in generate_latest(other.registry).decode()


def test_cli_flags():
    a = build_parser().parse_args(["--namespace", "x", "-n", "y", "--standalone", "--liveness",
                                   "http://0.0.0.0:8081/healthz", "--metrics-port", "0", "--priority", "7"])
    assert a.namespace == ["x", "y"] and a.standalone and a.metrics_port == 0 and a.priority == 7
    assert a.liveness == "http://0.0.0.0:8081/healthz" and a.peering == "kvplan"
    d = build_parser().parse_args([])
    assert d.namespace == [] and not d.standalone and d.priority is None
