"""The shared world of ``test_op_faults.py`` and the tests that reuse it: fault injection over every call the operator makes (issue 12): a reconcile that re-lays-out one group and moves."""

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


T0 = 1700007200.0


GROUPS = {"big": "vllm-big", "small": "vllm-small"}


SERVICES = {"big": "vllm-big", "small": "small-svc"}


BUDGET = 1


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
        {"matches": [{"headers": [{"name": "x-gateway-inference-objective", "value": "chat"}]}],
         "backendRefs": [svc("vllm-big"), svc("small-svc")]},
        {"matches": [{"headers": [{"name": "x-gateway-inference-objective", "value": "code-gen"}]}],
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
        self.real_client = real_client  # True: operator/prom/__init__.py's HTTP client against spec.prometheus.url
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
