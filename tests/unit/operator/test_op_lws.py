"""The LeaderWorkerSet builder (pure): pods per group and GPUs per pod from the layout and the node size, the
leader's and the workers' vLLM argv in both multi-node forms vLLM 0.33 documents (multiprocessing: ``--nnodes``,
``--node-rank``, ``--master-addr``, ``--headless`` on the workers; Ray: the leader's TP/PP only), replicas, and
what it refuses by field (a width that is not whole nodes, no leader template, no container, a shell string in
the multiprocessing form)."""

from __future__ import annotations

import copy

import pytest

from kvplan_operator.desired import ANN_LAYOUT, GroupTarget
from kvplan_operator.targets.lws import (HEADLESS_SWITCH, LEADER_ADDRESS, MASTER_ADDR_FLAG, NNODES_FLAG,
                                         NODE_RANK_FLAG, WORKER_INDEX, build_lws_patch, is_ray_form, lws_shape)
from kvplan_operator.targets.vllm_flags import PP_FLAG, TP_FLAG, Unexpressible, read_flag
from op_lws_world import mp_lws, ray_lws  # type: ignore[import-not-found]


def build(body: dict, tp: int, pp: int, *, gpn: int = 4, container: str | None = None, replicas: int = 3,
          manage: bool = True) -> dict:
    return build_lws_patch(body, target=GroupTarget("g", tp, pp, replicas), gpus_per_node=gpn,
                           resource="nvidia.com/gpu", container=container, knobs={"--max-num-seqs": "128"},
                           owner="ns/fleet", generation=2, manage_replicas=manage)


@pytest.mark.parametrize(("tp", "pp", "gpn", "want"), [
    pytest.param(4, 2, 4, (2, 4), id="tp4-pp2-on-4gpu-nodes"),
    pytest.param(4, 1, 8, (1, 4), id="fits-one-node"),
    pytest.param(8, 4, 8, (4, 8), id="pp4-on-8gpu-nodes"),
    pytest.param(2, 2, 4, (1, 4), id="exactly-one-node"),
])
def test_shape(tp, pp, gpn, want):
    assert lws_shape(tp, pp, gpn) == want


@pytest.mark.parametrize(("tp", "pp", "gpn"), [
    pytest.param(8, 1, 4, id="tp-wider-than-a-node"),
    pytest.param(2, 3, 4, id="not-whole-nodes"),
])
def test_shape_refused(tp, pp, gpn):
    with pytest.raises(Unexpressible, match="whole number"):
        lws_shape(tp, pp, gpn)


def test_tp4_pp2_multiprocessing_form():
    body = mp_lws()
    patch = build(body, 4, 2)
    lwt = patch["spec"]["leaderWorkerTemplate"]
    assert lwt["size"] == 2 and patch["spec"]["replicas"] == 3
    (leader,) = lwt["leaderTemplate"]["spec"]["containers"]
    (worker,) = lwt["workerTemplate"]["spec"]["containers"]
    for c in (leader, worker):
        assert c["resources"] == {"limits": {"nvidia.com/gpu": "4"}, "requests": {"nvidia.com/gpu": "4"}}
        assert read_flag(c["args"], TP_FLAG) == "4" and read_flag(c["args"], PP_FLAG) == "2"
        assert read_flag(c["args"], NNODES_FLAG) == "2" and read_flag(c["args"], MASTER_ADDR_FLAG) == LEADER_ADDRESS
        assert "command" not in c  # vllm serve <model> stays as written
    assert read_flag(leader["args"], NODE_RANK_FLAG) == "0" and HEADLESS_SWITCH not in leader["args"]
    assert read_flag(leader["args"], "--max-num-seqs") == "128" and leader["args"][:2] == ["--port", "8000"]
    assert read_flag(worker["args"], NODE_RANK_FLAG) == WORKER_INDEX and worker["args"][-1] == HEADLESS_SWITCH
    assert read_flag(worker["args"], "--max-num-seqs") is None  # headless workers serve no API: no engine knobs
    assert patch["metadata"]["annotations"][ANN_LAYOUT] == "tp=4,pp=2,replicas=3"
    assert body == mp_lws()  # the input is not modified
    again = copy.deepcopy(body)
    for key in ("leaderTemplate", "workerTemplate"):
        again["spec"]["leaderWorkerTemplate"][key]["spec"]["containers"][0]["args"] = \
            lwt[key]["spec"]["containers"][0]["args"]
    same = build(again, 4, 2)["spec"]["leaderWorkerTemplate"]
    assert same["workerTemplate"]["spec"]["containers"][0]["args"].count(HEADLESS_SWITCH) == 1  # written once


def test_ray_form_writes_the_leaders_layout_and_leaves_the_workers_command():
    body = ray_lws()
    assert is_ray_form(body["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0])
    lwt = build(body, 4, 2, manage=False)["spec"]["leaderWorkerTemplate"]
    (leader,) = lwt["leaderTemplate"]["spec"]["containers"]
    (worker,) = lwt["workerTemplate"]["spec"]["containers"]
    script = leader["command"][2]
    assert "--tensor-parallel-size 4" in script and "--pipeline_parallel_size 2" in script
    assert script.startswith("bash /vllm-workspace/examples/online_serving/multi-node-serving.sh leader")
    assert "command" not in worker and worker["args"] == []
    assert worker["resources"]["limits"] == {"nvidia.com/gpu": "4"}


def test_one_node_layout_is_one_pod():
    lwt = build(mp_lws(), 2, 1)["spec"]["leaderWorkerTemplate"]
    assert lwt["size"] == 1
    (leader,) = lwt["leaderTemplate"]["spec"]["containers"]
    assert read_flag(leader["args"], NNODES_FLAG) is None and leader["resources"]["limits"] == {"nvidia.com/gpu": "2"}


def test_replicas_left_to_an_autoscaler():
    patch = build(mp_lws(), 4, 2, manage=False)
    assert "replicas" not in patch["spec"] and "spec.replicas" not in patch["metadata"]["annotations"][
        "kvplan.io/owned-fields"]


@pytest.mark.parametrize(("edit", "field"), [
    pytest.param(lambda b: b["spec"]["leaderWorkerTemplate"].pop("leaderTemplate"), "leaderTemplate",
                 id="no-leader-template"),
    pytest.param(lambda b: b["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0].update(
        name="other"), "workerTemplate.spec.containers", id="no-worker-container"),
    pytest.param(lambda b: b["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0].update(
        command=["sh", "-c", "vllm serve m --tensor-parallel-size 8"], args=None), "shell string",
        id="shell-string-multiprocessing"),
])
def test_refused_by_field(edit, field):
    body = mp_lws()
    edit(body)
    with pytest.raises(Unexpressible, match=field):
        build(body, 4, 2, container="vllm")
