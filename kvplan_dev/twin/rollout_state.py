"""Whether a rollout in the twin can still move (pure, on the API's JSON): its fixed point.

A rollout is stuck when nothing in the cluster is left to act: every ReplicaSet and Deployment status has caught up
with its spec and its Pods, no Pod is terminating or starting, and some unbound Pod has no room on any node its
selector allows (its extended resources, such as ``nvidia.com/gpu``, against what the bound Pods hold). The room is
counted here rather than read from the scheduler's last verdict, which lags a deleted Pod by a moment. After that no
controller has an input that could change anything, so the answer needs no timeout."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def _unschedulable(pod: dict[str, Any]) -> str | None:
    for c in pod.get("status", {}).get("conditions", []):
        if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable":
            return str(c.get("message", ""))
    return None


def at_rest(deployments: Sequence[dict[str, Any]], replicasets: Sequence[dict[str, Any]],
            pods: Sequence[dict[str, Any]]) -> bool:
    """Every controller has caught up and no Pod is terminating, starting or waiting to be scheduled."""
    for obj in (*deployments, *replicasets):
        if obj.get("status", {}).get("observedGeneration") != obj["metadata"].get("generation"):
            return False
    for rs in replicasets:
        if rs.get("status", {}).get("replicas", 0) != rs["spec"].get("replicas", 0):
            return False
    for dep in deployments:
        own = [rs for rs in replicasets if any(ref.get("uid") == dep["metadata"].get("uid")
                                                for ref in rs["metadata"].get("ownerReferences", []))]
        if dep.get("status", {}).get("replicas", 0) != sum(rs.get("status", {}).get("replicas", 0) for rs in own):
            return False
        if dep.get("status", {}).get("availableReplicas", 0) != sum(
                rs.get("status", {}).get("availableReplicas", 0) for rs in own):
            return False
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp"):
            return False
        if pod["spec"].get("nodeName") and not _ready(pod):
            return False
        if not pod["spec"].get("nodeName") and _unschedulable(pod) is None:
            return False
    return len(pods) == sum(rs["spec"].get("replicas", 0) for rs in replicasets)


def _extended(pod: dict[str, Any]) -> dict[str, int]:
    """The Pod's requests of extended resources (names with a ``/``), in whole units."""
    out: dict[str, int] = {}
    for c in pod["spec"].get("containers", []):
        for name, value in ((c.get("resources") or {}).get("requests") or {}).items():
            if "/" in name:
                out[name] = out.get(name, 0) + int(str(value))
    return out


def has_room(pod: dict[str, Any], nodes: Sequence[dict[str, Any]], pods: Sequence[dict[str, Any]]) -> bool:
    """Some node that the Pod's ``nodeSelector`` allows has its extended resources free."""
    want = _extended(pod)
    selector = pod["spec"].get("nodeSelector") or {}
    for node in nodes:
        labels = node["metadata"].get("labels") or {}
        if any(labels.get(k) != v for k, v in selector.items()):
            continue
        name = node["metadata"]["name"]
        held: dict[str, int] = {}
        for other in pods:
            if other["spec"].get("nodeName") == name:
                for key, n in _extended(other).items():
                    held[key] = held.get(key, 0) + n
        allocatable = node.get("status", {}).get("allocatable") or {}
        if all(int(str(allocatable.get(key, 0))) - held.get(key, 0) >= n for key, n in want.items()):
            return True
    return False


def stuck_reason(deployments: Sequence[dict[str, Any]], replicasets: Sequence[dict[str, Any]],
                 pods: Sequence[dict[str, Any]], nodes: Sequence[dict[str, Any]]) -> str:
    """Why the rollout cannot finish, at its fixed point with an unbound Pod that no allowed node has room for;
    '' otherwise."""
    if not at_rest(deployments, replicasets, pods):
        return ""
    for pod in pods:
        message = _unschedulable(pod)
        if message is not None and not has_room(pod, nodes, pods):
            return f"Pod {pod['metadata']['name']} cannot be scheduled and nothing else can move: {message}"
    return ""


__all__ = ["at_rest", "has_room", "stuck_reason"]
