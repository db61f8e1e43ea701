"""What ``kvplan_operator.record.metrics`` exports, read back from the Prometheus text exposition (parsed by
prometheus_client's own parser, not by string matching): the standard process/platform/GC collectors, build info,
``namespace`` and ``name`` as separate labels, the last-success timestamp, consecutive failures, conditions, the
disruption budget, the plan's outputs (reservation and radius per class, TP/PP/replicas per group, routing weight per
class and group), series removed when a class or group leaves the plan, and :meth:`Metrics.forget` removing every
series of a deleted KVPlan while another KVPlan's stay.
"""

from __future__ import annotations

import platform

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import kvcore
from kvcore.planner.planmodel import ClassPlan, GroupPlan, ObjectiveTerms, Plan, PlanStatus
from kvcore.reservation.radius import RadiusChoice
from kvplan_operator.record.metrics import Metrics, split_key


def _plan(classes: dict[str, dict[str, float]], groups: dict[str, tuple[int, int, int]]) -> Plan:
    return Plan(
        status=PlanStatus.FEASIBLE, reason="",
        objective=ObjectiveTerms(reservation=1, configuration=2, queueing=3, rejection=0, total=6.0),
        classes=[ClassPlan(name=c, reserve_tokens=100.0 * (i + 1), admitted=i != 2, routing=routing,
                           radius=RadiusChoice(eps=1.5 * (i + 1), rule="fraction", reason="test"))
                 for i, (c, routing) in enumerate(classes.items())],
        groups=[GroupPlan(name=g, tp=tp, pp=pp, replicas=m, gpus_per_replica=tp * pp, kv_capacity_tokens=1.0,
                          throughput_tokens_s=1.0, utilisation=0.5)
                for g, (tp, pp, m) in groups.items()],
    )


def _samples(m: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _value(m: Metrics, metric: str, **labels: str) -> float | None:
    return _samples(m).get((metric, tuple(sorted(labels.items()))))


def _names(m: Metrics) -> set[str]:
    return {name for name, _ in _samples(m)}


PLAN_A = _plan({"chat": {"big": 0.75, "small": 0.25}, "code": {"big": 1.0}, "batch": {}},
               {"big": (4, 2, 3), "small": (1, 1, 8)})


@pytest.mark.parametrize("name", ["process_cpu_seconds_total", "process_resident_memory_bytes",
                                  "process_start_time_seconds", "process_open_fds", "python_info",
                                  "python_gc_collections_total"])
def test_standard_collectors(name: str) -> None:
    assert name in _names(Metrics())


def test_build_info() -> None:
    m = Metrics()
    assert _value(m, "kvplan_build_info", version=kvcore.__version__, python=platform.python_version(),
                  kopf=__import__("importlib.metadata").metadata.version("kopf")) == 1.0


def test_split_key() -> None:
    assert split_key("ns/a") == ("ns", "a")
    assert split_key("a") == ("", "a")


def test_plan_outputs_and_timestamp() -> None:
    m = Metrics()
    m.planned("llm/p", PLAN_A, 0.3, relayout=False, now=1_700_000_000.0)
    plan = {"namespace": "llm", "name": "p"}
    assert _value(m, "kvplan_last_successful_plan_timestamp_seconds", **plan) == 1_700_000_000.0
    assert _value(m, "kvplan_reservation_tokens", **plan, **{"class": "code"}) == 200.0
    assert _value(m, "kvplan_radius_tokens", **plan, **{"class": "batch"}) == 4.5
    assert _value(m, "kvplan_class_admitted", **plan, **{"class": "batch"}) == 0.0
    assert _value(m, "kvplan_class_admitted", **plan, **{"class": "chat"}) == 1.0
    assert _value(m, "kvplan_routing_weight", **plan, **{"class": "chat"}, group="small") == 0.25
    assert _value(m, "kvplan_group_tensor_parallel", **plan, group="big") == 4.0
    assert _value(m, "kvplan_group_pipeline_parallel", **plan, group="big") == 2.0
    assert _value(m, "kvplan_group_replicas", **plan, group="small") == 8.0
    assert _value(m, "kvplan_group_utilisation", **plan, group="small") == 0.5


def test_failures_count_until_success() -> None:
    m = Metrics()
    for _ in range(3):
        m.failure("llm/p", "PrometheusUnavailable")
    assert _value(m, "kvplan_consecutive_failures", namespace="llm", name="p") == 3.0
    assert _value(m, "kvplan_failures_total", namespace="llm", name="p", reason="PrometheusUnavailable") == 3.0
    m.planned("llm/p", PLAN_A, 0.3, relayout=True)
    assert _value(m, "kvplan_consecutive_failures", namespace="llm", name="p") == 0.0
    assert _value(m, "kvplan_layout_changes_total", namespace="llm", name="p") == 1.0


def test_conditions_and_disruption() -> None:
    m = Metrics()
    m.conditions("llm", "p", {"Ready": True, "Degraded": False})
    m.disruption("llm", "p", changes_last_hour=2, budget_per_hour=3)
    assert _value(m, "kvplan_condition", namespace="llm", name="p", type="Ready") == 1.0
    assert _value(m, "kvplan_condition", namespace="llm", name="p", type="Degraded") == 0.0
    assert _value(m, "kvplan_layout_changes_last_hour", namespace="llm", name="p") == 2.0
    assert _value(m, "kvplan_layout_change_budget_per_hour", namespace="llm", name="p") == 3.0


def test_a_class_or_group_that_leaves_the_plan_loses_its_series() -> None:
    m = Metrics()
    m.planned("llm/p", PLAN_A, 0.3, relayout=False)
    m.planned("llm/p", _plan({"chat": {"big": 1.0}}, {"big": (8, 1, 2)}), 0.3, relayout=True)
    plan = {"namespace": "llm", "name": "p"}
    assert _value(m, "kvplan_reservation_tokens", **plan, **{"class": "code"}) is None
    assert _value(m, "kvplan_routing_weight", **plan, **{"class": "chat"}, group="small") is None
    assert _value(m, "kvplan_group_replicas", **plan, group="small") is None
    assert _value(m, "kvplan_routing_weight", **plan, **{"class": "chat"}, group="big") == 1.0
    assert _value(m, "kvplan_group_tensor_parallel", **plan, group="big") == 8.0


def test_forget_removes_every_series_of_that_kvplan_only() -> None:
    m = Metrics()
    for key in ("llm/p", "llm/q"):
        m.planned(key, PLAN_A, 0.3, relayout=True)
        m.failure(key, "ApplyFailed")
        m.conditions(*key.split("/"), {"Ready": True})
        m.disruption(*key.split("/"), changes_last_hour=1, budget_per_hour=2)
    m.forget("llm", "p")
    left = [(n, dict(labels)) for n, labels in _samples(m) if dict(labels).get("namespace") == "llm"]
    assert left, "the other KVPlan's series must stay"
    assert all(labels["name"] == "q" for _, labels in left), [x for x in left if x[1]["name"] == "p"][:3]
    kinds = {n for n, _ in left}
    assert {"kvplan_replans_total", "kvplan_reservation_tokens", "kvplan_routing_weight",
            "kvplan_solve_seconds_count", "kvplan_condition"} <= kinds
