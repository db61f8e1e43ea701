"""Fault injection over every call the operator makes (issue 12): a reconcile that re-lays-out one group and moves
routing (router ConfigMap, HTTPRoute with class rules and a fleet rule, bearer-token Secret, autoscaler list, state
ConfigMap, two Deployments, status, events) is run once cleanly to list its Kubernetes calls; then

- **Kubernetes matrix**: each of those calls, in turn, fails with each error class (403, 404, 409, 422, 500,
  client timeout) -- at the level of the operator's own wrapper (``KubeApi``), the raw kubernetes client guarded
  "must not be called";
- **kill -9 matrix**: the operator dies right after each single write of the clean run (nothing after it runs);
- in four reconciles: first adoption; a re-layout; InferencePools and a stale foreign owner; and engine knobs with
  kvplan's plugin on both groups (each with its own reservation file; a reservation-file change and a knob change
  that restarts a managed Deployment: issue 13);
- the **Prometheus matrix** is in test_op_faults_prom.py, over this file's world and checks.

For every scenario: no exception leaves ``reconcile``; a failure carries a named reason (the expected one for the
call and error class) in the outcome and in status; the last good plan stays in status; no two objects disagree
(``operator_checks.disagreements``: annotations vs flags, router document vs Deployments, status vs everything);
the disruption budget (1 restart per hour here: re-layouts and knob changes, counted as pod-template changes of
Deployments kvplan already managed) is never exceeded, across the faulty run and the recovery runs
that follow; and once the fault is gone the operator converges (the plan is applied, a further run writes
nothing but status). Each matrix prints its counts (``pytest -s``)."""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any
import pytest
from kvcore.planner.planmodel import ClassPlan, GroupPlan, ObjectiveTerms, Plan, PlanStatus
from kvplan_operator import conditions as C
from kvplan_operator.kube import KubeError
from kvplan_operator.prom import PromClient
from kvplan_operator.reconcile import Deps, reconcile
from op_fakes import (ERRORS, READS, FakeKube, Fault, Killed, ScriptedKnobs,  # type: ignore[import-not-found]
                      ScriptedReserves, dep, kvplan)
from operator_checks import detail_document, disagreements, router_document  # type: ignore[import-not-found]
from op_history_world import MATRIX, RecordedProm  # type: ignore[import-not-found]
from op_targets_world import SPEC  # type: ignore[import-not-found]
from op_faults_world import (BUDGET, GROUPS, Planner, RECORD, SCENARIOS, SERVICES, StageKnobs, T0, World, adopt, baseline, busy, check, expected_reason, fixed_plan, knob_change, pools, raw_client_must_not_be_called, recover, reference_calls, report, route, spec)  # noqa: F401 - fixtures are found by name


def test_write_order_routes_away_first_and_counts_the_relayout_before_it():
    """The clean re-layout: status says which plan is being applied, routing moves off big, the state ConfigMap
    records the attempt, the Deployment rolls, routing follows, the plan's detail is stored and status names it;
    the budget record is on the cluster."""
    world = World()
    baseline(world)
    out = world.reconcile(T0 + 60)
    assert out.ok, out
    assert world.kube.writes == ["status", "patch ConfigMap/router", "patch HTTPRoute/llm",
                                 "patch ConfigMap/fleet-kvplan", "patch Deployment/vllm-big",
                                 "patch ConfigMap/router", "patch HTTPRoute/llm", "patch ConfigMap/fleet-plan",
                                 "status"]
    changes = json.loads(world.kube.configmaps["fleet-kvplan"]["metadata"]["annotations"]["kvplan.io/layout-changes"])
    assert [c["layouts"] for c in changes] == ["big=8x1,small=1x1"] and world.relayouts == 1
    assert world.kube.status["layoutChanges"] == [c["t"] for c in changes]
    assert "applying" not in world.kube.status and world.disagreements() == []


def test_knob_change_is_recorded_before_the_deployment_and_spends_the_budget():
    """The clean engine-knob run: the state ConfigMap (new reservation file, the knob restart recorded) before small's
    Deployment; big (plugin on) is patched only in its annotations, so its pods keep running; a further knob change
    within the hour is held."""
    world = World(engine=True)
    knob_change(world)
    big_template = copy.deepcopy(world.kube.deployments["vllm-big"]["spec"]["template"])
    out = world.reconcile(T0 + 60)
    assert out.ok, out
    writes = [w for w in world.kube.writes if w != "status"]
    assert writes.index("patch ConfigMap/fleet-kvplan") < writes.index("patch Deployment/vllm-small"), writes
    state = world.kube.configmaps["fleet-kvplan"]
    changes = json.loads(state["metadata"]["annotations"]["kvplan.io/layout-changes"])
    assert [c["layouts"] for c in changes] == [
        "knobs:small=32/0.05/priority/kvplan_vllm.scheduler.AsyncReservationScheduler"]
    assert json.loads(state["data"]["reservations-big.json"])["classes"]["chat"] == {"reserveTokens": 325}
    assert json.loads(state["data"]["reservations-small.json"])["classes"]["chat"] == {"reserveTokens": 40}
    assert world.kube.deployments["vllm-big"]["spec"]["template"] == big_template
    assert (world.restarts, world.relayouts) == (1, 0) and world.disagreements() == []
    world.knobs = ScriptedKnobs({"small": (16, 0.1, "priority")})
    assert world.reconcile(T0 + 120).ok and world.restarts == 1  # held: the budget (1 per hour) is spent
    cond = next(c for c in world.kube.status["conditions"] if c["type"] == C.ENGINE_KNOBS)
    assert cond["reason"] == C.KNOBS_HELD and world.disagreements() == []


@pytest.mark.slow
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_kubernetes_fault_matrix(scenario):
    prepare, t, tp, kw = SCENARIOS[scenario]
    calls = reference_calls(scenario)
    methods = {m for m, _ in calls}
    assert methods >= {"get_deployment", "autoscaled_deployments", "get_configmap", "get_httproute",
                       "read_secret_key", "patch_deployment", "patch_httproute", "patch_kvplan_status"}, calls
    assert methods >= {"adopt": {"create_configmap", "post_event"}, "relayout": {"patch_configmap"},
                       "pools-and-stale-owner": {"get_inferencepool", "get_kvplan"},
                       "knobs-and-plugin": {"patch_configmap"}}[scenario], calls
    failures: list[str] = []
    counts: Counter = Counter()
    seen: Counter = Counter()
    for method, name in calls:
        seen[(method, name)] += 1
        for error in ERRORS:
            label = f"{scenario}: {method}({name})#{seen[(method, name)]} {error}"
            world = World(**kw)
            good = prepare(world)
            world.kube.faults = [Fault(method, error, nth=seen[(method, name)], name=name)]
            counts["scenarios"] += 1
            try:
                out = world.reconcile(t)
            except Exception as exc:  # the thing this test exists to rule out
                counts["exceptions"] += 1
                failures.append(f"{label}: {type(exc).__name__} escaped reconcile: {exc}")
                continue
            counts[f"reason:{out.reason}"] += 1
            check(world, out, good, expect=expected_reason(method, error, name), label=label, failures=failures)
            counts["disagreements"] += bool(world.disagreements())
            recover(world, t, failures, label, want_tp=tp)
            if world.restarts > BUDGET:
                counts["budget"] += 1
                failures.append(f"{label}: {world.restarts} restarts against a budget of {BUDGET}")
    report(f"kubernetes faults, {scenario}: {len(calls)} calls x {len(ERRORS)} error classes", counts, failures)
    assert counts["scenarios"] == len(ERRORS) * len(calls)
    assert failures == [], "\n".join(failures[:40])
    assert (counts["exceptions"], counts["disagreements"], counts["budget"]) == (0, 0, 0)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_kill_after_every_write_converges(scenario):
    prepare, t, tp, kw = SCENARIOS[scenario]
    world = World(**kw)
    prepare(world)
    world.reconcile(t)
    clean_writes = len(world.kube.writes)
    failures: list[str] = []
    counts: Counter = Counter()
    for w in range(1, clean_writes + 1):
        label = f"{scenario}: kill after write {w}"
        world = World(**kw)
        good = prepare(world)
        world.kube.writes_done = 0
        world.kube.kill_after_write = w
        counts["scenarios"] += 1
        try:
            world.reconcile(t)
            failures.append(f"{label}: the run was not killed")
        except Killed as killed:
            counts[f"reason:killed after {killed}"] += 1
        except Exception as exc:
            counts["exceptions"] += 1
            failures.append(f"{label}: {type(exc).__name__} escaped reconcile: {exc}")
            continue
        if world.kube.status.get("plan") != good["status"].get("plan") and w < clean_writes:
            failures.append(f"{label}: status.plan changed before the apply finished")
        if detail_document(world.kube.configmaps.get) != good["detail"] and w < clean_writes - 1:
            failures.append(f"{label}: the plan's detail changed before the apply finished")
        found = world.disagreements()
        counts["disagreements"] += bool(found)
        if found:
            failures.append(f"{label}: disagreeing objects right after the kill: {found}")
        recover(world, t, failures, label, want_tp=tp)
        if world.restarts > BUDGET:
            counts["budget"] += 1
            failures.append(f"{label}: {world.restarts} restarts against a budget of {BUDGET}")
    report(f"kill -9 after each write, {scenario}", counts, failures)
    assert clean_writes >= 6 and counts["scenarios"] == clean_writes
    assert failures == [], "\n".join(failures)


def test_kube_error_messages_carry_code_and_class_only():
    err = KubeError("patch HTTPRoute/llm", "Invalid", 422, "spec.rules[0].backendRefs[0].weight: must be <= 1000000")
    assert str(err) == "patch HTTPRoute/llm: 422 Invalid (spec.rules[0].backendRefs[0].weight: must be <= 1000000)"
    assert str(KubeError("get Deployment/a", "Timeout")) == "get Deployment/a: Timeout"
