"""The KVPlan's ``spec.groups[].replicaOwner``: who scales a group's Deployment. Part of
:mod:`kvplan_operator.spec`; pure, no I/O.

kvplan finds the autoscalers it knows by itself (an autoscaling/v2 HPA, a KEDA ScaledObject, an AIBrix
PodAutoscaler targeting the Deployment: :mod:`kvplan_operator.observe.replica_owner`). This field names the scale
clients it cannot find that way: field managers that write ``spec.replicas`` (a custom autoscaler, Dynamo's
operator, a script using ``kubectl scale``), or ``External`` for a party that leaves no trace kvplan could read.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from .base import SpecModel

#: A field manager's name as the apiserver records it (``metadata.managedFields[].manager``; at most 128
#: characters there).
FIELD_MANAGER_NAME = r"^[ -~]{1,128}$"
ManagerName = Annotated[str, StringConstraints(pattern=FIELD_MANAGER_NAME)]


class ReplicaOwner(SpecModel):
    """Who owns ``spec.replicas`` of the group's Deployment."""

    policy: Literal["Auto", "External"] = Field(
        "Auto", description="Auto: kvplan writes replicas unless an HPA, a KEDA ScaledObject or an AIBrix "
        "PodAutoscaler targets the Deployment or a listed field manager last wrote them; External: kvplan never "
        "writes replicas.")
    field_managers: tuple[ManagerName, ...] = Field(
        (), max_length=16, description="Field managers (managedFields[].manager) whose write of spec.replicas makes "
        "them its owner; 16 is far more scale clients than one Deployment has.")

