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
from test_op_history import MATRIX, RecordedProm  # type: ignore[import-not-found]
from test_op_targets import SPEC  # type: ignore[import-not-found]

T0 = 1700007200.0
GROUPS = {"big": "vllm-big", "small": "vllm-small"}
SERVICES = {"big": "vllm-big", "small": "small-svc"}
BUDGET = 1
#: The record: status and its overflow, the plan's detail ConfigMap (rewritten when the recorded diff changes).
RECORD = ("status", "patch ConfigMap/fleet-plan")


def fixed_plan(tp_big: int, total: float, chat_big: float, reserve_chat: int = 500) -> Plan:
    groups = [GroupPlan(name="big", tp=tp_big, pp=1, replicas=16 // tp_big, gpus_per_replica=tp_big,
                        kv_capacity_tokens=400_000.0, throughput_tokens_s=2000.0, utilisation=0.3),
              GroupPlan(name="small", tp=1, pp=1, replicas=8, gpus_per_replica=1, kv_capacity_tokens=400_000.0,
                        throughput_tokens_s=4000.0, utilisation=0.3)]
    classes = [ClassPlan(name="chat", reserve_tokens=reserve_chat, admitted=True,
                         routing={"big": chat_big, "small": round(1 - chat_big, 6)}),
               ClassPlan(name="code-gen", reserve_tokens=100, admitted=True, routing={"big": 0.2, "small": 0.8})]
    return Plan(status=PlanStatus.FEASIBLE, reason="scripted", groups=groups, classes=classes,
                objective=ObjectiveTerms(reservation=total, configuration=0, queueing=0, rejection=0, total=total))


class Planner:
    """Stage 0: big at TP 4. Later: the free plan wants TP 8 and new routing (objective 50); the hold plan (big pinned
    to its current layout) keeps TP 4 (objective 100) -- a 50 % gain, so only the budget can hold it back."""

    def __init__(self) -> None:
        self.stage = 0

    def __call__(self, instance: Any, *, previous: Plan | None = None) -> Plan:
        if self.stage == 0:
            return fixed_plan(4, 100.0, 0.5)
        if self.stage == 2:  # no re-layout: new routing and reservations (the engine-knob scenario)
            return fixed_plan(4, 100.0, 0.7, reserve_chat=650)
        pinned = len(instance.groups[0].layouts) == 1
        return fixed_plan(4, 100.0, 0.6) if pinned else fixed_plan(8, 50.0, 0.8)


def route() -> dict:
    def svc(name: str, weight: int = 1) -> dict:
        return {"group": "", "kind": "Service", "name": name, "port": 8000, "weight": weight}

    return {"metadata": {"name": "llm", "namespace": "ns", "annotations": {}}, "spec": {"rules": [
        {"matches": [{"headers": [{"name": "x-kvplan-class", "value": "chat"}]}],
         "backendRefs": [svc("vllm-big"), svc("small-svc")]},
        {"matches": [{"headers": [{"name": "x-kvplan-class", "value": "code-gen"}]}],
         "backendRefs": [svc("vllm-big"), svc("small-svc")]},
        {"backendRefs": [svc("vllm-big"), svc("small-svc"), svc("canary", 5)]}]}}


def spec(prom_url: str = "http://10.0.0.9:9090") -> dict:
    s = copy.deepcopy(SPEC)
    s["prometheus"] = {"url": prom_url, "authSecretRef": {"name": "prom-token"}, "timeoutSeconds": 1,
                       "lookback": "3h", "windows": 3}
    s["replan"] = {"maxLayoutChangesPerHour": BUDGET}
    del s["classes"][0]["arrivalRate"]
    s["classes"][0]["arrivalRateQuery"] = 'sum(rate(vllm:request_success_total{model_name="chat"}[5m]))'
    return s


def busy(scale: float = 20.0) -> list:
    m = copy.deepcopy(MATRIX)
    for s in m:
        s["values"] = [[t, str(float(v) * scale)] for t, v in s["values"]]
    return m


@pytest.fixture(autouse=True)
def raw_client_must_not_be_called(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Kubernetes call goes through the wrapper's protocol (here the fake); the raw client must not be called."""
    from kubernetes.client import api_client, rest

    def refuse(*a: Any, **k: Any) -> Any:
        raise AssertionError("the raw kubernetes client must not be called")

    monkeypatch.setattr(api_client.ApiClient, "call_api", refuse)
    monkeypatch.setattr(rest.RESTClientObject, "request", refuse)


def pools(world: World) -> None:
    """InferencePool backendRefs (one pool per group, checked against the pods) and a Deployment whose
    ``kvplan.io/owner`` names a KVPlan that no longer exists (read, then adopted)."""
    for i, (g, d) in enumerate(GROUPS.items()):
        world.spec["groups"][i]["inferencePool"] = f"pool-{g}"
        world.kube.inferencepools[f"pool-{g}"] = {"metadata": {"name": f"pool-{g}"}, "spec": {
            "selector": {"matchLabels": {"app": d}}, "targetPorts": [{"number": 8000}],
            "endpointPickerRef": {"name": f"epp-{g}", "port": {"number": 9002}}}}
    pool = {"group": "inference.networking.k8s.io", "kind": "InferencePool", "weight": 1}
    world.kube.httproutes["llm"]["spec"]["rules"].append(
        {"backendRefs": [pool | {"name": "pool-big"}, pool | {"name": "pool-small"}]})
    world.kube.deployments["vllm-small"]["metadata"]["annotations"]["kvplan.io/owner"] = "ns/deleted-plan"


class StageKnobs(ScriptedKnobs):
    """The knob rule of the engine scenario: stock vLLM at stage 0; from stage 2 on, small's knobs change (a
    restart of a Deployment kvplan manages, with no re-layout to ride along: it counts in the budget)."""

    def __init__(self, planner: Planner) -> None:
        super().__init__()
        self.planner = planner

    def __call__(self, plan: Any, instance: Any, **kw: Any) -> dict:
        self.knobs = {"small": (32, 0.05, "priority")} if self.planner.stage >= 2 else {}
        return super().__call__(plan, instance, **kw)


class World:
    """A fake cluster, the scripted planner and counters of re-layouts and of restarts (pod-template changes) of
    Deployments kvplan already managed."""

    def __init__(self, prom_url: str = "http://10.0.0.9:9090", *, real_client: bool = False,
                 with_pools: bool = False, engine: bool = False) -> None:
        self.kube = FakeKube(deployments={n: dep(n) for n in GROUPS.values()}, httproutes={"llm": route()},
                             secrets={("prom-token", "token"): "t0k3n"})
        self.planner = Planner()
        self.real_client = real_client  # True: operator/prom.py's HTTP client against spec.prometheus.url
        self.prom = RecordedProm(matrix=busy())
        self.spec = spec(prom_url)
        if with_pools:
            pools(self)
        self.relayouts = self.restarts = 0
        self.knobs = StageKnobs(self.planner) if engine else ScriptedKnobs()
        # the reservations that pay follow the plan's (the files move with it), and differ between the groups
        self.reserves = ScriptedReserves(0.5, reserves={"small": {"chat": 40}})
        if engine:  # kvplan's plugin on both groups: --scheduler-cls, each group's own reservation file mounted
            self.spec["groups"][0]["plugin"] = {"enabled": True}
            self.spec["groups"][1]["plugin"] = {"enabled": True}
        self.kube.on_write = self._count

    def _count(self, kube: FakeKube, label: str) -> None:
        if not label.startswith("patch Deployment/"):
            return
        name = label.split("/", 1)[1]
        before = self._layouts.get(name)
        from operator_checks import annotated_layout, container_flags  # type: ignore[import-not-found]

        after = container_flags(kube.deployments[name])
        if before is not None and before[1] and after != before[0]:
            self.relayouts += 1
        template = json.dumps(kube.deployments[name]["spec"]["template"], sort_keys=True)
        if before is not None and before[1] and template != self._templates.get(name):
            self.restarts += 1
        self._layouts[name] = (after, annotated_layout(kube.deployments[name]) is not None)
        self._templates[name] = template

    def _snapshot_layouts(self) -> None:
        from operator_checks import annotated_layout, container_flags  # type: ignore[import-not-found]

        self._layouts = {n: (container_flags(d), annotated_layout(d) is not None)
                         for n, d in self.kube.deployments.items()}
        self._templates = {n: json.dumps(d["spec"]["template"], sort_keys=True)
                           for n, d in self.kube.deployments.items()}

    def deps(self, now: float) -> Deps:
        prom = self.prom
        factory = PromClient.connect if self.real_client else (lambda conn: prom)
        return Deps(kube=self.kube, prom_factory=factory, planner=self.planner, clock=lambda: now,
                    resolve=lambda host: ["10.0.0.9"], knobs=self.knobs, reserves=self.reserves)

    def reconcile(self, now: float) -> Any:
        self._snapshot_layouts()
        self.kube.writes.clear()
        return reconcile(kvplan(self.spec, self.kube), self.deps(now))

    def state(self) -> dict:
        return copy.deepcopy({"deployments": self.kube.deployments, "configmaps": self.kube.configmaps,
                              "httproutes": self.kube.httproutes, "status": self.kube.status,
                              "detail": detail_document(self.kube.configmaps.get)})

    def restore(self, state: dict) -> None:
        self.kube.deployments = copy.deepcopy(state["deployments"])
        self.kube.configmaps = copy.deepcopy(state["configmaps"])
        self.kube.httproutes = copy.deepcopy(state["httproutes"])
        self.kube.status = copy.deepcopy(state["status"])

    def disagreements(self) -> list[str]:
        return disagreements(deployments=self.kube.deployments, groups=GROUPS,
                             router=router_document(self.kube.configmaps.get("router")),
                             route=self.kube.httproutes.get("llm"), status=self.kube.status, services=SERVICES,
                             state=self.kube.configmaps.get("fleet-kvplan"),
                             detail=detail_document(self.kube.configmaps.get))


def baseline(world: World) -> dict:
    """Stage 0 applied cleanly (big adopted at TP 4); the planner then moves on to stage 1."""
    out = world.reconcile(T0)
    assert out.ok, out
    assert world.disagreements() == []
    world.planner.stage = 1
    return world.state()


def recover(world: World, t: float, failures: list[str], label: str, want_tp: int = 8) -> None:
    """Without the fault, the next reconcile converges: the plan (big at ``want_tp``) applied, nothing disagrees,
    and the reconcile after it writes nothing but (at most) status."""
    world.kube.faults.clear()
    world.kube.kill_after_write = None
    for k in range(2):
        out = world.reconcile(t + 60 * (k + 1))
        if not out.ok:
            failures.append(f"{label}: recovery run {k + 1} failed: {out.reason} {out.message}")
            return
        if world.disagreements():
            failures.append(f"{label}: recovery run {k + 1}: {world.disagreements()}")
    if [w for w in world.kube.writes if w not in RECORD]:
        failures.append(f"{label}: the first reconcile after the fault did not converge; the next wrote "
                        f"{world.kube.writes}")
    plan = world.kube.status["plan"]["groups"]["big"]
    if plan["tp"] != want_tp:
        failures.append(f"{label}: converged on big tp={plan['tp']}, expected {want_tp}")


def expected_reason(method: str, error: str, name: str = "") -> str | None:
    """The outcome's reason when ``method`` (on object ``name``) fails with ``error`` (None: the reconcile still
    succeeds)."""
    if method == "post_event":
        return None  # events are best effort
    if method in ("create_configmap", "patch_configmap") and name == "fleet-plan":
        return C.STATUS_WRITE_FAILED  # the plan's detail is status's overflow: written by the record phase
    if method in READS:
        if error == "404":
            return {"get_deployment": C.DEPLOYMENT_MISSING, "read_secret_key": C.AUTH_SECRET_MISSING,
                    "get_inferencepool": C.ROUTER_TARGET_INVALID}.get(method)
        return C.READ_FAILED
    if method == "patch_kvplan_status":
        return C.STATUS_WRITE_FAILED
    return C.APPLY_FAILED  # (a create's 409 falls back to a patch, which fails here: the fake's object is absent)


def check(world: World, out: Any, good: dict, *, expect: str | None, label: str, failures: list[str]) -> None:
    if expect is None and not out.ok:
        failures.append(f"{label}: expected success, got {out.reason}: {out.message}")
    if expect is not None:
        if out.reason != expect:
            failures.append(f"{label}: reason {out.reason}, expected {expect}")
        if expect != C.STATUS_WRITE_FAILED:
            reasons = {c["reason"] for c in world.kube.status.get("conditions", [])}
            if expect not in reasons:
                failures.append(f"{label}: status has no condition with reason {expect}: {reasons}")
        if world.kube.status.get("plan") != good["status"].get("plan"):
            failures.append(f"{label}: status.plan changed by a failed reconcile")
        if expect != C.STATUS_WRITE_FAILED and detail_document(world.kube.configmaps.get) != good["detail"]:
            failures.append(f"{label}: the plan's detail changed by a failed reconcile")
    found = world.disagreements()
    if found:
        failures.append(f"{label}: disagreeing objects {found}")


def report(name: str, counts: Counter, failures: list[str]) -> None:
    print(f"\n[{name}] scenarios={counts['scenarios']} exceptions={counts['exceptions']} "
          f"disagreements={counts['disagreements']} budget_exceeded={counts['budget']} "
          f"failed_checks={len(failures)}")
    for reason, n in sorted((k, v) for k, v in counts.items() if k.startswith("reason:")):
        print(f"  {reason[7:]}: {n}")


def adopt(world: World) -> dict:
    """Nothing applied yet: the first reconcile adopts both Deployments and creates the ConfigMaps."""
    return world.state()


def knob_change(world: World) -> dict:
    """Stage 0 applied cleanly with kvplan's plugin on big; then routing and reservations move (the reservation
    file changes, no restart) and small's engine knobs change (a restart, counted in the budget)."""
    baseline(world)
    world.planner.stage = 2
    return world.state()


#: name -> (prepare the world and return its good state, time of the faulty run, big's TP once converged, World's
#: keyword arguments)
SCENARIOS = {"adopt": (adopt, T0, 4, {}), "relayout": (baseline, T0 + 60, 8, {}),
             "pools-and-stale-owner": (adopt, T0, 4, {"with_pools": True}),
             "knobs-and-plugin": (knob_change, T0 + 60, 4, {"engine": True})}


def reference_calls(scenario: str) -> list[tuple[str, str]]:
    prepare, t, tp, kw = SCENARIOS[scenario]
    world = World(**kw)
    prepare(world)
    world.kube.calls.clear()
    out = world.reconcile(t)
    assert out.ok and world.kube.status["plan"]["groups"]["big"]["tp"] == tp, out
    return list(world.kube.calls)


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
