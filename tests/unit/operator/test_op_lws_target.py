"""The LeaderWorkerSet target in whole reconciles on the fake Kube: a group naming a LeaderWorkerSet may list a
layout wider than a node (TP4/PP2 on 4-GPU nodes), which is written there (size, GPUs per pod, the leader's and
workers' argv) with a plan note that kvcore priced it as one node; the same layout without one is refused
(``LayoutExceedsNode``); a layout that is not whole nodes is ``InvalidSpec``-class; a missing LeaderWorkerSet is
``WorkloadMissing``; a failed read or write is a named condition with nothing written; a second reconcile writes
nothing."""

from __future__ import annotations

import copy

import pytest

from kvplan_operator import conditions as C
from kvplan_operator.reconcile import reconcile
from kvplan_operator.spec import InvalidSpec, parse_spec
from kvplan_operator.observe import unsettled
from kvplan_operator.targets.lws import HEADLESS_SWITCH, NNODES_FLAG
from kvplan_operator.targets.lws_target import lws_view
from kvplan_operator.targets.vllm_flags import PP_FLAG, TP_FLAG, read_flag
from op_fakes import Fault, FakeKube, kvplan  # type: ignore[import-not-found]
from op_reconcile_world import cond, deps  # type: ignore[import-not-found]
from op_targets_world import SPEC  # type: ignore[import-not-found]
from op_lws_world import mp_lws  # type: ignore[import-not-found]


def lws_spec(*, ref: bool = True, layouts: list | None = None) -> dict:
    spec = copy.deepcopy(SPEC)
    group = {"name": "big", "deployment": "big", "container": "vllm", "model": "llama-70b",
             "nodePool": {"gpuCount": 8, "gpusPerNode": 4}, "layouts": layouts or [{"tp": 4, "pp": 2}]}
    if ref:
        group["workloadRef"] = {"kind": "LeaderWorkerSet", "name": "big"}
    spec["groups"] = [group]
    spec["router"] = {"configMap": {"name": "router"}}
    return spec


def test_wide_layout_is_written_as_a_leaderworkerset():
    kube = FakeKube()
    kube.lwss["big"] = mp_lws()
    out = reconcile(kvplan(lws_spec(), kube), deps(kube))
    assert out.ok, out
    assert "patch LeaderWorkerSet/big" in kube.writes and not any("Deployment" in w for w in kube.writes)
    g = kube.status["plan"]["groups"]["big"]
    assert (g["tp"], g["pp"]) == (4, 2)
    lwt = kube.lwss["big"]["spec"]["leaderWorkerTemplate"]
    assert lwt["size"] == 2 and kube.lwss["big"]["spec"]["replicas"] == g["replicas"]
    leader = lwt["leaderTemplate"]["spec"]["containers"][0]
    worker = lwt["workerTemplate"]["spec"]["containers"][0]
    assert read_flag(leader["args"], PP_FLAG) == "2" and read_flag(leader["args"], TP_FLAG) == "4"
    assert read_flag(worker["args"], NNODES_FLAG) == "2" and HEADLESS_SWITCH in worker["args"]
    assert leader["resources"]["limits"]["nvidia.com/gpu"] == "4" == worker["resources"]["limits"]["nvidia.com/gpu"]
    assert any("spans nodes" in n for n in kube.status["plan"]["notes"]), kube.status["plan"]["notes"]
    writes = len(kube.writes)
    again = reconcile(kvplan(lws_spec(), kube), deps(kube))
    assert again.ok, again
    assert not any("LeaderWorkerSet" in w for w in kube.writes[writes:]), kube.writes[writes:]


def test_without_a_leaderworkerset_the_wide_layout_is_refused():
    kube = FakeKube()
    out = reconcile(kvplan(lws_spec(ref=False), kube), deps(kube))
    assert not out.ok and out.reason == C.LAYOUT_EXCEEDS_NODE, out
    assert "workloadRef" in cond(kube, C.READY)["message"]


@pytest.mark.parametrize("layout", [pytest.param({"tp": 2, "pp": 3}, id="not-whole-nodes"),
                                    pytest.param({"tp": 8, "pp": 1}, id="tp-across-nodes")])
def test_layout_must_be_whole_nodes(layout):
    with pytest.raises(InvalidSpec, match="whole number of nodes") as info:
        parse_spec(lws_spec(layouts=[layout]))
    assert info.value.reason == C.LAYOUT_EXCEEDS_NODE


def test_missing_leaderworkerset():
    kube = FakeKube()
    out = reconcile(kvplan(lws_spec(), kube), deps(kube))
    assert not out.ok and out.reason == C.WORKLOAD_MISSING, out
    assert not any("LeaderWorkerSet" in w for w in kube.writes)


def test_view_reads_like_a_deployment():
    body = mp_lws()
    body["metadata"]["generation"] = 4
    body["status"] = {"replicas": 2, "updatedReplicas": 1, "readyReplicas": 2}
    body["spec"]["replicas"] = 2
    view = lws_view(body)
    assert view["spec"]["template"] == body["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    assert view["spec"]["replicas"] == 2 and "generation" not in view["metadata"]
    assert unsettled(view) is not None  # one group of two still runs the old template
    body["status"]["updatedReplicas"] = 2
    assert unsettled(lws_view(body)) is None


@pytest.mark.parametrize(("method", "error", "reason"), [
    pytest.param("get_leaderworkerset", "403", C.READ_FAILED, id="read-forbidden"),
    pytest.param("patch_leaderworkerset", "422", C.APPLY_FAILED, id="write-invalid"),
])
def test_kubernetes_failures_become_conditions(method, error, reason):
    kube = FakeKube()
    kube.lwss["big"] = mp_lws()
    kube.faults.append(Fault(method, error))
    out = reconcile(kvplan(lws_spec(), kube), deps(kube))
    assert not out.ok and out.reason == reason, out
    ready = cond(kube, C.READY)
    assert (ready["status"], ready["reason"]) == ("False", reason) and "big" in ready["message"], ready
    assert kube.lwss["big"] == mp_lws()
