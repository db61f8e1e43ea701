"""The shared world of ``test_op_engine_knobs.py`` and the tests that reuse it: engine knobs and kvplan's vLLM plugin, through whole reconciles over the operator's wrapper (a fake cluster, a."""

from __future__ import annotations

import copy
import json
from typing import Any
import pytest
from kvcore.errors import InputError
from kvcore.planner.planmodel import ClassPlan, GroupPlan, ObjectiveTerms, Plan, PlanStatus
from kvcore.reservation_file import parse_reservations
from kvplan_operator import conditions as C
from kvplan_operator.reconcile import Deps, reconcile
from kvplan_operator.spec import InvalidSpec, parse_spec
from op_fakes import (FakeKube, ScriptedKnobs, ScriptedReserves, container, dep,  # type: ignore[import-not-found]
                      kvplan)
from operator_checks import detail_document  # type: ignore[import-not-found]
from op_faults_world import busy  # type: ignore[import-not-found]
from op_history_world import RecordedProm  # type: ignore[import-not-found]
from op_targets_world import SPEC  # type: ignore[import-not-found]


RECORD = ("status", "patch ConfigMap/fleet-plan")


T0 = 1700007200.0


ASYNC, SYNC = "kvplan_vllm.scheduler.AsyncReservationScheduler", "kvplan_vllm.scheduler.ReservationScheduler"


def fixed_plan(tp_big: int = 4, total: float = 100.0, reserve_chat: int = 500) -> Plan:
    groups = [GroupPlan(name="big", tp=tp_big, pp=1, replicas=16 // tp_big, gpus_per_replica=tp_big,
                        kv_capacity_tokens=400_000.0, throughput_tokens_s=2000.0, utilisation=0.3),
              GroupPlan(name="small", tp=1, pp=1, replicas=8, gpus_per_replica=1, kv_capacity_tokens=400_000.0,
                        throughput_tokens_s=4000.0, utilisation=0.3)]
    classes = [ClassPlan(name="chat", reserve_tokens=reserve_chat, admitted=True, routing={"big": 0.5, "small": 0.5}),
               ClassPlan(name="code-gen", reserve_tokens=100, admitted=True, routing={"big": 0.2, "small": 0.8})]
    return Plan(status=PlanStatus.FEASIBLE, reason="scripted", groups=groups, classes=classes,
                objective=ObjectiveTerms(reservation=total, configuration=0, queueing=0, rejection=0, total=total))


class Planner:
    """Free plan: big at ``tp`` (objective 50 when it moves, else 100), chat reserving ``reserve``; the hold plan
    pins big to its current layout (objective 100)."""

    def __init__(self) -> None:
        self.tp, self.reserve = 4, 500

    def __call__(self, instance: Any, *, previous: Any = None) -> Plan:
        pinned = len(instance.groups[0].layouts) == 1
        tp = instance.groups[0].layouts[0].tp if pinned else self.tp
        return fixed_plan(tp, 100.0 if pinned or tp == 4 else 50.0, self.reserve)


class World:
    def __init__(self, *, budget: int = 1, big_args: list[str] | None = None, cache: Any = None,
                 **group0: Any) -> None:
        self.kube = FakeKube(deployments={"vllm-big": dep("vllm-big", big_args), "vllm-small": dep("vllm-small")})
        self.spec = copy.deepcopy(SPEC)
        self.spec["replan"] = {"maxLayoutChangesPerHour": budget}
        self.spec["groups"][0].update(group0)
        self.planner, self.rule, self.generation, self.cache = Planner(), ScriptedKnobs(), 1, cache
        self.reserves = ScriptedReserves()
        self.deps: dict[str, Any] = {}  # more Deps fields (e.g. rule_work)
        #: the class label values a labelled source's series carry, and the histories' scale (0: no samples).
        self.prom_values: tuple[str, ...] = ("chat", "code-gen")
        self.prom_scale = 20.0

    def run(self, t: float) -> Any:
        self.kube.writes.clear()
        prom = RecordedProm(matrix=busy(self.prom_scale), values=self.prom_values)
        deps = Deps(kube=self.kube, prom_factory=lambda *a: prom, planner=self.planner, clock=lambda: t,
                    resolve=lambda host: ["10.0.0.9"], knobs=self.rule, reserves=self.reserves,
                    knob_cache=self.cache, **self.deps)
        return reconcile(kvplan(self.spec, self.kube, generation=self.generation), deps)

    def args(self, name: str = "vllm-big") -> list[str]:
        return list(container(self.kube.deployments[name]).get("args") or [])

    def flag(self, flag: str, name: str = "vllm-big") -> str | None:
        a = self.args(name)
        return a[a.index(flag) + 1] if flag in a else None

    def cond(self, type_: str) -> dict:
        return next(c for c in self.kube.status["conditions"] if c["type"] == type_)

    def engine(self, group: str = "big") -> dict:
        return dict(self.kube.status["plan"]["groups"][group]["engine"])

    def budget(self) -> list[str]:
        ann = self.kube.configmaps["fleet-kvplan"]["metadata"]["annotations"]["kvplan.io/layout-changes"]
        return [c["layouts"] for c in json.loads(ann)]

    def reservations(self, group: str = "big") -> Any:
        return parse_reservations(self.kube.configmaps["fleet-kvplan"]["data"][f"reservations-{group}.json"])

    def files(self) -> list[str]:
        return sorted(k for k in self.kube.configmaps["fleet-kvplan"]["data"] if k.startswith("reservations"))

    def classes(self) -> dict[str, Any]:
        """Per class as recorded (the plan's detail ConfigMap: status has counts only)."""
        doc = detail_document(self.kube.configmaps.get)
        assert doc is not None
        return dict(doc["classes"])

    def gates(self) -> dict[str, Any]:
        """Per plugin group, its reservation file's classes as recorded (the plan detail's ``gates``)."""
        doc = detail_document(self.kube.configmaps.get)
        assert doc is not None
        return dict(doc.get("gates") or {})
