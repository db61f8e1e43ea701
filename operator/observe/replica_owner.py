"""Who owns a group's ``spec.replicas``: kvplan, an autoscaler, a named field manager or an external party. Pure.

In order (the first that applies):

1. ``spec.groups[].replicaOwner.policy: External``: someone kvplan cannot see (Dynamo, a script);
2. an autoscaler targeting the Deployment, as observed (:meth:`kvplan_operator.kube.KubeApi.autoscaled_deployments`:
   an autoscaling/v2 HPA, a KEDA ScaledObject, an AIBrix PodAutoscaler);
3. a field manager the spec lists (``replicaOwner.fieldManagers``) holding ``spec.replicas`` in the Deployment's
   ``managedFields`` (it wrote them last: kvplan's own write would have taken them over);
4. else kvplan.

Whoever it is, kvplan does not write ``spec.replicas`` unless it is kvplan; the rest of the plan applies, and
``status.plan.groups.<g>`` says who (``replicasManagedBy``) and why (``replicasReason``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import conditions as C
from ..spec import Group
from ..targets.workload_owner import replicas_writers


@dataclass(frozen=True)
class ReplicaOwner:
    """``by``: ``kvplan``, ``<Kind>/<name>`` of an autoscaler, ``FieldManager/<manager>`` or ``External``;
    ``reason``: one of :data:`kvplan_operator.conditions.REPLICA_REASONS`."""

    by: str
    reason: str

    @property
    def kvplan(self) -> bool:
        return self.reason == C.REPLICAS_BY_KVPLAN


KVPLAN = ReplicaOwner("kvplan", C.REPLICAS_BY_KVPLAN)


def replica_owner(group: Group, body: Mapping[str, Any] | None, autoscalers: Mapping[str, str]) -> ReplicaOwner:
    """Who owns ``group``'s replicas (see the module docstring); ``autoscalers``: Deployment name -> autoscaler."""
    if group.replica_owner.policy == "External":
        return ReplicaOwner("External", C.REPLICAS_EXTERNAL)
    scaler = autoscalers.get(group.deployment)
    if scaler:
        return ReplicaOwner(scaler, C.REPLICAS_BY_AUTOSCALER)
    listed = set(group.replica_owner.field_managers)
    writer = next((m for m in replicas_writers(body) if m in listed), None)
    if writer is not None:
        return ReplicaOwner(f"FieldManager/{writer}", C.REPLICAS_BY_FIELD_MANAGER)
    return KVPLAN
