"""kvplan's vLLM plugin on a group (``spec.groups[].plugin``), through whole reconciles over the operator's wrapper
(test_op_engine_knobs.World: a fake cluster, a scripted planner, scripted knob and reservation rules):

- --scheduler-cls (the class matching vLLM 0.33's own async decision for the planned layout: a re-layout to PP 2
  keeps the async class; not guessed where the pod cannot tell), the group's own reservation file in the state
  ConfigMap (the reservation rule's answer, parsed by kvcore.reservation_file and by the plugin's own reader),
  mounted at the path the env names; a reservation change touches only the ConfigMap (and a Deployment
  annotation), never the pod template; turning it off removes exactly what it added, and the file once no pod
  projects it;
- the plugin on an engine outside 0.33.x adds nothing of itself; a container with its own scheduler or a mount path
  in use is refused; the names written are the plugin package's;
- an upgrade from the single ``reservations.json``: each group moves to its own file, the old key goes once no
  Deployment projects it; kvplan's volume is recognised by its one reservation file."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from kvcore import RequestView
from kvplan_operator import conditions as C
from kvplan_operator.decide.knobs import scheduler_class
from kvplan_operator.spec import parse_spec
from kvplan_operator.targets import plugin_mount as PM
from op_fakes import ScriptedKnobs, ScriptedReserves, container, dep  # type: ignore[import-not-found]
from op_engine_knobs_world import ASYNC, RECORD, SYNC, T0, World, fixed_plan  # type: ignore[import-not-found]
from op_targets_world import SPEC  # type: ignore[import-not-found]


def test_the_plugin_on_an_old_engine_adds_nothing_of_itself():
    w = World(engine={"vllmVersion": "0.32.1"}, plugin={"enabled": True})
    out = w.run(T0)
    assert out.ok, out
    big = w.kube.deployments["vllm-big"]
    assert "--scheduler-cls" not in w.args() and "volumes" not in big["spec"]["template"]["spec"]
    assert not {"volumeMounts"} & set(container(big)) and "KVPLAN_RESERVATIONS_FILE" not in {
        e["name"] for e in container(big)["env"]}
    cond = w.cond(C.ENGINE_KNOBS)
    assert cond["reason"] == C.KNOB_UNSUPPORTED and "the plugin needs vLLM 0.33.x, the group has engine.vllmVersion " \
        "0.32.1" in cond["message"] and "group big: --scheduler-cls" in cond["message"]
    assert w.flag("--tensor-parallel-size") == "4"  # the rest of the plan applied


def test_the_plugin_mounts_the_reservation_file_and_reservations_change_without_a_restart(tmp_path: Path):
    w = World(plugin={"enabled": True})
    w.spec["classes"][1]["maxPromptTokens"] = 4096
    w.spec["classes"][1]["fleetDefault"] = True
    w.reserves = ScriptedReserves(reserves={"big": {"chat": 120, "code-gen": 0}})
    assert w.run(T0).ok
    big = w.kube.deployments["vllm-big"]
    pod, c = big["spec"]["template"]["spec"], container(big)
    assert w.flag("--scheduler-cls") == ASYNC
    assert pod["volumes"] == [{"name": "kvplan-reservations", "configMap": {
        "name": "fleet-kvplan", "items": [{"key": "reservations-big.json", "path": "reservations-big.json"}]}}]
    assert c["volumeMounts"] == [{"name": "kvplan-reservations", "mountPath": "/etc/kvplan", "readOnly": True}]
    assert {"name": "KVPLAN_RESERVATIONS_FILE", "value": "/etc/kvplan/reservations-big.json"} in c["env"]
    assert "--scheduler-cls" not in w.args("vllm-small")  # the opt-in is per group
    assert w.files() == ["reservations-big.json"] and [g for g, _ in w.reserves.calls] == [["big"]]
    res = w.reservations()
    assert dict(res.reserve_tokens) == {"chat": 120, "code-gen": 0} and res.default_class == "code-gen"
    assert [(r.max_prompt_tokens, r.klass) for r in res.prompt_length_rules] == [(4096, "code-gen")]
    assert res.plan == w.kube.status["plan"]["id"] and res.kvplan == "ns/fleet"
    gate = w.kube.status["plan"]["groups"]["big"]["gate"]
    assert gate == {"reason": "scripted for big", "pending": False, "classes": 2, "reserving": 1}
    assert w.gates()["big"]["classes"] == {"chat": {"planTokens": 500, "reserveTokens": 120, "source": "scripted"},
                                           "code-gen": {"planTokens": 100, "reserveTokens": 0, "source": "scripted"}}
    assert "gate" not in w.kube.status["plan"]["groups"]["small"] and set(w.gates()) == {"big"}
    # the plugin's own reader (kvplan_vllm.source, importable without vLLM) accepts the file
    from kvplan_vllm.source import ReservationSource

    path = tmp_path / "reservations-big.json"
    path.write_text(w.kube.configmaps["fleet-kvplan"]["data"]["reservations-big.json"])
    source = ReservationSource(path, check_every=1)
    assert source.check() and source.state.problem is None and source.current.reserve("chat") == 120
    pod["volumes"][0]["configMap"]["defaultMode"] = 420  # what the apiserver adds: not a difference
    assert w.run(T0 + 30).ok and [x for x in w.kube.writes if x not in RECORD] == []
    template = copy.deepcopy(big["spec"]["template"])
    w.planner.reserve = 900  # the plan moves, and the rule's answer with it
    w.reserves = ScriptedReserves(reserves={"big": {"chat": 300, "code-gen": 0}})
    assert w.run(T0 + 60).ok
    assert w.reservations().reserve("chat") == 300
    assert w.gates()["big"]["classes"]["chat"]["planTokens"] == 900
    assert w.kube.deployments["vllm-big"]["spec"]["template"] == template  # no restart
    assert w.classes()["chat"]["reserveTokens"] == 900
    assert not [k for k in w.kube.configmaps["fleet-kvplan"]["data"] if k.startswith("KVPLAN_RESERVE_")]
    assert not [x for x in w.kube.writes if x.startswith("patch Deployment/")]  # a reservation is no Deployment write
    assert w.budget() == []


def test_turning_the_plugin_off_removes_what_it_added_and_only_that():
    w = World(plugin={"enabled": True})
    user = w.kube.deployments["vllm-big"]["spec"]["template"]["spec"]
    user["volumes"] = [{"name": "cache", "emptyDir": {}}]
    container(w.kube.deployments["vllm-big"])["volumeMounts"] = [{"name": "cache", "mountPath": "/cache"}]
    assert w.run(T0).ok and w.flag("--scheduler-cls") == ASYNC
    assert [v["name"] for v in user["volumes"]] == ["cache", "kvplan-reservations"]
    w.generation, w.spec["groups"][0]["plugin"] = 2, {"enabled": False}
    assert w.run(T0 + 60).ok
    big = w.kube.deployments["vllm-big"]
    assert "--scheduler-cls" not in w.args()
    assert big["spec"]["template"]["spec"]["volumes"] == [{"name": "cache", "emptyDir": {}}]
    assert container(big)["volumeMounts"] == [{"name": "cache", "mountPath": "/cache"}]
    assert {e["name"] for e in container(big)["env"]} == {"HF_HOME"}
    assert w.files() == ["reservations-big.json"]  # kept while the Deployment still projected it
    assert w.run(T0 + 120).ok and w.files() == []
    assert [x for x in w.kube.writes if x not in RECORD] == ["patch ConfigMap/fleet-kvplan"]
    assert w.run(T0 + 180).ok and [x for x in w.kube.writes if x not in RECORD] == []


@pytest.mark.parametrize(("plugin", "args", "env", "pp", "want"), [
    pytest.param({}, ["--model", "m"], [], 1, ASYNC, id="gpu-default-async"),
    pytest.param({}, ["--model", "m", "--no-async-scheduling"], [], 1, SYNC, id="no-async-flag"),
    pytest.param({}, ["--model", "m"], [], 2, ASYNC, id="pipeline-parallel-mrv2-keeps-async"),
    pytest.param({}, ["--model", "m"], [{"name": "VLLM_USE_V2_MODEL_RUNNER", "value": "0"}], 2, SYNC,
                 id="pipeline-parallel-v1-runner"),
    pytest.param({}, ["--distributed-executor-backend", "ray"], [], 2, ASYNC, id="ray-executor-v2-keeps-async"),
    pytest.param({}, ["--async-scheduling", "--distributed-executor-backend=mp"], [], 2, ASYNC, id="explicit-async"),
    pytest.param({"scheduler": "Sync"}, ["--model", "m"], [], 1, SYNC, id="spec-says-sync"),
    pytest.param({"scheduler": "Async"}, ["--no-async-scheduling"], [], 1, ASYNC, id="spec-says-async"),
    pytest.param({}, ["--distributed-executor-backend", "my.Executor"], [], 1, None, id="custom-executor-unknown"),
])
def test_scheduler_class_follows_vllm_async_rule(plugin, args, env, pp, want):
    spec = copy.deepcopy(SPEC)
    spec["groups"][0]["plugin"] = {"enabled": True} | plugin
    d = dep("vllm-big", args)
    container(d)["env"] = env
    cls, why = scheduler_class(parse_spec(spec).groups[0], d, pp)
    assert cls == want and why


def _pp2_plan(instance, *, previous=None):
    plan = fixed_plan(4, 50.0)
    big = plan.groups[0].model_copy(update={"pp": 2, "replicas": 2, "gpus_per_replica": 8})
    return plan.model_copy(update={"groups": [big, *plan.groups[1:]]})


@pytest.mark.parametrize(("env", "want"), [
    pytest.param([], ASYNC, id="mrv2-keeps-async"),
    pytest.param([{"name": "VLLM_USE_V2_MODEL_RUNNER", "value": "0"}], SYNC, id="v1-runner-turns-it-off"),
])
def test_a_relayout_to_pipeline_parallel_writes_the_class_vllm_will_run(env, want):
    """vLLM 0.33's Model Runner V2 keeps async scheduling with PP > 1: a re-layout to TP 4 / PP 2 keeps the async
    class in the same rollout; only a forced V1 model runner makes it the sync one."""
    w = World(budget=5, plugin={"enabled": True})
    container(w.kube.deployments["vllm-big"])["env"] += env
    assert w.run(T0).ok and w.flag("--scheduler-cls") == ASYNC and w.flag("--pipeline-parallel-size") in (None, "1")
    w.planner = _pp2_plan
    assert w.run(T0 + 60).ok
    assert (w.flag("--pipeline-parallel-size"), w.flag("--scheduler-cls")) == ("2", want)


def test_a_scheduler_kvplan_cannot_tell_is_not_guessed():
    w = World(plugin={"enabled": True})
    container(w.kube.deployments["vllm-big"])["args"] += ["--distributed-executor-backend", "my.pkg.Executor"]
    assert w.run(T0).ok
    assert "--scheduler-cls" not in w.args()
    cond = w.cond(C.ENGINE_KNOBS)
    assert cond["reason"] == C.KNOB_UNSUPPORTED and "my.pkg.Executor" in cond["message"] and \
        "plugin.scheduler" in cond["message"]


@pytest.mark.parametrize(("mutate", "message"), [
    pytest.param(lambda c, pod: c.update(args=c["args"] + ["--scheduler-cls", "my.Scheduler"]),
                 "the container runs its own scheduler my.Scheduler", id="own-scheduler"),
])
def test_the_plugin_never_replaces_a_users_scheduler(mutate, message):
    w = World(plugin={"enabled": True})
    mutate(container(w.kube.deployments["vllm-big"]), w.kube.deployments["vllm-big"]["spec"]["template"]["spec"])
    assert w.run(T0).ok
    assert w.flag("--scheduler-cls") == "my.Scheduler" and "volumes" not in w.kube.deployments["vllm-big"]["spec"][
        "template"]["spec"]
    assert w.cond(C.ENGINE_KNOBS)["reason"] == C.KNOB_UNSUPPORTED and message in w.cond(C.ENGINE_KNOBS)["message"]


def test_a_mount_path_in_use_is_refused_and_nothing_applied():
    w = World(plugin={"enabled": True})
    container(w.kube.deployments["vllm-big"])["volumeMounts"] = [{"name": "cfg", "mountPath": "/etc/kvplan"}]
    out = w.run(T0)
    assert not out.ok and out.reason == C.UNSUPPORTED_CONTAINER_LAYOUT
    assert "mounts volume cfg at /etc/kvplan" in out.message and w.kube.writes == ["status"]


def test_plugin_names_match_the_plugin_package():
    """The operator never imports kvplan_vllm's scheduler (it needs vLLM); the names it writes must still be the
    plugin's: the reader's env var and default path, and the classes defined in kvplan_vllm/scheduler.py."""
    from kvplan_vllm import source

    assert (PM.ENV_FILE, PM.FILE_PATH) == (source.ENV_FILE, source.DEFAULT_FILE)
    text = (Path(__file__).resolve().parents[3] / "kvplan_vllm" / "scheduler.py").read_text()
    for cls in (PM.SYNC_SCHEDULER, PM.ASYNC_SCHEDULER):
        module, name = cls.rsplit(".", 1)
        assert module == "kvplan_vllm.scheduler" and f"\nclass {name}(" in text


def test_an_upgrade_from_the_single_file_moves_each_group_to_its_own_and_drops_the_old_key():
    """A Deployment set up by an operator that wrote one ``reservations.json`` for every group: the volume and env
    move to the group's own file, and the old key goes only once no Deployment projects it."""
    w = World(plugin={"enabled": True})
    assert w.run(T0).ok
    big = w.kube.deployments["vllm-big"]
    old = PM.FILE_KEY
    big["spec"]["template"]["spec"]["volumes"] = [{"name": PM.VOLUME, "configMap": {
        "name": "fleet-kvplan", "items": [{"key": old, "path": old}]}}]
    for e in container(big)["env"]:
        if e["name"] == PM.ENV_FILE:
            e["value"] = f"{PM.MOUNT_PATH}/{old}"
    w.kube.configmaps["fleet-kvplan"]["data"][old] = w.kube.configmaps["fleet-kvplan"]["data"]["reservations-big.json"]
    assert PM.projected_keys(big) == {old}
    assert w.run(T0 + 60).ok
    big = w.kube.deployments["vllm-big"]
    assert PM.projected_keys(big) == {"reservations-big.json"}
    assert {"name": PM.ENV_FILE, "value": "/etc/kvplan/reservations-big.json"} in container(big)["env"]
    assert w.files() == sorted([old, "reservations-big.json"])  # the Deployment still projected it when it was observed
    assert w.run(T0 + 120).ok and w.files() == ["reservations-big.json"]


@pytest.mark.parametrize(("key", "ours"), [
    ("reservations-big.json", True), ("reservations.json", True), ("reservations-small.json", True),
    ("settings.json", False), ("reservations-big.yaml", False)])
def test_kvplans_volume_is_recognised_by_its_one_reservation_file(key, ours):
    body = {"spec": {"template": {"spec": {"volumes": [{"name": PM.VOLUME, "configMap": {
        "name": "fleet-kvplan", "items": [{"key": key, "path": key}]}}], "containers": [{"name": "vllm"}]}}}}
    assert PM.is_file_key(key) is ours
    assert (PM.mount_conflict(body, container(body)) is None) is ours
    two = copy.deepcopy(body)
    two["spec"]["template"]["spec"]["volumes"][0]["configMap"]["items"].append({"key": "x", "path": "x"})
    assert PM.mount_conflict(two, container(two)) is not None  # kvplan's volume projects exactly one file
    assert PM.file_key("big") == "reservations-big.json" and PM.is_file_key(PM.file_key("pool-a"))


def test_the_reservation_file_carries_the_match_rules_and_the_untagged_priority():
    """A class's ``match`` reaches the file as ``classify`` rules, and under the priority policy the file publishes
    the class priorities and, after them, the priority of requests of no class."""
    from kvcore.classification import FAIRNESS_HEADER, OBJECTIVE_HEADER, ClassRule

    w = World(plugin={"enabled": True})
    w.spec["classes"][0]["match"] = {"objective": "premium-chat", "model": "chat-lora"}
    w.spec["classes"][1]["match"] = {"fairnessId": "team-code"}
    w.rule = ScriptedKnobs({"big": (256, 0.0, "priority")})
    w.reserves = ScriptedReserves(reserves={"big": {"chat": 120, "code-gen": 0}})
    assert w.run(T0).ok
    res = w.reservations()
    assert res.rules == (ClassRule(OBJECTIVE_HEADER, "premium-chat", "chat"), ClassRule(None, "chat-lora", "chat"),
                         ClassRule(FAIRNESS_HEADER, "team-code", "code-gen"))
    prio = {c: w.classes()[c]["priority"] for c in ("chat", "code-gen")}
    assert dict(res.priority_classes) == {p: c for c, p in prio.items()}
    assert res.default_priority is not None and res.default_priority > max(prio.values())


def _mounted(d: dict) -> bool:
    pod, c = d["spec"]["template"]["spec"], container(d)
    return (any(v["name"] == PM.VOLUME for v in pod.get("volumes") or [])
            and any(m["mountPath"] == PM.MOUNT_PATH for m in c.get("volumeMounts") or [])
            and any(e["name"] == PM.ENV_FILE for e in c.get("env") or []))


def test_a_stat_logger_history_mounts_the_classification_file_without_the_scheduler():
    """A class whose history comes from kvplan's stat logger (``history.source: kvplan``) needs the classification
    file in every serving pod, gate or not: mounted with nothing reserved and no --scheduler-cls; it goes when no
    class reads that source any more (the file once no pod projects it)."""
    w = World()
    w.spec["classes"][0]["history"] = {"source": "kvplan"}
    w.spec["classes"][1]["maxPromptTokens"] = 4096
    assert w.run(T0).ok
    for name, group in (("vllm-big", "big"), ("vllm-small", "small")):
        d = w.kube.deployments[name]
        assert _mounted(d) and "--scheduler-cls" not in w.args(name), name
        assert {"name": PM.ENV_FILE, "value": f"{PM.MOUNT_PATH}/reservations-{group}.json"} in container(d)["env"]
        doc = w.reservations(group)
        assert set(doc.reserve_tokens.values()) == {0}  # no gate reads it: nothing reserved
        assert doc.classify(RequestView(prompt_tokens=1000))[0] == "code-gen"  # the stat logger's view
        assert doc.classify(RequestView(prompt_tokens=9000))[0] == doc.default_class
    assert w.files() == ["reservations-big.json", "reservations-small.json"]
    w.generation, w.spec["classes"][0]["history"] = 2, {"selector": 'model_name="chat"'}
    assert w.run(T0 + 60).ok
    assert not any(_mounted(d) for d in w.kube.deployments.values())
    assert w.files() == ["reservations-big.json", "reservations-small.json"]  # kept while still projected
    assert w.run(T0 + 120).ok and w.files() == []


def test_mounting_the_classification_file_on_managed_pods_draws_on_the_budget():
    """On Deployments kvplan manages already, mounting the file restarts pods: it is recorded in the disruption
    budget like a knob change, and held when the hour's budget is spent."""
    w = World(budget=1)
    assert w.run(T0).ok and w.run(T0 + 60).ok  # first layout, then managed
    before = w.budget()
    w.generation, w.spec["classes"][0]["history"] = 2, {"source": "kvplan"}
    assert w.run(T0 + 120).ok
    assert _mounted(w.kube.deployments["vllm-big"])
    assert len(w.budget()) == len(before) + 1 and "classification-file" in w.budget()[-1]
    w.generation, w.spec["classes"][0]["history"] = 3, {"selector": 'model_name="chat"'}
    assert w.run(T0 + 180).ok  # the budget of 1 per hour is spent: the unmount is held
    assert _mounted(w.kube.deployments["vllm-big"])
    cond = w.cond(C.ENGINE_KNOBS)
    assert cond["reason"] == C.KNOBS_HELD and "classification file" in cond["message"], cond
