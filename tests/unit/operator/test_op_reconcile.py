"""One reconcile, end to end at the level of the operator's own API wrapper (a fake Kube that applies
strategic-merge patches to in-memory objects; Prometheus replays recorded results; the real kvcore planner):
Apply writes Deployments + ConfigMaps + status and a second run writes nothing; DryRun writes only status (and its detail ConfigMap);
Prometheus down / too few samples keep the last good plan (Degraded, retry); missing Deployment, invalid spec,
infeasible plan apply nothing; an HPA keeps replicas; the disruption policy holds or allows re-layouts."""

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
from op_reconcile_world import (NOW, _fixed_plan, _plan, busy_matrix, cond, deps, kube)  # noqa: F401 - fixtures are found by name


def test_apply_then_idempotent(kube):
    spec = copy.deepcopy(SPEC)
    out = reconcile(kvplan(spec, kube), deps(kube))
    assert out.ok, out
    assert cond(kube, C.READY)["status"] == "True" and cond(kube, C.READY)["reason"] == C.RECONCILED
    assert cond(kube, C.APPLIED)["reason"] == C.APPLY_SUCCEEDED
    st = kube.status
    big = kube.deployments["vllm-big"]
    c = big["spec"]["template"]["spec"]["containers"][0]
    g = st["plan"]["groups"]["big"]
    assert c["args"][:6] == ["--model", "m", "--tensor-parallel-size", str(g["tp"]), "--port", "8000"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == str(g["tp"] * g["pp"])
    assert big["spec"]["replicas"] == g["replicas"]
    assert big["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert {e["name"] for e in c["env"]} == {"HF_HOME"}  # no per-class env: nothing would read it
    state = kube.configmaps["fleet-kvplan"]["data"]
    detail = detail_document(kube.configmaps.get)
    assert detail is not None and detail["plan"] == st["plan"]["id"]
    assert st["plan"]["detail"]["configMaps"] == ["fleet-plan"] and "classes" not in st["plan"]
    classes = detail["classes"]
    assert not [k for k in state if k.startswith("KVPLAN_RESERVE_")]
    doc = json.loads(kube.configmaps["router"]["data"]["routing.json"])
    assert doc["classes"]["chat"]["weights"] == pytest.approx(classes["chat"]["routing"], abs=1e-3)
    assert st["objective"]["total"] > 0 and st["summary"] == {"groups": 2, "classes": 2, "refused": 0}
    assert st["plan"]["classCounts"] == {"total": 2, "admitted": 2, "refused": 0}
    assert classes["chat"]["radius"]["rule"] == "drift"
    assert classes["chat"]["samples"] > 0
    assert detail["lastGoodPlan"]["classes"][0]["name"] == "chat" and "lastGoodPlan" not in st
    assert st["observedGeneration"] == 1
    assert (("Normal", C.RECONCILED) in kube.events)
    kube.writes.clear()
    kube.events.clear()
    out2 = reconcile(kvplan(spec, kube), deps(kube))
    assert out2.ok and out2.changed == []
    # the record (status and its detail) now holds a diff against the first plan: empty
    assert [w for w in kube.writes if w != "status"] == ["patch ConfigMap/fleet-plan"]
    assert detail_document(kube.configmaps.get)["diff"] == {k: [] for k in ("admission", "layouts", "replicas",
                                                                           "reservations", "routing")}
    assert kube.events == []
    kube.writes.clear()
    assert reconcile(kvplan(spec, kube), deps(kube)).ok and [w for w in kube.writes if w != "status"] == []


def test_dry_run_touches_nothing_but_status(kube):
    spec = copy.deepcopy(SPEC) | {"mode": "DryRun"}
    before = copy.deepcopy(kube.deployments)
    out = reconcile(kvplan(spec, kube), deps(kube))
    assert out.ok
    # status and its overflow, the plan's detail ConfigMap (the KVPlan's own record), nothing else
    assert kube.writes == ["create ConfigMap/fleet-plan", "status"] and kube.deployments == before
    assert set(kube.configmaps) == {"fleet-plan"} and detail_document(kube.configmaps.get)["classes"]["chat"]
    assert cond(kube, C.APPLIED)["reason"] == C.DRY_RUN and cond(kube, C.READY)["status"] == "True"
    assert kube.status["plan"]["groups"]["big"]["tp"] >= 1


@pytest.mark.parametrize(
    ("prom", "reason"),
    [
        pytest.param(RecordedProm(fail=True), C.PROMETHEUS_UNAVAILABLE, id="prometheus-down"),
        pytest.param(RecordedProm(matrix=busy_matrix(scale=0.5)), C.TOO_FEW_SAMPLES, id="too-few-samples"),
    ],
)
def test_degraded_keeps_last_good_plan(kube, prom, reason):
    spec = copy.deepcopy(SPEC)
    assert reconcile(kvplan(spec, kube), deps(kube)).ok
    good = copy.deepcopy(kube.status["plan"])
    snapshot = copy.deepcopy((kube.deployments, kube.configmaps))
    kube.writes.clear()
    out = reconcile(kvplan(spec, kube), deps(kube, prom=prom))
    assert not out.ok and out.reason == reason and out.retry_after == 10.0
    assert kube.writes == ["status"] and (kube.deployments, kube.configmaps) == snapshot
    assert cond(kube, C.DEGRADED)["status"] == "True" and cond(kube, C.DEGRADED)["reason"] == reason
    assert cond(kube, C.READY)["status"] == "True"  # the last good plan is still applied
    assert kube.status["plan"] == good  # and the detail ConfigMap is in the unchanged snapshot
    assert ("Warning", reason) in kube.events
    out = reconcile(kvplan(spec, kube), deps(kube, prom=prom))
    assert out.retry_after == 20.0  # backoff doubles


def test_deployment_missing_applies_nothing():
    kube = FakeKube({"vllm-big": dep("vllm-big")})
    out = reconcile(kvplan(copy.deepcopy(SPEC), kube), deps(kube))
    assert out.reason == C.DEPLOYMENT_MISSING and out.retry_after is not None
    assert kube.writes == ["status"]
    assert "vllm-small not found" in cond(kube, C.READY)["message"]
    assert "plan" not in kube.status and "fleet-plan" not in kube.configmaps  # status.plan: only what was applied
    assert kube.status["lastError"]["phase"] == "build" and kube.status["lastError"]["planId"]


def test_invalid_spec_applies_nothing(kube):
    spec = copy.deepcopy(SPEC)
    spec["groups"][0]["nodePool"]["gpusPerNode"] = 2  # tp=4/8 do not fit
    out = reconcile(kvplan(spec, kube), deps(kube))
    assert out.reason == C.LAYOUT_EXCEEDS_NODE and out.retry_after is None
    assert kube.writes == ["status"]
    assert cond(kube, C.READY)["reason"] == C.LAYOUT_EXCEEDS_NODE
    spec = copy.deepcopy(SPEC)
    spec["groups"][0]["model"] = "gpt-9"  # passes the schema, unknown to kvcore
    out = reconcile(kvplan(spec, kube), deps(kube))
    assert out.reason == C.INVALID_SPEC and "spec.groups[0].model" in cond(kube, C.READY)["message"]


def test_infeasible_plan_applies_nothing(kube):
    def infeasible(instance, *, previous=None):
        return Plan(status=PlanStatus.INFEASIBLE, reason="KV memory too small for class chat", raw_status="x")

    out = reconcile(kvplan(copy.deepcopy(SPEC), kube), deps(kube, planner=infeasible))
    assert out.reason == C.INFEASIBLE and kube.writes == ["status"]
    assert "KV memory too small" in cond(kube, C.PLANNED)["message"]
    assert kube.status["lastError"]["planner"]["status"] == "infeasible" and "plan" not in kube.status


def test_autoscaler_keeps_replicas(kube):
    kube.scaled = {"vllm-big": "HorizontalPodAutoscaler/big"}
    assert reconcile(kvplan(copy.deepcopy(SPEC), kube), deps(kube)).ok
    assert kube.deployments["vllm-big"]["spec"]["replicas"] == 1
    assert kube.status["plan"]["groups"]["big"]["replicasManagedBy"] == "HorizontalPodAutoscaler/big"
    assert any("replicas left to HorizontalPodAutoscaler/big" in n for n in kube.status["plan"]["notes"])


def test_prometheus_failure_in_snapshot_is_not_an_exception(kube):
    class Broken(RecordedProm):
        def query_range(self, *a, **k):
            raise PrometheusUnavailable("connection refused")

    out = reconcile(kvplan(copy.deepcopy(SPEC), kube), deps(kube, prom=Broken()))
    assert out.reason == C.PROMETHEUS_UNAVAILABLE
    assert cond(kube, C.READY)["status"] == "False"  # no plan ever applied


@pytest.mark.parametrize(
    ("free_total", "changes", "spec_changed", "resuming", "relayout"),
    [
        pytest.param(97.0, 0, False, False, False, id="gain-3pct-held"),
        pytest.param(90.0, 0, False, False, True, id="gain-10pct-relayout"),
        pytest.param(90.0, 2, False, False, False, id="hourly-budget-spent"),
        pytest.param(99.0, 1, True, False, True, id="spec-change-skips-min-improvement"),
        pytest.param(99.0, 2, True, False, False, id="spec-change-never-skips-the-budget"),
        pytest.param(99.0, 5, True, False, False, id="spec-change-budget-overspent"),
        pytest.param(97.0, 5, False, True, True, id="resuming-the-newest-attempt-is-not-counted-again"),
    ],
)
def test_disruption_policy(free_total, changes, spec_changed, resuming, relayout):
    free, hold = _plan(free_total, 8), _plan(100.0, 4)
    d = decide(free, hold, current={"big": (4, 1)}, min_improvement=0.05, changes_last_hour=changes, max_per_hour=2,
               spec_changed=spec_changed, resuming=resuming)
    assert d.relayout is relayout
    assert d.plan is (free if relayout else hold)


@pytest.mark.parametrize(
    ("current", "reason"),
    [
        pytest.param({}, "first layout of big (not yet managed by kvplan)", id="first-adoption"),
        pytest.param({"big": (8, 1)}, "layouts unchanged", id="same-layout"),
    ],
)
def test_no_move_reasons(current, reason):
    """No re-layout either way, but the first plan for an unmanaged group must not claim nothing changed."""
    free = _plan(90.0, 8)
    d = decide(free, None, current=current, min_improvement=0.05, changes_last_hour=0, max_per_hour=2,
               spec_changed=False)
    assert (d.plan, d.relayout, d.reason) == (free, False, reason)


def test_read_layout_and_is_due():
    d = dep("x")
    assert read_layout(d, "vllm") == ((1, 1), False, None)
    d["metadata"]["annotations"]["kvplan.io/layout"] = "tp=4,pp=2,replicas=2"
    assert read_layout(d, "vllm")[:2] == ((4, 2), True)
    body = {"metadata": {"generation": 2}, "status": {"observedGeneration": 2, "lastPlanTime": "2023-11-15T00:00:00Z"}}
    assert not is_due(body, now=1700000000 + 10, interval_s=300, last_attempt=1700000000, retry_at=None)
    assert is_due(body, now=1700000000 + 301, interval_s=300, last_attempt=1700000000, retry_at=None)
    assert is_due(body | {"metadata": {"generation": 3}}, now=0, interval_s=300, last_attempt=None, retry_at=None)
    assert is_due(body, now=1700000000 + 11, interval_s=300, last_attempt=1700000000, retry_at=1700000010)


@pytest.mark.parametrize(
    ("free_total", "max_per_hour", "tp_after", "decision"),
    [
        pytest.param(97.0, 2, 4, "held: objective gain 3.0% < minImprovement 5.0%", id="small-gain-held"),
        pytest.param(50.0, 2, 8, "re-layout of big: objective gain 50.0%", id="big-gain-relayout"),
        pytest.param(50.0, 0, 4, "layout changes in the last hour (maxLayoutChangesPerHour 0)", id="budget-zero"),
    ],
)
def test_reconcile_disruption_control(kube, free_total, max_per_hour, tp_after, decision):
    """First plan adopts tp=4; a later free plan proposes tp=8; hold (pinned) keeps tp=4 at objective 100."""
    calls = []

    def planner(instance, *, previous=None):
        pinned = len(instance.groups[0].layouts) == 1
        calls.append("hold" if pinned else "free")
        if not calls[:-1]:  # the first reconcile: adopt tp=4
            return _fixed_plan(4, 100.0)
        return _fixed_plan(4, 100.0) if pinned else _fixed_plan(8, free_total)

    spec = copy.deepcopy(SPEC)
    spec["replan"] = {"maxLayoutChangesPerHour": max_per_hour}
    assert reconcile(kvplan(spec, kube), deps(kube, planner=planner)).ok
    assert kube.status["plan"]["groups"]["big"]["tp"] == 4
    out = reconcile(kvplan(spec, kube), deps(kube, planner=planner))
    assert out.ok and calls[1:] == ["free", "hold"]
    assert decision in kube.status["plan"]["decision"]
    c = kube.deployments["vllm-big"]["spec"]["template"]["spec"]["containers"][0]
    assert c["args"][c["args"].index("--tensor-parallel-size") + 1] == str(tp_after)
    assert len(kube.status["layoutChanges"]) == (1 if tp_after == 8 else 0)


def test_handlers_translate_outcomes_to_kopf(kube):
    """on_change raises kopf.TemporaryError(delay=backoff) on a temporary failure; the timer reconciles only when
    due (interval elapsed, new generation, or the retry time reached)."""
    import logging
    import types

    import kopf

    from kvplan_operator.handlers import Runtime, on_change, on_timer

    clock = {"now": NOW}
    prom = RecordedProm(matrix=busy_matrix(), fail=True)
    spec = copy.deepcopy(SPEC) | {"replan": {"interval": "5m"}}
    body = kvplan(spec, kube)
    kube.get_kvplan = lambda ns, name: kvplan(spec, kube)  # fresh read, with the stored status
    rt = Runtime(Deps(kube=kube, prom_factory=lambda *a: prom, planner=real_plan, clock=lambda: clock["now"],
                      resolve=lambda host: ["10.0.0.9"], knobs=ScriptedKnobs()))
    memo = types.SimpleNamespace(runtime=rt)
    log = logging.getLogger("test")
    with pytest.raises(kopf.TemporaryError) as info:
        on_change(body=body, memo=memo, logger=log, reason="create")
    assert info.value.delay == 10.0 and C.PROMETHEUS_UNAVAILABLE in str(info.value)
    writes = len(kube.writes)
    clock["now"] += 5
    on_timer(body=body, memo=memo, logger=log)  # retry not due yet
    assert len(kube.writes) == writes
    prom.fail = False
    clock["now"] += 6
    on_timer(body=body, memo=memo, logger=log)  # retry due: recovers
    assert cond(kube, C.READY)["status"] == "True" and cond(kube, C.DEGRADED)["status"] == "False"
    writes = len(kube.writes)
    clock["now"] += 60
    on_timer(body=body, memo=memo, logger=log)  # interval (5 m) not elapsed
    assert len(kube.writes) == writes
    clock["now"] += 300
    calls_before = len(prom.calls)
    on_timer(body=body, memo=memo, logger=log)  # rolling horizon: re-plan
    assert len(prom.calls) > calls_before


def test_handler_read_failure_is_a_retry_not_a_traceback(kube):
    """The handler's fresh read of the KVPlan fails (apiserver down): kopf gets a TemporaryError with one line."""
    import logging
    import types

    import kopf

    from kvplan_operator.handlers import Runtime, on_change
    from kvplan_operator.kube import KubeError

    def down(ns, name):
        raise KubeError(f"get KVPlan/{name}", "Unavailable", detail="ConnectionRefusedError")

    kube.get_kvplan = down
    rt = Runtime(Deps(kube=kube, prom_factory=lambda *a: RecordedProm(), planner=real_plan, clock=lambda: NOW,
                      knobs=ScriptedKnobs()))
    with pytest.raises(kopf.TemporaryError) as info:
        on_change(body=kvplan(copy.deepcopy(SPEC), kube), memo=types.SimpleNamespace(runtime=rt),
                  logger=logging.getLogger("test"), reason="create")
    assert "get KVPlan/fleet: Unavailable" in str(info.value) and kube.writes == []
