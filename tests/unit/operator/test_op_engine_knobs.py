"""Engine knobs and kvplan's vLLM plugin, through whole reconciles over the operator's wrapper (a fake cluster, a
scripted planner, a scripted knob rule; the real rule is tested in test_knobs.py):

- ``engine.knobs: Auto``: the rule's --max-num-seqs, --watermark and --scheduling-policy reach the container (a
  stock value is not appended), status and the router document carry the class priorities, the rule is given the
  knobs in force, a second reconcile writes nothing;
- a knob change restarts pods and counts in the disruption budget like a re-layout: counted when allowed, free
  with a re-layout, held when the budget is spent (status says which knob, planned vs current; the rest of the
  plan applies), allowed once by a spec change;
- an engine too old for a knob: ``--watermark`` below vLLM 0.33, the plugin outside 0.33.x: nothing of it
  written, EngineKnobs=False/KnobUnsupported naming group, version and knob, the rest applied;
- a failing knob rule keeps the knobs in force; the rule's answers are reused while the group's situation holds.
The plugin's own tests are in test_op_plugin.py, the work budget and reservation rule's in test_op_rules.py."""

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
from op_engine_knobs_world import (ASYNC, Planner, RECORD, SYNC, T0, World, fixed_plan)  # noqa: F401 - fixtures are found by name


def test_auto_knobs_reach_the_container_status_and_router():
    w = World()
    w.spec["router"] = {"configMap": {"name": "router"}}
    w.rule = ScriptedKnobs({"big": (64, 0.02, "priority")})
    out = w.run(T0)
    assert out.ok, out
    assert (w.flag("--max-num-active-seqs"), w.flag("--watermark"), w.flag("--scheduling-policy")) == ("64", "0.02",
                                                                                                "priority")
    small = w.args("vllm-small")  # stock knobs: nothing appended (vLLM already runs them)
    assert not {"--max-num-seqs", "--max-num-active-seqs", "--watermark", "--scheduling-policy", "--scheduler-cls"} & set(small)
    eng = w.engine()
    assert (eng["maxNumActiveSeqs"], eng["watermark"], eng["schedulingPolicy"], eng["vllmVersion"]) == (64, 0.02, "priority",
                                                                                                  "0.33.0")
    assert eng["rule"] == "scripted for big" and eng["held"] == [] and eng["schedulerCls"] is None
    assert w.kube.status["plan"]["groups"]["big"]["maxNumActiveSeqs"] == 64
    # priorities: 1 + rank by decreasing rho; chat (rho 10) before code-gen (SLO rho, lower here)
    prio = {c: w.classes()[c]["priority"] for c in ("chat", "code-gen")}
    assert sorted(prio.values()) == [1, 2] and prio["chat"] == 1
    doc = json.loads(w.kube.configmaps["router"]["data"]["routing.json"])
    assert {c: doc["classes"][c]["priority"] for c in prio} == prio
    assert w.files() == [] and w.reserves.calls == []  # no plugin: no reservation file, no reservation rule
    assert w.cond(C.ENGINE_KNOBS)["status"] == "True" and w.cond(C.ENGINE_KNOBS)["reason"] == C.KNOBS_IN_FORCE
    assert w.cond(C.APPLIED)["reason"] == C.APPLY_SUCCEEDED
    out = w.run(T0 + 60)
    assert out.ok and [x for x in w.kube.writes if x not in RECORD] == []
    given = {g: cur[g] for _, groups, cur in w.rule.calls[-2:] for g in groups}  # one call per group
    assert given == {"big": (0.02, 64, "priority"), "small": (0.0, 256, "fcfs")}  # the knobs in force go to the rule


def test_a_knob_change_counts_in_the_budget_and_is_held_when_it_is_spent():
    w = World(budget=1)
    assert w.run(T0).ok and w.budget() == []  # first adoption: stock knobs, nothing counted
    w.rule = ScriptedKnobs({"big": (64, 0.02, "fcfs")})
    assert w.run(T0 + 60).ok
    assert (w.flag("--max-num-active-seqs"), w.flag("--watermark")) == ("64", "0.02")
    assert w.budget() == ["knobs:big=64/0.02/fcfs/None"]
    assert w.kube.status["layoutChanges"] == [T0 + 60]
    w.rule = ScriptedKnobs({"big": (32, 0.05, "fcfs")})
    w.planner.reserve = 700  # the rest of the plan moves meanwhile
    before = copy.deepcopy(w.kube.deployments["vllm-big"]["spec"]["template"])
    out = w.run(T0 + 120)
    assert out.ok, out
    assert w.kube.deployments["vllm-big"]["spec"]["template"] == before  # held: not a flag touched
    cond = w.cond(C.ENGINE_KNOBS)
    assert (cond["status"], cond["reason"]) == ("False", C.KNOBS_HELD)
    assert "--max-num-active-seqs 32 (in force 64)" in cond["message"] and "--watermark 0.05 (in force 0.02)" in cond[
        "message"] and "maxLayoutChangesPerHour 1" in cond["message"]
    assert w.engine()["held"] == [{"knob": "--max-num-active-seqs", "planned": "32", "current": "64"},
                                  {"knob": "--watermark", "planned": "0.05", "current": "0.02"}]
    assert (w.engine()["maxNumActiveSeqs"], w.engine()["watermark"]) == (64, 0.02)  # what is in force
    assert w.classes()["chat"]["reserveTokens"] == 700
    assert w.cond(C.READY)["status"] == "True" and len(w.budget()) == 1
    assert ("Warning", C.KNOBS_HELD) in w.kube.events
    out = w.run(T0 + 60 + 3601)  # the first restart left the hour
    assert out.ok and (w.flag("--max-num-active-seqs"), w.flag("--watermark")) == ("32", "0.05")
    assert w.cond(C.ENGINE_KNOBS)["reason"] == C.KNOBS_IN_FORCE and w.budget()[-1] == "knobs:big=32/0.05/fcfs/None"


def test_knobs_ride_along_with_a_relayout_for_one_count():
    w = World(budget=2)
    assert w.run(T0).ok
    w.planner.tp = 8
    w.rule = ScriptedKnobs({"small": (32, 0.05, "fcfs")})
    assert w.run(T0 + 60).ok
    assert w.flag("--tensor-parallel-size") == "8" and w.flag("--max-num-active-seqs", "vllm-small") == "32"
    assert w.budget() == ["big=8x1,small=1x1"]  # one attempt, named by its layouts


def test_a_spec_change_does_not_let_a_held_knob_through():
    """Issue 26: a spec change skips nothing of the hourly budget (before, it let one restart through per
    generation, past a spent budget); once the hour has room, the held knob goes through, counted."""
    w = World(budget=1)
    assert w.run(T0).ok
    w.rule = ScriptedKnobs({"big": (64, 0.0, "fcfs")})
    assert w.run(T0 + 60).ok and len(w.budget()) == 1
    w.rule = ScriptedKnobs({"big": (48, 0.0, "fcfs")})
    assert w.run(T0 + 120).ok and w.flag("--max-num-active-seqs") == "64"  # held
    w.generation, w.spec["router"] = 2, {"minWeightChange": 0.02}  # any spec change
    assert w.run(T0 + 180).ok and w.flag("--max-num-active-seqs") == "64"  # still held: the budget is spent
    assert len(w.budget()) == 1
    assert w.cond(C.ENGINE_KNOBS)["reason"] == C.KNOBS_HELD
    assert w.run(T0 + 60 + 3601).ok and w.flag("--max-num-active-seqs") == "48"  # the first restart left the hour
    assert len(w.budget()) == 1 and w.budget()[-1] == "knobs:big=48/0/fcfs/None"


@pytest.mark.parametrize("version", ["0.32.1", "0.30"])
def test_an_old_engine_gets_no_watermark_and_says_so(version):
    w = World(engine={"vllmVersion": version})
    w.rule = ScriptedKnobs({"big": (64, 0.05, "priority"), "small": (128, 0.05, "fcfs")})
    out = w.run(T0)
    assert out.ok, out
    calls = [(v, groups) for v, groups, _ in w.rule.calls]  # one call per group, with its engine version
    assert calls == [("0.30.0" if version == "0.30" else version, ["big"]), ("0.33.0", ["small"])]
    assert "--watermark" not in w.args() and w.flag("--max-num-seqs") == "64"
    assert w.flag("--scheduling-policy") == "priority"  # the knobs the old engine has still apply
    assert w.flag("--watermark", "vllm-small") == "0.05"
    cond = w.cond(C.ENGINE_KNOBS)
    assert (cond["status"], cond["reason"]) == ("False", C.KNOB_UNSUPPORTED)
    assert f"group big: --watermark not written: engine.vllmVersion {version} has no --watermark" in cond["message"]
    assert w.cond(C.APPLIED)["reason"] == C.APPLY_SUCCEEDED and w.cond(C.READY)["status"] == "True"
    assert w.engine()["unsupported"] and w.engine()["watermark"] is None


def test_a_shell_string_container_gets_its_knobs_inside_the_script():
    script = "pip list >/dev/null && exec vllm serve m --tensor-parallel-size 4 --port 8000"
    w = World(plugin={"enabled": True})
    c = container(w.kube.deployments["vllm-big"])
    c["command"], c["args"] = ["/bin/sh", "-c", script], []
    w.rule = ScriptedKnobs({"big": (64, 0.02, "fcfs")})
    assert w.run(T0).ok
    new = container(w.kube.deployments["vllm-big"])["command"][2]
    assert new.startswith("pip list >/dev/null && exec vllm serve") and "--port 8000" in new
    for part in ("--max-num-active-seqs 64", "--watermark 0.02", f"--scheduler-cls {ASYNC}"):
        assert part in new, new
    w.generation, w.spec["groups"][0]["plugin"] = 2, {"enabled": False}
    assert w.run(T0 + 60).ok and "--scheduler-cls" not in container(w.kube.deployments["vllm-big"])["command"][2]


@pytest.mark.parametrize(("error", "text"), [
    pytest.param(InputError("knobs.classes[chat].outputs", "samples must be finite"),
                 "knobs.classes[chat].outputs: samples must be finite", id="input-error"),
    pytest.param(ZeroDivisionError("boom"), "ZeroDivisionError in the knob rule", id="bug"),
])
def test_a_failing_knob_rule_keeps_the_knobs_and_applies_the_rest(error, text):
    w = World()
    w.rule = ScriptedKnobs({"big": (64, 0.0, "fcfs")})
    assert w.run(T0).ok
    w.rule, w.planner.reserve = ScriptedKnobs(fail=error), 800
    out = w.run(T0 + 60)
    assert out.ok, out
    assert w.flag("--max-num-active-seqs") == "64" and w.classes()["chat"]["reserveTokens"] == 800
    cond = w.cond(C.ENGINE_KNOBS)
    assert (cond["status"], cond["reason"]) == ("False", C.KNOB_RULE_FAILED) and text in cond["message"]
    assert "boom" not in json.dumps(w.kube.status)


def test_formula_mode_never_calls_the_rule():
    w = World(engine={"knobs": "Formula"})
    assert w.run(T0).ok
    assert [groups for _, groups, _ in w.rule.calls] == [["small"]]
    assert w.flag("--max-num-seqs") is not None and "--watermark" not in w.args()  # kvplan 0.1's formula
    assert w.engine()["knobs"] == "Formula" and w.engine()["rule"] is None


def test_dry_run_reports_the_knobs_and_writes_nothing():
    w = World()
    w.spec["mode"] = "DryRun"
    w.rule = ScriptedKnobs({"big": (64, 0.02, "fcfs")})
    assert w.run(T0).ok and w.kube.writes == ["create ConfigMap/fleet-plan", "status"]  # the record only
    assert w.engine()["maxNumActiveSeqs"] == 64 and "--max-num-active-seqs" not in w.args()


@pytest.mark.parametrize(("change", "field"), [
    pytest.param(lambda s: s["classes"][0].update(fleetDefault=True) or s["classes"][1].update(fleetDefault=True),
                 "spec.classes[1].fleetDefault", id="two-defaults"),
    pytest.param(lambda s: s["classes"][0].update(maxPromptTokens=512) or s["classes"][1].update(
        maxPromptTokens=512), "spec.classes[1].maxPromptTokens", id="same-rule-twice"),
    pytest.param(lambda s: s["groups"][0].update(engine={"vllmVersion": "0.33.0rc1"}),
                 "spec.groups[0].engine.vllmVersion", id="pre-release-version"),
    pytest.param(lambda s: s["groups"][0].update(engine={"knobs": False}), "spec.groups[0].engine.knobs",
                 id="yaml-off-is-a-boolean"),
    pytest.param(lambda s: s["groups"][0].update(plugin={"enabled": True, "scheduler": "Fast"}),
                 "spec.groups[0].plugin.scheduler", id="unknown-scheduler"),
])
def test_bad_engine_and_class_fields_name_the_field(change, field):
    spec = copy.deepcopy(SPEC)
    change(spec)
    with pytest.raises(InvalidSpec) as err:
        parse_spec(spec)
    assert any(path == field for path, _ in err.value.errors), err.value.errors


def test_class_priorities_follow_rho_ties_in_spec_order():
    """1 + rank by decreasing rho (c_p / c_w; an SLO class's rho = exp(mu / (sigma sqrt(2 ln lambda))), docs/model.md),
    equal rho in spec order; published only when some group runs --scheduling-policy priority."""
    import math

    w = World()
    w.spec["classes"].insert(1, copy.deepcopy(w.spec["classes"][0]) | {"name": "chat-two"})
    w.planner = lambda instance, previous=None: fixed_plan().model_copy(update={"classes": fixed_plan().classes + [
        ClassPlan(name="chat-two", reserve_tokens=50, admitted=True, routing={"big": 1.0, "small": 0.0})]})
    assert w.run(T0).ok and "priority" not in w.classes()["chat"]  # every group fcfs
    w.rule = ScriptedKnobs({"small": (256, 0.0, "priority")})
    assert w.run(T0 + 60).ok
    slo = SPEC["classes"][1]["slo"]
    rho = {"chat": 10.0, "chat-two": 10.0, "code-gen": math.exp(slo["mu"] / (slo["sigma"] * math.sqrt(
        2 * math.log(slo["lambda"]))))}
    want = sorted(rho, key=lambda c: (-rho[c], ["chat", "chat-two", "code-gen"].index(c)))
    prio = {c: w.classes()[c]["priority"] for c in rho}
    assert prio == {c: i + 1 for i, c in enumerate(want)} == {"chat": 1, "chat-two": 2, "code-gen": 3}


def test_the_knob_cache_reuses_an_answer_while_the_situation_holds():
    """The runtime's cache: the rule runs once per group while generation, version, layout/replicas, the knobs in
    force and the routed classes stay; again once the answer is older than max_age_s or any of these moves; a
    reservation drift alone reuses it. Failures are not cached."""
    from kvplan_operator.knob_cache import KnobCache

    w = World(budget=5, cache=KnobCache(max_age_s=600))
    assert w.run(T0).ok and [g for _, g, _ in w.rule.calls] == [["big"], ["small"]]  # one call per group
    w.planner.reserve = 650  # drift inside the same situation
    assert w.run(T0 + 60).ok and len(w.rule.calls) == 2
    assert w.classes()["chat"]["reserveTokens"] == 650  # the plan itself still moved
    assert w.run(T0 + 660).ok and len(w.rule.calls) == 4  # expired
    w.planner.tp = 8  # big's layout moves: only big is asked again
    assert w.run(T0 + 700).ok and [g for _, g, _ in w.rule.calls][4:] == [["big"]]
    w.generation = 2
    assert w.run(T0 + 760).ok and [g for _, g, _ in w.rule.calls][5:] == [["small"], ["big"]]  # oldest answer first
    w.rule.knobs = {"small": (32, 0.0, "fcfs")}  # an answer is kept in the cache...
    w.rule.fail = RuntimeError("x")
    assert w.run(T0 + 1400).ok and w.cond(C.ENGINE_KNOBS)["reason"] == C.KNOB_RULE_FAILED
    w.rule.fail = None  # ...but a failure is not: the next reconcile asks again
    assert w.run(T0 + 1460).ok and w.flag("--max-num-active-seqs", "vllm-small") == "32"
    assert len(w.cache.entries) == 2
    w.spec["groups"] = w.spec["groups"][:1]
    w.generation = 3
    w.run(T0 + 1500)
    assert {k[1] for k in w.cache.entries} == {"big"}  # a group gone from the spec is forgotten


def test_class_rules_of_the_httproute_carry_the_priority_header():
    """With a group under --scheduling-policy priority, each class rule of the HTTPRoute sets X-Vllm-Priority (the
    header vLLM 0.33 reads) in its RequestHeaderModifier filter, merged into the user's own; the fleet rule (requests
    of no class, or of a class value no rule knows) gets a priority after every class's (vLLM runs lower first); back
    to fcfs, kvplan's header (and the filter it created) goes, the user's entries stay."""
    from op_faults_world import route  # type: ignore[import-not-found]

    w = World()
    w.kube.httproutes["llm"] = route()
    user = {"type": "RequestHeaderModifier", "requestHeaderModifier": {"add": [{"name": "x-team", "value": "a"}]}}
    w.kube.httproutes["llm"]["spec"]["rules"][0]["filters"] = [copy.deepcopy(user)]
    w.rule = ScriptedKnobs({"small": (256, 0.0, "priority")})
    assert w.run(T0).ok
    rules = w.kube.httproutes["llm"]["spec"]["rules"]
    prio = {c: w.classes()[c]["priority"] for c in ("chat", "code-gen")}
    assert rules[0]["filters"] == [{"type": "RequestHeaderModifier", "requestHeaderModifier": {
        "add": [{"name": "x-team", "value": "a"}], "set": [{"name": "X-Vllm-Priority", "value": str(prio["chat"])}]}}]
    assert rules[1]["filters"] == [{"type": "RequestHeaderModifier", "requestHeaderModifier": {
        "set": [{"name": "X-Vllm-Priority", "value": str(prio["code-gen"])}]}}]
    untagged = int(rules[2]["filters"][0]["requestHeaderModifier"]["set"][0]["value"])
    assert rules[2]["filters"] == [{"type": "RequestHeaderModifier", "requestHeaderModifier": {
        "set": [{"name": "X-Vllm-Priority", "value": str(untagged)}]}}]  # the fleet rule
    assert untagged > max(prio.values())
    assert [b["weight"] for b in rules[0]["backendRefs"]] == [500, 500]  # weights as before
    assert w.run(T0 + 60).ok and [x for x in w.kube.writes if x not in RECORD] == []
    w.rule = ScriptedKnobs()  # every group back to fcfs: no priorities
    assert w.run(T0 + 3700).ok
    rules = w.kube.httproutes["llm"]["spec"]["rules"]
    assert rules[0]["filters"] == [user] and "filters" not in rules[1] and "filters" not in rules[2]


@pytest.mark.parametrize(("spec_version", "labels", "image", "want"), [
    pytest.param(None, {}, "vllm/vllm-openai:v0.30.1", ((0, 30, 1), "image"), id="official-image-tag"),
    pytest.param(None, {}, "registry.local/mirror/vllm-openai:v0.10.1.1@sha256:0f", ((0, 10, 1), "image"),
                 id="mirrored-official-four-part"),
    pytest.param(None, {}, "myorg/vllm-server:1.2.0", (None, "unknown"), id="other-image-says-nothing"),
    pytest.param(None, {}, "vllm/vllm-openai:latest", (None, "unknown"), id="latest-says-nothing"),
    pytest.param(None, {"deployment": "0.33.1"}, "myorg/vllm-server:1.2.0", ((0, 33, 1), "label"),
                 id="deployment-label"),
    pytest.param(None, {"template": "0.32"}, "myorg/vllm-server:1.2.0", ((0, 32, 0), "label"), id="pod-label"),
    pytest.param(None, {"deployment": "0.31.0"}, "vllm/vllm-openai:v0.30.1", ((0, 31, 0), "label"),
                 id="the-label-beats-the-tag"),
    pytest.param(None, {"deployment": "latest"}, "vllm/vllm-openai:v0.33.0", (None, "unknown"),
                 id="a-bad-label-is-unknown-not-the-tag"),
    pytest.param("0.32", {"deployment": "0.31.0"}, "vllm/vllm-openai:v0.30.1", ((0, 32, 0), "spec"),
                 id="the-spec-wins"),
])
def test_engine_version_from_spec_else_label_else_the_official_image_tag(spec_version, labels, image, want):
    from kvplan_operator.decide.knobs import VERSION_LABEL, engine_version

    spec = copy.deepcopy(SPEC)
    if spec_version:
        spec["groups"][0]["engine"] = {"vllmVersion": spec_version}
    body = dep("vllm-big")
    container(body)["image"] = image
    if "deployment" in labels:
        body["metadata"]["labels"] = {VERSION_LABEL: labels["deployment"]}
    if "template" in labels:
        body["spec"]["template"]["metadata"]["labels"][VERSION_LABEL] = labels["template"]
    v = engine_version(parse_spec(spec).groups[0], body)
    assert (v.version, v.source) == want
    assert v.describe()


@pytest.mark.parametrize("plugin", [pytest.param(False, id="knobs"), pytest.param(True, id="knobs-and-plugin")])
def test_an_unknown_version_gets_no_version_gated_knob_and_a_condition_says_so(plugin):
    """No spec version, no label, an image that is not an official tag: the knob rule is asked with no
    version-gated knob, --watermark and the plugin are not written (the rest is), and EngineKnobs says why."""
    w = World(plugin={"enabled": plugin})
    container(w.kube.deployments["vllm-big"])["image"] = "myorg/vllm-server:1.2.0"
    w.rule = ScriptedKnobs({"big": (64, 0.05, "fcfs")})
    assert w.run(T0).ok
    args = w.args()
    assert "--watermark" not in args and "--scheduler-cls" not in args and w.flag("--max-num-seqs") == "64"
    assert "volumes" not in w.kube.deployments["vllm-big"]["spec"]["template"]["spec"]
    assert [v for v, g, _ in w.rule.calls if g == ["big"]] == ["0.0.0"]
    cond = w.cond(C.ENGINE_KNOBS)
    assert cond["status"] == "False" and cond["reason"] == C.ENGINE_VERSION_UNKNOWN
    assert "group big" in cond["message"] and "kvplan.io/vllm-version" in cond["message"]
    assert (w.engine()["vllmVersion"], w.engine()["vllmVersionFrom"]) == (None, "unknown")


def test_a_label_states_the_version_of_an_unofficial_image():
    w = World()
    big = w.kube.deployments["vllm-big"]
    container(big)["image"] = "myorg/vllm-server:1.2.0"
    big["metadata"]["labels"] = {"kvplan.io/vllm-version": "0.33.0"}
    w.rule = ScriptedKnobs({"big": (64, 0.05, "fcfs")})
    assert w.run(T0).ok
    assert w.flag("--watermark") == "0.05"
    assert (w.engine()["vllmVersion"], w.engine()["vllmVersionFrom"]) == ("0.33.0", "label")


def test_an_old_image_without_a_version_in_the_spec_gets_no_watermark():
    w = World()
    container(w.kube.deployments["vllm-big"])["image"] = "vllm/vllm-openai:v0.30.1"
    w.rule = ScriptedKnobs({"big": (64, 0.05, "fcfs")})
    assert w.run(T0).ok
    assert "--watermark" not in w.args() and w.flag("--max-num-seqs") == "64"
    assert [v for v, g, _ in w.rule.calls if g == ["big"]] == ["0.30.1"]
    assert "vLLM 0.30.1 (the image's tag) has no --watermark" in w.cond(C.ENGINE_KNOBS)["message"]
    assert (w.engine()["vllmVersion"], w.engine()["vllmVersionFrom"]) == ("0.30.1", "image")


@pytest.mark.parametrize("words", [
    pytest.param(["--config", "/etc/vllm/serve.yaml"], id="config-file"),
    pytest.param(["--config=/etc/vllm/serve.yaml"], id="config-equals"),
    pytest.param(["--conf", "/etc/vllm/serve.yaml"], id="config-abbreviated"),
])
def test_a_config_file_kvplan_cannot_read_touches_no_deployment(words):
    """vLLM reads more flags from ``--config FILE`` inside the image: kvplan writes no knob and no layout into that
    Deployment, and the Applied condition names the reason and the word."""
    w = World()
    big = w.kube.deployments["vllm-big"]
    container(big)["args"] = container(big)["args"] + words
    before = copy.deepcopy(big)
    w.rule = ScriptedKnobs({"big": (64, 0.05, "fcfs")})
    out = w.run(T0)
    assert not out.ok and out.reason == C.UNREADABLE_ENGINE_CONFIG
    assert "vllm-big" in out.message and words[0].split("=")[0] in out.message
    assert w.kube.deployments["vllm-big"] == before
    assert not [x for x in w.kube.writes if "Deployment" in x]


@pytest.mark.parametrize(("gpu", "args", "image", "cap", "want"), [
    pytest.param("A100-80GB", [], "vllm/vllm-openai:v0.33.0", 64, (None, 64), id="active-cap-below-the-a100-default"),
    pytest.param("H100-SXM", [], "vllm/vllm-openai:v0.33.0", 512, (None, 512), id="h100-default-1024-holds-512"),
    pytest.param("A100-80GB", [], "vllm/vllm-openai:v0.33.0", 512, (None, None), id="at-capacity-nothing-to-write"),
    pytest.param("A100-80GB", ["--max-num-seqs", "128"], "vllm/vllm-openai:v0.33.0", 512, (None, 128),
                 id="capped-at-the-runner-when-an-active-cap-is-set"),
    pytest.param("A100-80GB", ["--max_num_seqs=128"], "vllm/vllm-openai:v0.33.0", 64, (None, 64),
                 id="runner-capacity-in-underscores"),
    pytest.param("A100-80GB", ["--max-num-seqs", "$(SEQS)"], "vllm/vllm-openai:v0.33.0", 64, (64, None),
                 id="capacity-known-only-at-run-time"),
    pytest.param("A100-80GB", [], "vllm/vllm-openai:v0.32.1", 64, (64, None), id="older-vllm-has-no-active-cap"),
    pytest.param("A100-80GB", [], "myorg/vllm:1", 64, (64, None), id="unknown-version-gets-no-gated-flag"),
])
def test_the_admission_cap_goes_to_max_num_active_seqs_where_vllm_has_it(gpu, args, image, cap, want):
    from kvplan_operator.decide.knobs import admission_knob, engine_version

    spec = copy.deepcopy(SPEC)
    spec["groups"][0]["nodePool"]["gpuType"] = gpu
    g = parse_spec(spec).groups[0]
    body = dep("vllm-big", ["--model", "m", *args])
    container(body)["image"] = image
    if "$(SEQS)" in args:
        container(body)["env"].append({"name": "SEQS", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}})
    if want == (None, 128) and "--max-num-seqs" in args:
        container(body)["args"] += ["--max-num-active-seqs", "32"]
    assert admission_knob(g, body, cap, engine_version(g, body)) == want


def test_the_knob_rule_never_touches_max_num_seqs_on_vllm_033():
    """--max-num-seqs is in vLLM's compile hash and sizes the CUDA graphs: kvplan leaves it as the user wrote it
    and changes only --max-num-active-seqs, in place, whatever the rule chooses."""
    w = World(big_args=["--model", "m", "--max_num_seqs", "200", "--tensor-parallel-size", "1"], budget=5)
    w.rule = ScriptedKnobs({"big": (64, 0.02, "fcfs")})
    assert w.run(T0).ok
    assert w.args().count("--max_num_seqs") == 1 and w.flag("--max_num_seqs") == "200"
    assert w.flag("--max-num-active-seqs") == "64" and "--max-num-seqs" not in w.args()
    w.rule = ScriptedKnobs({"big": (32, 0.02, "fcfs")})
    w.generation += 1
    assert w.run(T0 + 4000).ok
    assert w.flag("--max_num_seqs") == "200" and w.args().count("--max-num-active-seqs") == 1
    assert w.flag("--max-num-active-seqs") == "32"
    assert (w.engine()["maxNumSeqs"], w.engine()["maxNumActiveSeqs"]) == (None, 32)
