"""The LLMInferenceServices behind the groups' Deployments, and each group's workload as the phases read it.

``groups[].workloadRef`` names an LLMInferenceService up front, so the target reads it with the others; one found
only through its Deployment's controller ownerReference is read here, after the Deployments. A group served by an
LLMInferenceService is then observed through it (:func:`~kvplan_operator.targets.llmisvc.pod_view`): its layout,
replicas and flags are the LLMInferenceService's, which KServe renders into the Deployment.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..kube import KubeApi
from ..spec import Group, KVPlanSpec
from ..targets import Observed
from ..targets.llmisvc import TARGET, pod_view
from ..targets.lws_target import TARGET as LWS_TARGET, lws_view
from ..targets.workload import llmisvc_name, lws_name


def read_llmisvcs(kube: KubeApi, namespace: str, spec: KVPlanSpec, objects: Mapping[str, Observed]
                  ) -> dict[str, Observed]:
    """``objects`` with every LLMInferenceService a group's Deployment names as its controller read too. Raises
    :class:`~kvplan_operator.kube.KubeError`."""
    have = dict(objects.get(TARGET) or {})
    deployments = objects.get("deployment") or {}
    for g in spec.groups:
        name = llmisvc_name(g, deployments.get(g.deployment))
        if name is not None and name not in have:
            have[name] = kube.get_llminferenceservice(namespace, name)
    return {**objects, TARGET: have}


def group_body(group: Group, objects: Mapping[str, Observed]) -> Mapping[str, Any] | None:
    """The group's workload in a Deployment's shape: its LeaderWorkerSet's or LLMInferenceService's view when one
    serves it (None when that is missing), else its Deployment."""
    multi_node = lws_name(group)
    if multi_node is not None:
        lws = (objects.get(LWS_TARGET) or {}).get(multi_node)
        return None if lws is None else lws_view(lws)
    deployment = (objects.get("deployment") or {}).get(group.deployment)
    name = llmisvc_name(group, deployment)
    if name is None:
        return deployment
    body = (objects.get(TARGET) or {}).get(name)
    return None if body is None else pod_view(body, deployment)
