"""The shared world of ``test_op_reconcile.py`` and the tests that reuse it: one reconcile, end to end at the level of the operator's own API wrapper (a fake Kube that applies."""

from __future__ import annotations

import copy
import json
import pytest
from kvcore.planner.planmodel import ObjectiveTerms, Plan, PlanStatus
from kvcore.planner import plan as real_plan
from kvplan_operator import conditions as C
from kvplan_operator.handlers import is_due
from kvplan_operator.decide.policy import decide
from kvplan_operator.prom import PrometheusUnavailable
from kvplan_operator.reconcile import Deps, reconcile
from kvplan_operator.targets.deployment import read_layout
from op_fakes import FakeKube, ScriptedKnobs, dep, kvplan  # type: ignore[import-not-found]
from operator_checks import detail_document  # type: ignore[import-not-found]
from op_history_world import MATRIX, RecordedProm  # type: ignore[import-not-found]
from op_targets_world import SPEC  # type: ignore[import-not-found]


NOW = 1700007200.0


def busy_matrix(scale: float = 20.0) -> list:
    m = copy.deepcopy(MATRIX)
    for s in m:
        s["values"] = [[t, "5" if v == "NaN" else str(float(v) * scale)] for t, v in s["values"]]
    return m


def deps(kube: FakeKube, prom=None, planner=real_plan) -> Deps:
    prom = prom or RecordedProm(matrix=busy_matrix())
    return Deps(kube=kube, prom_factory=lambda conn: prom, planner=planner, clock=lambda: NOW,
                resolve=lambda host: ["10.0.0.9"], knobs=ScriptedKnobs())


def cond(kube: FakeKube, type_: str) -> dict:
    c = C.find(kube.status.get("conditions", []), type_)
    assert c is not None, type_
    return dict(c)


@pytest.fixture
def kube() -> FakeKube:
    return FakeKube({"vllm-big": dep("vllm-big"), "vllm-small": dep("vllm-small")})


def _plan(total: float, tp: int) -> Plan:
    from kvcore.planner.planmodel import GroupPlan
    g = GroupPlan(name="big", tp=tp, pp=1, replicas=16 // tp, gpus_per_replica=tp, kv_capacity_tokens=1.0,
                  throughput_tokens_s=1.0, utilisation=0.1)
    return Plan(status=PlanStatus.FEASIBLE, reason="", groups=[g],
                objective=ObjectiveTerms(reservation=total, configuration=0, queueing=0, rejection=0, total=total))


def _fixed_plan(tp_big: int, total: float) -> Plan:
    from kvcore.planner.planmodel import ClassPlan, GroupPlan

    groups = [GroupPlan(name="big", tp=tp_big, pp=1, replicas=16 // tp_big, gpus_per_replica=tp_big,
                        kv_capacity_tokens=400_000.0, throughput_tokens_s=2000.0, utilisation=0.3),
              GroupPlan(name="small", tp=1, pp=1, replicas=8, gpus_per_replica=1, kv_capacity_tokens=400_000.0,
                        throughput_tokens_s=4000.0, utilisation=0.3)]
    classes = [ClassPlan(name="chat", reserve_tokens=500, admitted=True, routing={"big": 0.5, "small": 0.5}),
               ClassPlan(name="code-gen", reserve_tokens=100, admitted=True, routing={"big": 0.2, "small": 0.8})]
    return Plan(status=PlanStatus.FEASIBLE, reason="fixed", groups=groups, classes=classes,
                objective=ObjectiveTerms(reservation=total, configuration=0, queueing=0, rejection=0, total=total))
