"""The classification file's bootstrap (operator/decide/bootstrap.py, build_bootstrap.py, record/bootstrap.py),
through whole reconciles over the operator's wrapper (test_op_engine_knobs.World: a fake cluster, a recorded
Prometheus, a scripted planner):

- when it runs: mode Apply, observe waiting only for the history of ``history.source: kvplan`` classes
  (``MetricAbsent``: only the default label's series; ``TooFewSamples``: no samples), a Deployment lacking the mount
  or holding a stale file; when not: DryRun, a ``vllm``-source class short too, the budget spent (held), already
  mounted and current (nothing written);
- what it writes: the file with the classify and prompt-length rules, nothing reserved, no plan named; only the
  mount on the Deployment (no layout, flags or replicas); the restart in the disruption budget;
- status: Ready False with the observe reason and the bootstrap's message, Applied ClassificationFileMounted,
  ``lastError.classificationFile``; the first plan once the history comes; a last good plan's file left alone.
"""

from __future__ import annotations

import copy

import pytest

from kvcore import RequestView
from kvplan_operator import conditions as C
from kvplan_operator.decide.bootstrap import decide_bootstrap
from kvplan_operator.observe import HistoryAwaited, observe
from kvplan_operator.reconcile import Deps
from kvplan_operator.run import RunContext
from kvplan_operator.targets import plugin_mount as PM
from op_fakes import container, kvplan  # type: ignore[import-not-found]
from op_engine_knobs_world import RECORD, T0, World  # type: ignore[import-not-found]
from op_faults_world import busy  # type: ignore[import-not-found]
from op_history_world import RecordedProm  # type: ignore[import-not-found]
from operator_checks import knob_disagreements  # type: ignore[import-not-found]

GROUPS = {"big": "vllm-big", "small": "vllm-small"}


def world(*, budget: int = 1, absent: str = "MetricAbsent", both: bool = True) -> World:
    """Both classes (or chat only) from the stat logger, code-gen by prompt length, and no classified history."""
    w = World(budget=budget)
    for c in w.spec["classes"][: 2 if both else 1]:
        c["history"] = {"source": "kvplan"}
    w.spec["classes"][1]["maxPromptTokens"] = 4096
    w.spec["classes"][0]["match"] = {"objective": "premium-chat"}
    if absent == "MetricAbsent":
        w.prom_values = ("default",)  # what the stat logger labels every request without the file
    else:
        w.prom_scale = 0.0
    return w


def mounted(d: dict) -> bool:
    pod, c = d["spec"]["template"]["spec"], container(d)
    return (any(v["name"] == PM.VOLUME for v in pod.get("volumes") or [])
            and any(m["mountPath"] == PM.MOUNT_PATH for m in c.get("volumeMounts") or [])
            and any(e["name"] == PM.ENV_FILE for e in c.get("env") or []))


def cluster_writes(w: World) -> list[str]:
    return [x for x in w.kube.writes if x not in RECORD and x != "status"]


def awaited(w: World, t: float = T0) -> HistoryAwaited:
    prom = RecordedProm(matrix=busy(w.prom_scale), values=w.prom_values)
    deps = Deps(kube=w.kube, prom_factory=lambda *a: prom, planner=w.planner, clock=lambda: t,
                resolve=lambda host: ["10.0.0.9"])
    run = RunContext.start(kvplan(w.spec, w.kube, generation=w.generation), t)
    out = observe(run, deps)
    assert isinstance(out, HistoryAwaited), out
    return out


@pytest.mark.parametrize("absent", ["MetricAbsent", "TooFewSamples"])
def test_a_fresh_cluster_gets_the_classification_file_and_waits_for_its_history(absent):
    w = world(absent=absent)
    before = {n: copy.deepcopy(container(d)["args"]) for n, d in w.kube.deployments.items()}
    out = w.run(T0)
    assert not out.ok and out.reason == absent, out
    for group, name in GROUPS.items():
        d = w.kube.deployments[name]
        assert mounted(d) and container(d)["args"] == before[name], name  # only the mount: no layout, no flags
        assert "kvplan.io/layout" not in d["metadata"]["annotations"] and d["spec"]["replicas"] == 1
        doc = w.reservations(group)
        assert set(doc.reserve_tokens.values()) == {0} and doc.plan is None and doc.kvplan == "ns/fleet"
        assert doc.classify(RequestView(prompt_tokens=1000))[0] == "code-gen"
        assert doc.classify(RequestView(headers={"x-gateway-inference-objective": "premium-chat"}))[0] == "chat"
    assert w.budget() == ["knobs:big=None/None/None/classification-file,small=None/None/None/classification-file"]
    ready, applied = w.cond(C.READY), w.cond(C.APPLIED)
    assert ready["status"] == "False" and ready["reason"] == absent
    assert "classification file mounted in Deployment vllm-big, vllm-small since" in ready["message"]
    assert "awaiting classified history of class chat, code-gen" in ready["message"]
    assert applied["status"] == "True" and applied["reason"] == C.CLASSIFICATION_FILE_MOUNTED
    note = w.kube.status["lastError"]["classificationFile"]
    assert note["deployments"] == ["vllm-big", "vllm-small"] and note["awaiting"] == ["chat", "code-gen"]
    assert note["mountedAt"] and "applying" not in w.kube.status
    state = w.kube.configmaps["fleet-kvplan"]
    assert knob_disagreements(deployments=w.kube.deployments, groups=GROUPS, status=w.kube.status,
                              state=state) == []
    out2 = w.run(T0 + 60)  # the same spec: nothing more to write, the same message
    assert out2.reason == absent and cluster_writes(w) == [] and w.cond(C.READY)["message"] == ready["message"]
    w.prom_values, w.prom_scale = ("chat", "code-gen"), 20.0  # the classified history arrives: the first plan
    out3 = w.run(T0 + 120)
    assert out3.ok, out3
    assert all(mounted(d) for d in w.kube.deployments.values()) and w.reservations("big").plan is not None
    assert "lastError" not in w.kube.status and w.flag("--tensor-parallel-size") == "4"


def test_a_changed_rule_rewrites_the_file_without_a_restart():
    w = world()
    w.run(T0)
    budget = w.budget()
    w.generation, w.spec["classes"][1]["maxPromptTokens"] = 2, 2048
    w.run(T0 + 60)
    assert cluster_writes(w) == ["patch ConfigMap/fleet-kvplan"] and w.budget() == budget
    assert w.reservations("small").classify(RequestView(prompt_tokens=3000))[0] != "code-gen"


@pytest.mark.parametrize(("case", "expect"), [
    pytest.param("fresh", {"mount": ("big", "small")}, id="fresh-cluster"),
    pytest.param("dry-run", None, id="dry-run"),
    pytest.param("vllm-short", None, id="a-vllm-class-short-too"),
    pytest.param("budget-spent", {"mount": (), "held": ("big", "small")}, id="budget-spent"),
    pytest.param("mounted", {"mount": (), "files": {}, "mounted": ("big", "small")}, id="already-mounted"),
])
def test_when_the_bootstrap_runs(case, expect):
    w = world(budget=0 if case == "budget-spent" else 1, absent="TooFewSamples", both=case != "vllm-short")
    if case == "dry-run":
        w.spec["mode"] = "DryRun"
    if case == "mounted":
        w.run(T0)
    if case == "vllm-short":  # code-gen (source vllm) has no samples either: there is nothing to bootstrap
        out = w.run(T0)
        assert out.reason == C.TOO_FEW_SAMPLES and cluster_writes(w) == []
        assert "classification" not in w.cond(C.READY)["message"]
        return
    boot = decide_bootstrap(RunContext.start(kvplan(w.spec, w.kube), T0 + 60), awaited(w, T0 + 60))
    if expect is None:
        assert boot is None
        out = w.run(T0)
        assert out.reason == C.TOO_FEW_SAMPLES and cluster_writes(w) == []
        return
    assert boot is not None
    for key, value in expect.items():
        assert getattr(boot, key) == value, key
    if case == "budget-spent":
        out = w.run(T0)
        assert not any(mounted(d) for d in w.kube.deployments.values())
        assert w.cond(C.APPLIED)["reason"] == C.KNOBS_HELD and w.cond(C.ENGINE_KNOBS)["reason"] == C.KNOBS_HELD
        assert "classification file mounted (in force (none))" in w.cond(C.ENGINE_KNOBS)["message"]
        assert out.reason == C.TOO_FEW_SAMPLES and "held" in w.cond(C.READY)["message"]


def test_a_refused_deployment_applies_nothing():
    w = world()
    del w.kube.deployments["vllm-small"]
    out = w.run(T0)
    assert out.reason == C.METRIC_ABSENT and cluster_writes(w) == []
    assert w.cond(C.APPLIED)["reason"] == C.DEPLOYMENT_MISSING
    assert "classification file not mounted: Deployment vllm-small not found" in w.cond(C.READY)["message"]


def test_a_last_good_plans_file_stays_in_force():
    """With a plan in force whose files are mounted, history going missing changes nothing on the cluster."""
    w = world()
    w.prom_values = ("chat", "code-gen")
    assert w.run(T0).ok
    files = copy.deepcopy(w.kube.configmaps["fleet-kvplan"]["data"])
    w.prom_values = ("default",)
    out = w.run(T0 + 60)
    assert out.reason == C.METRIC_ABSENT and cluster_writes(w) == []
    assert w.kube.configmaps["fleet-kvplan"]["data"] == files
    assert all(mounted(d) for d in w.kube.deployments.values())
    assert w.cond(C.READY)["status"] == "True" and w.cond(C.DEGRADED)["status"] == "True"
    assert "keep the last plan's file" in w.cond(C.DEGRADED)["message"]
