"""The twin's pure parts: a Pod's container as the ``vllm serve`` it runs, its environment and volumes as the kubelet
resolves them, the status the agent writes, the step clock and the GPU nodes."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from kvcore.profiles.gpus import get_gpu
from kvcore.profiles.models import get_model
from kvcore.profiles.steptime import kv_tokens, layout, step_time
from kvplan_dev.twin.agent import catalogue_model
from kvplan_dev.twin.nodes import NodePool, node_manifest, node_status
from kvplan_dev.twin.pod_command import PodCommandError, serve_command
from kvplan_dev.twin.pod_env import EnvNotReady, container_env
from kvplan_dev.twin.pod_status import ContainerView, pod_status, status_key
from kvplan_dev.twin.step_clock import ClockSpec, StepClock
from kvplan_dev.twin.volumes import PodVolumes, VolumeNotReady

POD: dict[str, Any] = {"metadata": {"name": "p-1", "namespace": "ns", "uid": "u-1", "labels": {"app": "vllm"}},
                       "spec": {"nodeName": "n-0", "serviceAccountName": "default"}}


def test_the_layout_leaves_the_argv_and_everything_else_reaches_vllm() -> None:
    cmd = serve_command({"args": ["--model=meta-llama/Meta-Llama-3-70B", "--tensor-parallel-size", "4",
                                  "-pp=2", "--max-num-seqs=128", "--enable-prefix-caching", "--port=8080",
                                  "--gpu-memory-utilization", "0.9", "--max-model-len=4096",
                                  "--kvplan-file", "/etc/kvplan/reservations.json"]},
                        mounts={"/etc/kvplan": "/tmp/vol/kvplan", "/etc": "/tmp/vol/etc"})
    assert (cmd.model, cmd.tp, cmd.pp, cmd.port, cmd.max_model_len) == ("meta-llama/Meta-Llama-3-70B", 4, 2, 8080,
                                                                         4096)
    assert cmd.args == ("--max-num-seqs", "128", "--enable-prefix-caching", "--port", "8080",
                        "--max-model-len", "4096", "--kvplan-file", "/tmp/vol/kvplan/reservations.json")
    assert cmd.rewrite("/etcetera") == "/etcetera"  # a prefix of a path component is not a mount


@pytest.mark.parametrize("container", [
    {"command": ["vllm", "serve", "org/m"], "args": ["--port", "9000"]},
    {"command": ["python3", "-m", "vllm.entrypoints.openai.api_server"], "args": ["--model", "org/m", "--port=9000"]},
])
def test_entrypoints_the_twin_runs(container: dict[str, Any]) -> None:
    cmd = serve_command(container)
    assert (cmd.model, cmd.port) == ("org/m", 9000)


@pytest.mark.parametrize("container, message", [
    ({"command": ["sh", "-c", "vllm serve m"]}, "not a shell"),
    ({"args": ["--port=8000"]}, "no model"),
    ({"args": ["m", "--tensor-parallel-size=zero"]}, "not an integer"),
    ({"args": ["m", "-tp", "0"]}, "must be >= 1"),
])
def test_containers_the_twin_refuses_say_why(container: dict[str, Any], message: str) -> None:
    with pytest.raises(PodCommandError, match=message):
        serve_command(container)


def test_catalogue_model_by_name_repository_or_alias() -> None:
    assert catalogue_model("llama-8b", {}) == "llama-8b"
    assert catalogue_model("meta-llama/Meta-Llama-3-8B", {}) == "llama-8b"
    assert catalogue_model("org/custom", {"org/custom": "qwen3-8b"}) == "qwen3-8b"
    with pytest.raises(PodCommandError, match="step clock"):
        catalogue_model("org/unknown", {})


def _reader(objects: dict[tuple[str, str], dict[str, Any]]) -> Any:
    return lambda kind, ns, name: objects.get((kind, name))


def test_environment_values_fields_keys_and_references() -> None:
    objects = {("configmap", "cm"): {"data": {"A": "1", "B": "2"}},
               ("secret", "s"): {"data": {"token": base64.b64encode(b"t0k").decode()}}}
    container = {"envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
                 "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                         {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                         {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                         {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}},
                         {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k", "optional": True}}},
                         {"name": "URL", "value": "http://$(IP):8000/$(NOPE)"}]}
    env = container_env(container, POD, "127.1.2.3", _reader(objects))
    assert env == {"CM_A": "1", "CM_B": "2", "POD": "p-1", "IP": "127.1.2.3", "APP": "vllm", "HF_TOKEN": "t0k",
                   "URL": "http://127.1.2.3:8000/$(NOPE)"}


@pytest.mark.parametrize("env, message", [
    ([{"name": "X", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k"}}}], 'secret "gone" not found'),
    ([{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "Z"}}}], 'key "Z" not found'),
    ([{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "status.phase"}}}], "status.phase"),
])
def test_missing_references_are_create_container_config_errors(env: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(EnvNotReady, match=message):
        container_env({"env": env}, POD, "127.0.0.2", _reader({("configmap", "cm"): {"data": {"A": "1"}}}))


def test_configmap_volumes_follow_updates_kubelet_style(tmp_path: Path) -> None:
    objects: dict[tuple[str, str], dict[str, Any]] = {("configmap", "plan"): {"data": {"r.json": "{}", "x": "1"}}}
    pod = {**POD, "spec": {**POD["spec"], "volumes": [
        {"name": "plan", "configMap": {"name": "plan", "items": [{"key": "r.json", "path": "reservations.json"}]}},
        {"name": "scratch", "emptyDir": {}}, {"name": "maybe", "configMap": {"name": "absent", "optional": True}}]}}
    vols = PodVolumes(pod, tmp_path, lambda ns, name: objects.get(("configmap", name)))
    assert vols.sync() == ["plan", "maybe"]
    link = tmp_path / "plan" / "reservations.json"
    assert link.is_symlink() and link.read_text() == "{}" and not (tmp_path / "plan" / "x").exists()
    assert vols.sync() == []  # unchanged: nothing rewritten
    objects[("configmap", "plan")] = {"data": {"r.json": '{"v": 2}'}}
    assert vols.sync() == ["plan"] and link.read_text() == '{"v": 2}'
    mounts = vols.mounts({"volumeMounts": [{"name": "plan", "mountPath": "/etc/kvplan"},
                                           {"name": "scratch", "mountPath": "/tmp/s", "subPath": "a"}]})
    assert mounts == {"/etc/kvplan": str(tmp_path / "plan"), "/tmp/s": str(tmp_path / "scratch" / "a")}


@pytest.mark.parametrize("volume, message", [
    ({"name": "plan", "configMap": {"name": "absent"}}, 'configmap "absent" not found'),
    ({"name": "data", "persistentVolumeClaim": {"claimName": "c"}}, "persistentVolumeClaim"),
])
def test_volumes_the_twin_cannot_mount_yet(tmp_path: Path, volume: dict[str, Any], message: str) -> None:
    pod = {**POD, "spec": {**POD["spec"], "volumes": [volume]}}
    with pytest.raises(VolumeNotReady, match=message):
        PodVolumes(pod, tmp_path, lambda ns, name: None).sync()


def test_status_phases_readiness_and_crash_loop() -> None:
    c = ContainerView("vllm", "img")
    pending = pod_status(c, pod_ip="127.1.0.2", host_ip="127.0.0.1", start_time="t0", now="t1")
    assert pending["phase"] == "Pending"
    assert pending["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
    c.started_at = "t2"
    starting = pod_status(c, pod_ip="127.1.0.2", host_ip="127.0.0.1", start_time="t0", now="t2")
    c.ready = True
    serving = pod_status(c, pod_ip="127.1.0.2", host_ip="127.0.0.1", start_time="t0", now="t3")
    assert starting["phase"] == serving["phase"] == "Running"
    assert [cond["status"] for cond in serving["conditions"] if cond["type"] == "Ready"] == ["True"]
    assert status_key(starting) != status_key(serving)
    c.started_at, c.ready, c.restarts = None, False, 1
    c.waiting, c.last_exit = ("CrashLoopBackOff", "back-off"), (2, "Error", "t4")
    looping = pod_status(c, pod_ip="127.1.0.2", host_ip="127.0.0.1", start_time="t0", now="t4")
    status = looping["containerStatuses"][0]
    assert looping["phase"] == "Running" and status["restartCount"] == 1 and status["ready"] is False
    assert status["lastState"]["terminated"]["exitCode"] == 2
    assert status_key(pod_status(c, pod_ip="127.1.0.2", host_ip="127.0.0.1", start_time="t0", now="t9")) == \
        status_key(looping)  # only times differ: nothing to write


def test_step_clock_is_the_layouts_measured_step_scaled() -> None:
    lay = layout(get_gpu("H100-SXM"), get_model("llama-8b"), 2, 1)
    clock = StepClock(ClockSpec("H100-SXM", "llama-8b", 2, 1, time_scale=0.5, kv_scale=0.1))
    decode, prefill = [512.0, 2048.0], [(256.0, 0.0)]
    assert clock.seconds(decode, prefill) == pytest.approx(0.5 * step_time(lay, decode, prefill))
    assert clock.seconds([], []) == 0.0
    assert clock.kv_blocks(16, 4096) == int(kv_tokens(lay) * 0.1) // 16
    tiny = StepClock(ClockSpec("H100-SXM", "llama-8b", 2, 1, kv_scale=1e-9))
    assert tiny.kv_blocks(16, 4096) == 4096 // 16 + 1  # what vLLM needs to start
    assert ClockSpec.from_env(clock.spec.to_env()) == clock.spec
    fitted = clock.spec.fitted()
    assert fitted.coeff is not None and ClockSpec.from_env(fitted.to_env()) == fitted
    assert StepClock(fitted).seconds(decode, prefill) == clock.seconds(decode, prefill)


def test_a_step_law_clock_sleeps_the_law_over_decoding_contexts_and_prefill_chunks() -> None:
    law = {"intercept_s": 0.02, "per_seq_s": 1e-3, "per_context_token_s": 1e-6, "per_prefill_token_s": 5e-5}
    spec = ClockSpec("A100-80GB", "llama-70b", law=law, time_scale=2.0)
    clock = StepClock(ClockSpec.from_env(spec.to_env()))
    assert clock.spec == spec and clock.layout is None  # no layout: vLLM's environment has no scipy for the fit
    want = 2.0 * (0.02 + 1e-3 * 2 + 1e-6 * (512 + 2048) + 5e-5 * (256 + 64))
    assert clock.seconds([512.0, 2048.0], [(256.0, 0.0), (64.0, 1024.0)]) == pytest.approx(want)
    assert clock.seconds([], []) == 0.0
    with pytest.raises(ValueError, match="blocks"):
        clock.kv_blocks(16, 4096)


@pytest.mark.parametrize("spec, message", [
    (ClockSpec("A100-80GB", "llama-70b", time_scale=-1), "time_scale"),
    (ClockSpec("A100-80GB", "llama-70b", kv_scale=0), "kv_scale"),
    (ClockSpec("TPU", "llama-70b"), "TPU"),
    (ClockSpec("A100-80GB", "llama-70b", tp=3), "tp"),
])
def test_step_clock_refuses_bad_specs(spec: ClockSpec, message: str) -> None:
    with pytest.raises(Exception, match=message):
        StepClock(spec)


def test_gpu_nodes_carry_the_device_plugins_resource_label_and_taint() -> None:
    pool = NodePool("h100", "H100-SXM", count=2, gpus=8)
    assert pool.node_names() == ["h100-0", "h100-1"]
    node = node_manifest(pool, "h100-0")
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert node["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    status = node_status(pool, "t0")
    assert status["allocatable"]["nvidia.com/gpu"] == "8"
    assert [c["type"] for c in status["conditions"]] == ["Ready"]
    amd = node_status(NodePool("mi", "MI300X"), "t0")
    assert "amd.com/gpu" in amd["allocatable"]


def test_weighted_routes_pick_by_weight_then_round_robin() -> None:
    from kvplan_dev.twin.replay import ReplayRequest, WeightedRoutes

    routes = WeightedRoutes({"chat": [(["http://a1", "http://a2"], 3.0), (["http://b1"], 1.0), (["http://c"], 0.0)],
                             "*": [(["http://d"], 1.0)]}, seed=7)
    picks = [routes(ReplayRequest(0.0, "chat", 10, 10)) for _ in range(4000)]
    share_a = sum(p.startswith("http://a") for p in picks) / len(picks)
    assert abs(share_a - 0.75) < 0.03 and "http://c" not in picks
    assert abs(picks.count("http://a1") - picks.count("http://a2")) <= 1  # round-robin inside a backend
    assert routes(ReplayRequest(0.0, "other", 1, 1)) == "http://d"
    with pytest.raises(LookupError, match="no backend"):
        WeightedRoutes({"chat": [([], 1.0)]})(ReplayRequest(0.0, "chat", 1, 1))


def test_prompt_ids_share_the_class_prefix() -> None:
    from kvplan_dev.twin.replay import ReplayRequest, prompt_ids

    a = prompt_ids(ReplayRequest(0.0, "c", 10, 5, prefix_tokens=4), 0, 1)
    b = prompt_ids(ReplayRequest(0.0, "c", 12, 5, prefix_tokens=4), 1, 1)
    assert len(a) == 10 and len(b) == 12 and a[:4] == b[:4] and a[4:] != b[4:10]
    assert prompt_ids(ReplayRequest(0.0, "c", 3, 5, prefix_tokens=9), 2, 0) == [prompt_ids(
        ReplayRequest(0.0, "c", 3, 5, prefix_tokens=9), 3, 0)[0]] * 3


def test_summary_counts_percentiles_stalls_and_goodput() -> None:
    from kvplan_dev.twin.replay import Timing, summarize

    timings = [Timing("c", "u", 11, ttft_s=0.1 * (i + 1), e2e_s=0.1 * (i + 1) + 10 * 0.02, tokens=11,
                      max_gap_s=0.02) for i in range(10)]
    timings[9].max_gap_s = 1.0  # one stall
    timings.append(Timing("c", "u", 11, error="HTTP 500: x"))
    timings.append(Timing("c", "", 11, error="cancelled"))
    s = summarize(timings, ttft_slo_s=0.5, tpot_slo_s=0.05, duration_s=10.0, gpus=2)
    assert (s["requests"], s["completed"], s["failed"], s["cancelled"]) == (12, 10, 1, 1)
    assert s["errors"] == ["HTTP 500: x"]  # why, once; a cancel is not an error
    assert s["ttft_p50_s"] == pytest.approx(0.5) and s["ttft_p99_s"] == pytest.approx(1.0)
    assert s["stalled_share"] == pytest.approx(0.1)
    assert s["within_slo"] == 5 and s["goodput_per_gpu_s"] == pytest.approx(5 / 10 / 2)


def _rs(uid: str, replicas: int, status_replicas: int, available: int = 0) -> dict:
    return {"metadata": {"generation": 1, "ownerReferences": [{"uid": uid}]}, "spec": {"replicas": replicas},
            "status": {"observedGeneration": 1, "replicas": status_replicas, "availableReplicas": available}}


def _pod(name: str, *, node: str | None, ready: bool = False, unschedulable: bool = False,
         deleting: bool = False, gpus: int = 8) -> dict:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if unschedulable:
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                           "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."})
    meta: dict = {"name": name, **({"deletionTimestamp": "2026-12-02T00:00:00Z"} if deleting else {})}
    spec: dict = {"containers": [{"name": "vllm", "resources": {"requests": {"nvidia.com/gpu": str(gpus),
                                                                            "cpu": "1"}}}],
                  "nodeSelector": {"pool": "a"}, **({"nodeName": node} if node else {})}
    return {"metadata": meta, "spec": spec, "status": {"conditions": conditions}}


NODES = [{"metadata": {"name": "n0", "labels": {"pool": "a"}}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}},
         {"metadata": {"name": "n1", "labels": {"pool": "b"}}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}]


def test_rollout_state_stuck_only_at_the_fixed_point():
    from kvplan_dev.twin.rollout_state import at_rest, stuck_reason as reason

    def stuck_reason(dep, sets, pods):
        return reason(dep, sets, pods, NODES)

    dep = [{"metadata": {"generation": 2, "uid": "d"}, "status": {"observedGeneration": 2, "replicas": 2,
                                                                   "availableReplicas": 1}}]
    sets = [_rs("d", 1, 1, 1), _rs("d", 1, 1, 0)]
    old, new = _pod("old", node="n0", ready=True), _pod("new", node=None, unschedulable=True)
    assert at_rest(dep, sets, [old, new])
    assert "Insufficient nvidia.com/gpu" in stuck_reason(dep, sets, [old, new])
    # Anything still moving: a Pod terminating, a Pod starting, a Pod not yet tried, a ReplicaSet behind its spec.
    assert stuck_reason(dep, sets, [_pod("old", node="n0", ready=True, deleting=True), new]) == ""
    assert stuck_reason(dep, sets, [_pod("old", node="n0", ready=False), new]) == ""
    assert stuck_reason(dep, sets, [old, _pod("new", node=None)]) == ""
    assert stuck_reason(dep, [_rs("d", 1, 1, 1), _rs("d", 2, 1, 0)], [old, new]) == ""
    # The scheduler's verdict is stale when the allowed node has room again (the old Pod just went): not stuck.
    assert stuck_reason(dep, sets, [_pod("other", node="n1", ready=True), new]) == ""
    assert stuck_reason(dep, sets, [old, _pod("new", node=None, unschedulable=True, gpus=0)]) == ""
    # At rest with nothing unschedulable: finished, not stuck.
    done = [_rs("d", 0, 0), _rs("d", 1, 1, 1)]
    assert stuck_reason([{"metadata": {"generation": 2, "uid": "d"}, "status": {
        "observedGeneration": 2, "replicas": 1, "availableReplicas": 1}}], done, [old]) == ""


def test_routes_leave_out_terminating_and_unready_pods() -> None:
    """As the EndpointSlice controller does: a Pod being deleted is not a ready endpoint, even while its Ready
    condition still says True (the agent stops its server without writing status)."""
    import json

    from kvplan_dev.twin.replay import ReplayRequest
    from kvplan_dev.twin.scenario import _World

    def pod(ip: str, *, ready: bool = True, deleting: bool = False) -> dict:
        meta: dict = {"name": ip, "labels": {"app": "a"},
                      **({"deletionTimestamp": "2026-12-03T00:00:00Z"} if deleting else {})}
        return {"metadata": meta, "status": {"podIP": ip, "conditions": [
            {"type": "Ready", "status": "True" if ready else "False"}]}}

    objects = {
        "configmap": {"data": {"routing.json": json.dumps({
            "groups": {"g": {"service": "svc"}}, "classes": {"chat": {"weights": {"g": 1.0}}}})}},
        "pods": {"items": [pod("10.0.0.1"), pod("10.0.0.2", deleting=True), pod("10.0.0.3", ready=False)]},
        "services": {"items": [{"metadata": {"name": "svc"}, "spec": {"selector": {"app": "a"}}}]},
    }
    world = _World.__new__(_World)
    world.get = lambda kind, *rest: objects[kind]  # type: ignore[method-assign]
    routes = world.routes("router", "routing.json", {"chat": "chat"}, seed=1)
    assert {routes(ReplayRequest(0.0, "chat", 1, 1)) for _ in range(20)} == {"http://10.0.0.1:8000"}
