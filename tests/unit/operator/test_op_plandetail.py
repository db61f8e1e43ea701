"""The plan's detail ConfigMaps (operator/targets/plandetail.py) through whole reconciles over the fake Kube wrapper and the
real planner: what status no longer holds (per class decisions, every note, the diff, the kvcore plan) is stored
in chunks, joined back (here independently of the operator's reader, tests/operator_checks.py) and read by the next
reconcile: the planner gets it as ``previous`` (warm start and diff), routing hysteresis reads its sparse published
maps. Chunks past a shrunken document are emptied; an interrupted write is not trusted (the plan is made from
scratch, nothing raises); an older operator's ``status.lastGoodPlan`` is read once and then dropped."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from kvcore.planner.planmodel import Plan
from kvcore.planner import plan as real_plan
from kvplan_operator.targets import plandetail
from kvplan_operator.reconcile import reconcile
from op_fakes import FakeKube, dep, kvplan  # type: ignore[import-not-found]
from operator_checks import detail_document  # type: ignore[import-not-found]
from op_reconcile_world import deps  # type: ignore[import-not-found]
from op_targets_world import SPEC  # type: ignore[import-not-found]


class Recording:
    """The real planner, keeping the ``previous`` each call was given."""

    def __init__(self) -> None:
        self.previous: list[Plan | None] = []
        self.plans: list[Plan] = []

    def __call__(self, instance: Any, *, previous: Plan | None = None) -> Plan:
        self.previous.append(previous)
        self.plans.append(real_plan(instance, previous=previous))
        return self.plans[-1]


@pytest.fixture
def kube() -> FakeKube:
    return FakeKube(deployments={"vllm-big": dep("vllm-big"), "vllm-small": dep("vllm-small")})


def chunk_names(kube: FakeKube) -> list[str]:
    return sorted(n for n in kube.configmaps if n.startswith("fleet-plan"))


def test_detail_in_chunks_round_trips_and_warm_starts_the_next_plan(kube, monkeypatch):
    monkeypatch.setattr(plandetail, "CHUNK_BYTES", 700)
    planner = Recording()
    assert reconcile(kvplan(copy.deepcopy(SPEC), kube), deps(kube, planner=planner)).ok
    doc = detail_document(kube.configmaps.get)
    text = "".join(kube.configmaps[n]["data"]["plan.json"] for n in kube.status["plan"]["detail"]["configMaps"])
    assert doc is not None and len(text) > 3 * 700 and len(chunk_names(kube)) == -(-len(text) // 700)
    assert all(len(kube.configmaps[n]["data"]["plan.json"]) <= 700 for n in chunk_names(kube))
    assert kube.status["plan"]["detail"]["bytes"] == len(text)
    first = planner.plans[0]
    assert doc["plan"] == kube.status["plan"]["id"] and doc["kvplan"] == "ns/fleet"
    for c in first.classes:  # the published maps are the plan's non-zero entries (no hysteresis on a first plan)
        entry = doc["classes"][c.name]
        assert entry["reserveTokens"] == round(c.reserve_tokens) and entry["admitted"] == c.admitted
        assert entry["routing"] == {g: pytest.approx(w, abs=1e-6) for g, w in c.routing.items() if round(w, 6)}
        assert 0 not in entry["routing"].values() and 0 not in entry["prefixCacheFraction"].values()
    # The operator's own reader agrees with the independent join, and the stored plan is the planner's
    detail = plandetail.read_detail(kube, "ns", "fleet")
    assert detail.doc == doc and detail.problem == ""
    stored = detail.previous_plan()
    assert stored is not None and [c.name for c in stored.classes] == [c.name for c in first.classes]
    assert reconcile(kvplan(copy.deepcopy(SPEC), kube), deps(kube, planner=planner)).ok
    previous = planner.previous[1]
    assert planner.previous[0] is None and previous is not None
    assert previous.objective == first.objective and [c.reserve_tokens for c in previous.classes] == [
        c.reserve_tokens for c in first.classes]
    for old, new in zip(previous.classes, first.classes):  # sparse maps read as the dense ones: missing is 0
        assert {g: old.routing.get(g, 0.0) for g in new.routing} == pytest.approx(new.routing, abs=1e-12)
    assert planner.plans[1].diff is not None  # diffed against the stored plan
    assert detail_document(kube.configmaps.get)["diff"] == {k: list(getattr(planner.plans[1].diff, k)) for k in (
        "layouts", "replicas", "reservations", "admission", "routing")}


def test_a_shrinking_detail_empties_the_chunks_past_its_end(kube, monkeypatch):
    monkeypatch.setattr(plandetail, "CHUNK_BYTES", 500)
    assert reconcile(kvplan(copy.deepcopy(SPEC), kube), deps(kube)).ok
    many = chunk_names(kube)
    monkeypatch.setattr(plandetail, "CHUNK_BYTES", 100_000)
    kube.writes.clear()
    assert reconcile(kvplan(copy.deepcopy(SPEC), kube), deps(kube)).ok
    assert len(many) > 3 and kube.status["plan"]["detail"]["configMaps"] == ["fleet-plan"]
    for name in many[1:]:
        body = kube.configmaps[name]
        assert "plan.json" not in body.get("data", {}) and body["metadata"]["annotations"][
            "kvplan.io/plan-chunk"] == "unused"
    assert detail_document(kube.configmaps.get)["plan"] == kube.status["plan"]["id"]
    kube.writes.clear()
    assert reconcile(kvplan(copy.deepcopy(SPEC), kube), deps(kube)).ok
    assert [w for w in kube.writes if w != "status"] == []  # emptied chunks are not rewritten


def test_an_interrupted_detail_is_not_trusted(kube, monkeypatch):
    monkeypatch.setattr(plandetail, "CHUNK_BYTES", 600)
    planner = Recording()
    assert reconcile(kvplan(copy.deepcopy(SPEC), kube), deps(kube, planner=planner)).ok
    kube.configmaps["fleet-plan-1"]["data"]["plan.json"] = "x" * 600  # one chunk of another write
    detail = plandetail.read_detail(kube, "ns", "fleet")
    assert detail.doc is None and "digest" in detail.problem and detail.previous_plan() is None
    del kube.configmaps["fleet-plan-2"]
    assert "fleet-plan-2" in plandetail.read_detail(kube, "ns", "fleet").problem
    out = reconcile(kvplan(copy.deepcopy(SPEC), kube), deps(kube, planner=planner))
    assert out.ok and planner.previous[1] is None  # planned from scratch
    assert detail_document(kube.configmaps.get)["plan"] == kube.status["plan"]["id"]  # and stored whole again


def test_an_older_operators_status_is_read_once_then_dropped(kube):
    planner = Recording()
    assert reconcile(kvplan(copy.deepcopy(SPEC), kube), deps(kube, planner=planner)).ok
    first = planner.plans[0]
    classes = detail_document(kube.configmaps.get)["classes"]
    for name in chunk_names(kube):  # as an operator before the detail ConfigMaps left it
        del kube.configmaps[name]
    kube.status["lastGoodPlan"] = first.model_dump_json()
    kube.status["plan"] = {**kube.status["plan"], "classes": {n: {**c, "routing": dict(c["routing"])}
                                                            for n, c in classes.items()}}
    del kube.status["plan"]["detail"]
    router = copy.deepcopy(kube.configmaps["router"])
    assert reconcile(kvplan(copy.deepcopy(SPEC), kube), deps(kube, planner=planner)).ok
    assert planner.previous[1] is not None and planner.previous[1].objective == first.objective
    assert "lastGoodPlan" not in kube.status and "classes" not in kube.status["plan"]
    assert kube.configmaps["router"] == router  # the same plan, published as before
    assert detail_document(kube.configmaps.get)["plan"] == kube.status["plan"]["id"]


def test_status_keeps_counts_and_the_largest_changes_only(kube):
    """status.diff: every kind's count and the TOP_CHANGES largest, largest first; the detail has every change."""
    from kvcore.planner.planmodel import PlanDiff
    from kvplan_operator.record.status import TOP_CHANGES, diff_body

    lines = [f"c{i}: {100 + i} -> {100 + 3 * i}" for i in range(30)]
    plan = Plan.model_validate({"status": "feasible", "reason": "x",
                                "diff": PlanDiff(reservations=lines, admission=["c9: new -> admitted"]).model_dump()})
    body = diff_body(plan)
    assert body is not None and body["counts"] == {"layouts": 0, "replicas": 0, "reservations": 30, "admission": 1,
                                                   "routing": 0}
    assert body["reservations"] == [f"c{i}: {100 + i} -> {100 + 3 * i}" for i in range(29, 29 - TOP_CHANGES, -1)]
    assert body["admission"] == ["c9: new -> admitted"]
    assert json.dumps(body)  # JSON-ready


@pytest.mark.parametrize(("name", "clash"), [("fleet-plan", True), ("fleet-plan-3", True), ("fleet-planner", False),
                                             ("fleet-plan-x", False), ("other-plan", True), ("fleet-kvplan", True),
                                             ("other-kvplan", True)])
def test_the_router_configmap_cannot_be_one_of_this_kvplans_own(kube, name, clash):
    """This KVPlan's own ConfigMaps, and (issue 26) any name of their forms, which another KVPlan's could have: the
    spec is refused, naming the field."""
    from kvplan_operator import conditions as C

    spec = copy.deepcopy(SPEC)
    spec["router"] = {"configMap": {"name": name}}
    out = reconcile(kvplan(spec, kube), deps(kube))
    assert (out.reason == C.INVALID_SPEC) == clash, out
    if clash:
        assert "spec.router.configMap.name" in out.message
        assert name in out.message and kube.deployments["vllm-big"] == dep("vllm-big")  # nothing applied
