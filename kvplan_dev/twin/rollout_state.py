"""Whether a rollout in the twin can still move (pure, on the API's JSON): its fixed point.

A rollout is stuck when nothing in the cluster is left to act: every ReplicaSet and Deployment status has caught up
with its spec and its Pods, no Pod is terminating or starting, and some Pod is unbound because the scheduler found no
room for it. After that no controller has an input that could change anything, so the answer needs no timeout."""

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


def stuck_reason(deployments: Sequence[dict[str, Any]], replicasets: Sequence[dict[str, Any]],
                 pods: Sequence[dict[str, Any]]) -> str:
    """Why the rollout cannot finish, at its fixed point with a Pod the scheduler has no room for; '' otherwise."""
    if not at_rest(deployments, replicasets, pods):
        return ""
    for pod in pods:
        message = _unschedulable(pod)
        if message is not None:
            return f"Pod {pod['metadata']['name']} cannot be scheduled and nothing else can move: {message}"
    return ""


__all__ = ["at_rest", "stuck_reason"]
