"""Honest state, through whole reconciles over the operator's wrapper (a fake cluster, a scripted planner):

- the disruption budget holds through lasting failures: with every HTTPRoute patch refused (422) and a planner that
  flips between two layouts each re-plan, a budget of 0 (the issue's case: 12 re-layouts per hour before) allows
  none, and a budget of 1 allows exactly one per hour; the record is on the cluster (state ConfigMap), so a
  restart with an emptied status does not reset it;
- a failed apply leaves ``status.plan`` and the plan's detail alone and says what it wrote before failing;
- a Deployment (or router ConfigMap, or HTTPRoute) owned by another existing KVPlan is refused with
  ``OwnedByOther`` and nothing is written; once that KVPlan is gone, it is adopted;
- the hold plan never pins a layout the spec does not allow;
- the production-stack layout (vLLM flags inside ``sh -c``) is re-laid out inside the string, and a layout the
  Deployment cannot express (``--tensor-parallel-size $TP``) is refused with ``UnsupportedContainerLayout``;
- HTTPRoute backendRefs of kind InferencePool get their group's weight; a pool that does not select its group's pods
  is refused (``RouterTargetInvalid``)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from kvplan_operator import conditions as C
from kvplan_operator.reconcile import Deps, reconcile
from op_fakes import FakeKube, Fault, ScriptedKnobs, container, dep, kvplan  # type: ignore[import-not-found]
from operator_checks import container_flags, detail_document  # type: ignore[import-not-found]
from op_faults_world import T0, busy, fixed_plan, route  # type: ignore[import-not-found]
from op_history_world import RecordedProm  # type: ignore[import-not-found]
from op_targets_world import SPEC  # type: ignore[import-not-found]


class FlipPlanner:
    """Free plans alternate big between TP 8 and TP 4 (each a 50 % gain); the hold plan keeps the current one."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, instance: Any, *, previous: Any = None) -> Any:
        layouts = instance.groups[0].layouts
        if len(layouts) == 1:  # hold: pinned to the current layout
            return fixed_plan(layouts[0].tp, 100.0, 0.5)
        self.n += 1
        return fixed_plan(8 if self.n % 2 == 0 else 4, 50.0, 0.3 + 0.05 * (self.n % 2))


def world(**spec_changes: Any) -> tuple[FakeKube, dict]:
    kube = FakeKube(deployments={"vllm-big": dep("vllm-big"), "vllm-small": dep("vllm-small")},
                    httproutes={"llm": route()})
    spec = copy.deepcopy(SPEC) | spec_changes
    return kube, spec


def deps(kube: FakeKube, planner: Any, now: float) -> Deps:
    prom = RecordedProm(matrix=busy())
    return Deps(kube=kube, prom_factory=lambda *a: prom, planner=planner, clock=lambda: now,
                resolve=lambda host: ["10.0.0.9"], knobs=ScriptedKnobs())


def cond(kube: FakeKube, type_: str) -> dict:
    return next(c for c in kube.status["conditions"] if c["type"] == type_)


def test_a_refused_httproute_causes_no_rollout():
    """The issue's case: every HTTPRoute patch refused (422), a budget of 0, a spec change, and re-plans that keep
    proposing another layout (12 rollouts an hour before). Routing moves first, so a refusal stops an apply before
    any Deployment is re-laid out, and the spec change is spent once the Deployments carry its generation: no
    rollout at all; every apply that needed the route is reported as ApplyFailed."""
    kube, spec = world(replan={"maxLayoutChangesPerHour": 0})
    planner = FlipPlanner()
    assert reconcile(kvplan(spec, kube), deps(kube, planner, T0)).ok
    layout = container_flags(kube.deployments["vllm-big"])
    kube.faults = [Fault("patch_httproute", "422", nth=0)]  # every call
    reasons = []
    for k in range(1, 13):
        out = reconcile(kvplan(spec, kube, generation=2), deps(kube, planner, T0 + 300 * k))
        reasons.append(out.reason)
        assert container_flags(kube.deployments["vllm-big"]) == layout, (k, reasons)
        assert out.reason != C.APPLY_FAILED or "patch_httproute llm: 422 Invalid" in out.message
    assert reasons.count(C.APPLY_FAILED) >= 6, reasons


@pytest.mark.parametrize(("budget", "allowed"), [pytest.param(0, 0, id="budget-0"), pytest.param(1, 1, id="budget-1")])
def test_budget_counts_attempts_and_survives_failures_and_restarts(budget, allowed):
    """After adoption, the planner flips big between TP 8 and TP 4 every re-plan (a 50 % gain each time); whenever a
    run patches a Deployment, its final HTTPRoute patch is refused. Over an hour: at most ``budget`` re-layouts, the
    attempt counted though its apply failed; wiping status halfway (a restart that lost it) resets nothing."""
    kube, spec = world(replan={"maxLayoutChangesPerHour": budget})
    planner = FlipPlanner()
    assert reconcile(kvplan(spec, kube), deps(kube, planner, T0)).ok

    def refuse_route_after_rollout(k: FakeKube, label: str) -> None:
        if label.startswith("patch Deployment/"):
            k.faults = [Fault("patch_httproute", "422", nth=0)]

    kube.on_write = refuse_route_after_rollout
    layouts, reasons = [container_flags(kube.deployments["vllm-big"])], []
    for k in range(1, 13):  # one hour at a 5-minute interval
        kube.faults = []
        if k == 6:
            kube.status = {}  # status lost: the budget record lives on the cluster (state ConfigMap)
        reasons.append(reconcile(kvplan(spec, kube), deps(kube, planner, T0 + 300 * k)).reason)
        layouts.append(container_flags(kube.deployments["vllm-big"]))
    changes = sum(1 for a, b in zip(layouts, layouts[1:]) if a != b)
    assert changes == allowed, (layouts, reasons)
    assert reasons.count(C.APPLY_FAILED) == allowed  # the re-layout's apply failed, and still counted
    record = json.loads(kube.configmaps["fleet-kvplan"]["metadata"]["annotations"]["kvplan.io/layout-changes"])
    assert len(record) == allowed
    for k in range(13, 16):  # an hour after the attempt the budget has room again
        kube.faults = []
        reconcile(kvplan(spec, kube), deps(kube, planner, T0 + 300 * k + 3600))
        layouts.append(container_flags(kube.deployments["vllm-big"]))
    assert sum(1 for a, b in zip(layouts[12:], layouts[13:]) if a != b) == allowed


def test_failed_apply_keeps_the_last_good_plan_and_says_what_it_wrote():
    kube, spec = world()
    planner = FlipPlanner()
    assert reconcile(kvplan(spec, kube), deps(kube, planner, T0)).ok  # adoption at TP 4
    good = copy.deepcopy(kube.status)
    good_detail = detail_document(kube.configmaps.get)
    kube.faults = [Fault("patch_httproute", "500", nth=2)]  # the route's final patch, after the re-layout to TP 8
    out = reconcile(kvplan(spec | {"replan": {"maxLayoutChangesPerHour": 5}}, kube, generation=2),
                    deps(kube, planner, T0 + 300))
    assert out.reason == C.APPLY_FAILED and out.retry_after is not None
    st = kube.status
    assert st["plan"] == good["plan"] and detail_document(kube.configmaps.get) == good_detail
    assert st["lastError"]["failedAt"] == "HTTPRoute/llm" and st["lastError"]["phase"] == "apply"
    assert any(a.startswith("Deployment/vllm-big") for a in st["lastError"]["applied"])
    assert "applying" not in st
    assert cond(kube, C.APPLIED)["status"] == "False" and "500 InternalError" in cond(kube, C.APPLIED)["message"]
    assert cond(kube, C.READY)["reason"] == C.APPLY_FAILED


@pytest.mark.parametrize(
    ("where", "alive", "reason"),
    [
        pytest.param("deployment", True, C.OWNED_BY_OTHER, id="deployment-owned-by-live-kvplan"),
        pytest.param("router", True, C.OWNED_BY_OTHER, id="router-configmap-owned"),
        pytest.param("route", True, C.OWNED_BY_OTHER, id="httproute-owned"),
        pytest.param("deployment", False, None, id="owner-deleted-adopted"),
    ],
)
def test_owned_by_another_kvplan(where, alive, reason):
    kube, spec = world()
    other = {"kvplan.io/owner": "ns/other"}
    if where == "deployment":
        kube.deployments["vllm-big"]["metadata"]["annotations"] = dict(other)
    elif where == "router":
        kube.configmaps["router"] = {"metadata": {"name": "router", "annotations": dict(other)},
                                     "data": {"routing.json": "{}"}}
    else:
        kube.httproutes["llm"]["metadata"]["annotations"] = dict(other)
    if alive:
        kube.kvplans["other"] = kvplan(spec, kube, name="other")
    before = copy.deepcopy((kube.deployments, kube.configmaps, kube.httproutes))
    out = reconcile(kvplan(spec, kube), deps(kube, FlipPlanner(), T0))
    if reason is None:
        assert out.ok, out
        assert kube.deployments["vllm-big"]["metadata"]["annotations"]["kvplan.io/owner"] == "ns/fleet"
        return
    assert out.reason == reason and "managed by KVPlan ns/other" in out.message
    assert (kube.deployments, kube.configmaps, kube.httproutes) == before
    assert [w for w in kube.writes if w != "status"] == []
    assert cond(kube, C.READY)["reason"] == reason


def test_hold_never_pins_a_layout_the_spec_does_not_allow():
    """big runs TP 2 under kvplan's annotation (an older spec allowed it); the spec now allows 4 and 8, the budget is
    spent: the hold plan must not pin TP 2, and big moves to an allowed layout."""
    kube, spec = world(replan={"maxLayoutChangesPerHour": 0})
    big = kube.deployments["vllm-big"]
    big["metadata"]["annotations"].update({"kvplan.io/layout": "tp=2,pp=1,replicas=8", "kvplan.io/generation": "1",
                                           "kvplan.io/owner": "ns/fleet"})
    container(big)["args"] = ["--model", "m", "--tensor-parallel-size", "2"]
    kube.status = {"plannedGeneration": 1}
    seen: list[list[tuple[int, int]]] = []

    def planner(instance: Any, *, previous: Any = None) -> Any:
        seen.append([(lay.tp, lay.pp) for lay in instance.groups[0].layouts])
        return fixed_plan(max(lay.tp for lay in instance.groups[0].layouts), 50.0, 0.5)

    out = reconcile(kvplan(spec, kube), deps(kube, planner, T0))
    assert out.ok, out
    assert all((2, 1) not in layouts for layouts in seen), seen
    assert container_flags(kube.deployments["vllm-big"]) in {(4, 1), (8, 1)}
    assert "not in the spec's allowed layouts" in kube.status["plan"]["decision"]


PRODUCTION_STACK = ("pip install -q extra && vllm serve /data/llama --host 0.0.0.0 --port 8000 "
                    "--tensor-parallel-size 1 --enable-prefix-caching")


def test_production_stack_shell_string_is_edited_in_place():
    kube, spec = world()
    big = container(kube.deployments["vllm-big"])
    big["command"], big["args"] = ["/bin/bash", "-c"], [PRODUCTION_STACK]
    out = reconcile(kvplan(spec, kube), deps(kube, FlipPlanner(), T0))
    assert out.ok, out
    big = container(kube.deployments["vllm-big"])
    tp = kube.status["plan"]["groups"]["big"]["tp"]
    assert big["command"] == ["/bin/bash", "-c"] and len(big["args"]) == 1
    script = big["args"][0]
    assert f"--tensor-parallel-size {tp} " in script and script.count("--tensor-parallel-size") == 1
    assert script.startswith("pip install -q extra && vllm serve ") and "--pipeline-parallel-size 1" in script
    kube.writes.clear()
    assert reconcile(kvplan(spec, kube), deps(kube, FlipPlanner(), T0 + 60)).changed == []


def test_unexpressible_layout_is_refused_not_appended():
    kube, spec = world()
    big = container(kube.deployments["vllm-big"])
    big["command"], big["args"] = ["sh", "-c", "vllm serve /m --tensor-parallel-size $TP"], []
    before = copy.deepcopy(kube.deployments)
    out = reconcile(kvplan(spec, kube), deps(kube, FlipPlanner(), T0))
    assert out.reason == C.UNSUPPORTED_CONTAINER_LAYOUT and "$TP" in out.message
    assert kube.deployments == before and [w for w in kube.writes if w != "status"] == []
    assert cond(kube, C.APPLIED)["reason"] == C.UNSUPPORTED_CONTAINER_LAYOUT


def pool(name: str, app: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": {"app": app}},
                                                 "targetPorts": [{"number": 8000}],
                                                 "endpointPickerRef": {"name": "epp", "port": {"number": 9002}}}}


def test_inferencepool_backendrefs_get_their_groups_weights():
    kube, spec = world()
    spec["groups"][0]["inferencePool"], spec["groups"][1]["inferencePool"] = "pool-big", "pool-small"
    kube.inferencepools = {"pool-big": pool("pool-big", "vllm-big"), "pool-small": pool("pool-small", "vllm-small")}
    ref = {"group": "inference.networking.k8s.io", "kind": "InferencePool", "weight": 1}
    kube.httproutes["llm"]["spec"]["rules"] = [
        {"matches": [{"headers": [{"name": "x-gateway-inference-objective", "value": "chat"}]}],
         "backendRefs": [ref | {"name": "pool-big"}, ref | {"name": "pool-small"}]},
        {"backendRefs": [ref | {"name": "pool-big"}, ref | {"name": "pool-small"},
                         ref | {"name": "pool-big", "namespace": "elsewhere", "weight": 7}]}]
    assert reconcile(kvplan(spec, kube), deps(kube, FlipPlanner(), T0)).ok
    chat = detail_document(kube.configmaps.get)["classes"]["chat"]["routing"]
    rules = kube.httproutes["llm"]["spec"]["rules"]
    assert [b["weight"] for b in rules[0]["backendRefs"]] == [round(chat["big"] * 1000), round(chat["small"] * 1000)]
    assert sum(b["weight"] for b in rules[1]["backendRefs"][:2]) == 1000
    assert rules[1]["backendRefs"][2]["weight"] == 7  # a pool in another namespace is not the group's
    doc = json.loads(kube.configmaps["router"]["data"]["routing.json"])
    assert doc["groups"]["big"]["inferencePool"] == "pool-big"


@pytest.mark.parametrize(
    ("pools", "needle"),
    [
        pytest.param({"pool-big": pool("pool-big", "vllm-small")}, "selects {'app': 'vllm-small'}", id="wrong-pods"),
        pytest.param({}, "InferencePool pool-big not found", id="missing"),
    ],
)
def test_inferencepool_that_is_not_the_group_is_refused(pools, needle):
    kube, spec = world()
    spec["groups"][0]["inferencePool"] = "pool-big"
    kube.inferencepools = pools
    before = copy.deepcopy(kube.deployments)
    out = reconcile(kvplan(spec, kube), deps(kube, FlipPlanner(), T0))
    assert out.reason == C.ROUTER_TARGET_INVALID and needle in out.message
    assert "spec.groups[0].inferencePool" in out.message and kube.deployments == before
