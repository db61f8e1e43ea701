"""The rollout-room model (:mod:`kvplan_operator.targets.rollout_room`) against the real kube-controller-manager and
kube-scheduler: a re-layout on a group's full GPU nodes finishes with the ``maxUnavailable`` kvplan holds, and
with the user's own value it stops exactly where the model says it stops.

No vLLM here: the test itself plays the kubelet for the Pods the scheduler binds (Ready at once, final delete of a
Pod being deleted), so the only parts under test are the Deployment, ReplicaSet and scheduling logic, which are the
real ones. Every wait is for a condition: the rollout complete, or its fixed point (every ReplicaSet and the
Deployment's status caught up, no Pod terminating or starting, an unbound Pod reported Unschedulable that no node of
its pool has room for), after which nothing in the cluster changes any more. Nothing asserts on time."""

from __future__ import annotations

import datetime
import itertools
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kvplan_dev.tools import Tools
from kvplan_dev.twin.nodes import POOL_LABEL, NodePool, register_pools
from kvplan_dev.twin.pod_status import ContainerView, pod_status
from kvplan_dev.twin.rollout_state import stuck_reason
from kvplan_operator.targets.rollout_room import completes, hold, resolve

pytestmark = [pytest.mark.integration]

_CASES = itertools.count()


@pytest.fixture(scope="module")
def controllers(control_plane_tools: Tools) -> Iterator[Any]:
    from kvplan_dev.gobuild import BuildError
    from kvplan_dev.twin.control import TwinCluster

    try:
        cluster = TwinCluster(control_plane_tools)
    except BuildError as exc:
        pytest.fail(f"kube-controller-manager or kube-scheduler is missing: {exc}", pytrace=False)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _get(cluster: Any, *args: str) -> Any:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


def _kubelet(cluster: Any, ns: str) -> None:
    """One pass of the test's kubelet: bound Pods become Running and Ready; Pods being deleted are deleted."""
    for pod in _get(cluster, "-n", ns, "get", "pods")["items"]:
        meta, spec = pod["metadata"], pod["spec"]
        if meta.get("deletionTimestamp"):
            cluster.kubectl("-n", ns, "delete", "pod", meta["name"], "--grace-period=0", "--force", "--wait=false",
                            check=False)
        elif spec.get("nodeName") and pod.get("status", {}).get("phase") != "Running":
            now = _now()
            status = pod_status(ContainerView("vllm", "vllm/vllm-openai:v0.33.0", started_at=now, ready=True),
                                pod_ip="127.0.0.1", host_ip="127.0.0.1", start_time=now, now=now)
            cluster.kubectl("-n", ns, "patch", "pod", meta["name"], "--subresource=status", "--type=merge",
                            "-p", json.dumps({"status": status}), check=False)


def _complete(cluster: Any, ns: str, name: str) -> bool:
    dep = _get(cluster, "-n", ns, "get", "deployment", name)
    st, want = dep.get("status", {}), dep["spec"]["replicas"]
    pods = _get(cluster, "-n", ns, "get", "pods")["items"]
    return (st.get("observedGeneration") == dep["metadata"]["generation"]
            and st.get("updatedReplicas") == want == st.get("availableReplicas") == st.get("replicas") == len(pods))


def _stuck(cluster: Any, ns: str) -> str:
    """Why nothing can move any more ('' while something can: :func:`kvplan_dev.twin.rollout_state.stuck_reason`)."""
    return stuck_reason(*(_get(cluster, "-n", ns, "get", kind)["items"]
                          for kind in ("deployments", "replicasets", "pods", "nodes")))


def _until(cluster: Any, ns: str, check: Any) -> str:
    """Plays the kubelet until ``check`` names an outcome."""
    while True:
        _kubelet(cluster, ns)
        outcome = check()
        if outcome:
            return str(outcome)
        time.sleep(0.3)


def _deployment(name: str, pool: str, replicas: int, gpus: int, surge: object, unavailable: object) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "strategy": {"type": "RollingUpdate",
                                  "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "nodeSelector": {POOL_LABEL: pool},
                         "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                         "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.33.0",
                                         "args": ["--model=m", f"--tensor-parallel-size={gpus}"],
                                         "resources": {"limits": {"nvidia.com/gpu": str(gpus)},
                                                       "requests": {"nvidia.com/gpu": str(gpus)}}}]}}}}


def _relayout(cluster: Any, *, nodes: int, old: tuple[int, int], new: tuple[int, int], surge: object,
              unavailable: object, with_hold: bool) -> tuple[str, dict[str, Any]]:
    """A Deployment of ``old`` (replicas, GPUs per pod) on ``nodes`` 8-GPU nodes of its own, rolled out, then
    patched to ``new`` as the operator patches it (with or without kvplan's hold); the outcome."""
    case = next(_CASES)
    ns, pool, name = f"room-{case}", f"room{case}", "vllm"
    cluster.kubectl("create", "namespace", ns)
    register_pools(cluster.kubectl, [NodePool(pool, "A100-80GB", count=nodes)], _now())
    _until(cluster, ns, lambda: cluster.kubectl("-n", ns, "get", "sa", "default", check=False).returncode == 0)
    cluster.kubectl("-n", ns, "apply", "-f", "-", input_text=json.dumps(
        _deployment(name, pool, old[0], old[1], surge, unavailable)))
    _until(cluster, ns, lambda: _complete(cluster, ns, name))
    body = _get(cluster, "-n", ns, "get", "deployment", name)
    strategy = hold(body, rolls=True, old_gpus=old[1], new_replicas=new[0], new_gpus=new[1], nodes=[8] * nodes)
    patch: dict[str, Any] = {"spec": {"replicas": new[0], "template": {"spec": {"containers": [{
        "name": "vllm", "args": ["--model=m", f"--tensor-parallel-size={new[1]}", "--seed=1"],
        "resources": {"limits": {"nvidia.com/gpu": str(new[1])}, "requests": {"nvidia.com/gpu": str(new[1])}}}]}}}}
    if with_hold:
        strategy.apply(patch)
    cluster.kubectl("-n", ns, "patch", "deployment", name, "--type=strategic", "-p", json.dumps(patch))
    outcome = _until(cluster, ns, lambda: "complete" if _complete(cluster, ns, name)
                     else "stuck" if _stuck(cluster, ns) else "")
    waiting = [c.get("message", "") for pod in _get(cluster, "-n", ns, "get", "pods")["items"]
               for c in pod.get("status", {}).get("conditions", []) if c.get("reason") == "Unschedulable"]
    return outcome, {"hold": strategy.max_unavailable, "unschedulable": waiting}


@pytest.mark.parametrize("nodes, old, new", [(1, (1, 8), (2, 4)), (2, (2, 8), (4, 4))],
                         ids=["batch-1x8-to-2x4", "interactive-2x8-to-4x4"])
def test_the_users_strategy_stops_where_the_model_says_and_kvplans_hold_finishes(controllers, nodes, old, new):
    kw = dict(old_replicas=old[0], old_gpus=old[1], new_replicas=new[0], new_gpus=new[1], nodes=[8] * nodes,
              max_surge=0)
    assert not completes(**kw, max_unavailable=1)
    outcome, seen = _relayout(controllers, nodes=nodes, old=old, new=new, surge=0, unavailable=1, with_hold=False)
    assert outcome == "stuck"
    assert seen["unschedulable"] and all("Insufficient nvidia.com/gpu" in m for m in seen["unschedulable"])
    outcome, seen = _relayout(controllers, nodes=nodes, old=old, new=new, surge=0, unavailable=1, with_hold=True)
    assert seen["hold"] is not None and seen["hold"] > 1
    assert completes(**kw, max_unavailable=seen["hold"])
    assert outcome == "complete" and seen["unschedulable"] == []


@pytest.mark.parametrize("nodes, old, new, surge, unavailable", [
    (2, (4, 4), (2, 8), 0, 1), (2, (4, 4), (4, 4), "25%", "25%")], ids=["4x4-to-2x8", "4x4-new-args-defaults"])
def test_no_hold_where_the_model_says_the_users_strategy_finishes(controllers, nodes, old, new, surge, unavailable):
    assert completes(old_replicas=old[0], old_gpus=old[1], new_replicas=new[0], new_gpus=new[1], nodes=[8] * nodes,
                     max_surge=resolve(surge, new[0], round_up=True),
                     max_unavailable=resolve(unavailable, new[0], round_up=False))
    outcome, seen = _relayout(controllers, nodes=nodes, old=old, new=new, surge=surge, unavailable=unavailable,
                              with_hold=True)
    assert seen["hold"] is None
    assert outcome == "complete" and seen["unschedulable"] == []
