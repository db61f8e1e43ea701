"""The record phase feeds the operator's metrics (one reconcile through the pipeline with the pipeline's own fakes,
``tests/unit/operator/op_fakes.py``, the real planner and a real ``Metrics`` registry): after a successful plan the conditions,
the last-success timestamp, the disruption gauges and the plan's outputs are exported under the KVPlan's namespace
and name; a failed reconcile raises the failure counters and flips Ready; the delete handler removes every series of
the KVPlan."""

from __future__ import annotations

import copy
import dataclasses
from types import SimpleNamespace

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kvplan_operator.handlers import on_delete
from kvplan_operator.record.metrics import Metrics
from kvplan_operator.reconcile import reconcile
from op_fakes import FakeKube, dep, kvplan  # type: ignore[import-not-found]
from op_reconcile_world import NOW, deps  # type: ignore[import-not-found]
from op_targets_world import SPEC  # type: ignore[import-not-found]


def _series(m: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _get(m: Metrics, name: str, **labels: str) -> float | None:
    return _series(m).get((name, tuple(sorted({"namespace": "ns", "name": "fleet", **labels}.items()))))


def test_success_failure_and_delete() -> None:
    kube = FakeKube({"vllm-big": dep("vllm-big"), "vllm-small": dep("vllm-small")})
    metrics = Metrics()
    d = dataclasses.replace(deps(kube), metrics=metrics)
    assert reconcile(kvplan(copy.deepcopy(SPEC), kube), d).ok
    assert _get(metrics, "kvplan_condition", type="Ready") == 1.0
    assert _get(metrics, "kvplan_condition", type="Degraded") == 0.0
    assert _get(metrics, "kvplan_last_successful_plan_timestamp_seconds") == NOW
    assert _get(metrics, "kvplan_layout_change_budget_per_hour") == float(
        SPEC.get("replan", {}).get("maxLayoutChangesPerHour", 2))
    assert _get(metrics, "kvplan_layout_changes_last_hour") is not None
    status_plan = kube.status["plan"]
    group = status_plan["groups"][0]["name"] if isinstance(status_plan["groups"], list) else next(iter(
        status_plan["groups"]))
    assert _get(metrics, "kvplan_group_replicas", group=group) is not None
    assert any(name == "kvplan_reservation_tokens" for name, _ in _series(metrics))

    kube.deployments.pop("vllm-small")  # the next reconcile fails: a Deployment is missing
    spec = copy.deepcopy(SPEC)
    spec.setdefault("replan", {})["interval"] = "10s"
    failed = reconcile(kvplan(spec, kube, generation=2), d)
    assert not failed.ok
    assert _get(metrics, "kvplan_consecutive_failures") == 1.0
    assert _get(metrics, "kvplan_condition", type="Ready") == 0.0
    assert _get(metrics, "kvplan_failures_total", reason=failed.reason) == 1.0

    memo = SimpleNamespace(runtime=SimpleNamespace(deps=SimpleNamespace(metrics=metrics), last_attempt={},
                                                   retry_at={}, guard=_NullLock(), locks={}))
    on_delete(body={"metadata": {"uid": "u1", "namespace": "ns", "name": "fleet"}}, memo=memo)
    assert [k for k in _series(metrics) if dict(k[1]).get("name") == "fleet"] == []


class _NullLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
