"""Which object serves a group: its Deployment, the KServe LLMInferenceService that owns that Deployment, or the
LeaderWorkerSet ``groups[].workloadRef`` names. Pure.

The Deployment target writes the groups served by their Deployment; the LLMInferenceService target
(:mod:`.llmisvc`) writes those whose Deployment belongs to KServe's controller (never written), and the
LeaderWorkerSet target (:mod:`.lws`) those served by one; both start from :func:`claimed_workload`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import conditions as C
from ..spec import Group
from . import BuildInput, Observed, owner_conflict

LLMISVC_KIND = "LLMInferenceService"
LLMISVC_GROUP = "serving.kserve.io"


def controller_llmisvc(deployment: Mapping[str, Any] | None) -> str | None:
    """The LLMInferenceService that is a Deployment's controller (ownerReference), or None."""
    for ref in ((deployment or {}).get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True and ref.get("kind") == LLMISVC_KIND \
                and str(ref.get("apiVersion", "")).startswith(LLMISVC_GROUP + "/") and ref.get("name"):
            return str(ref["name"])
    return None


LWS_KIND = "LeaderWorkerSet"


def lws_name(group: Group) -> str | None:
    """The LeaderWorkerSet ``groups[].workloadRef`` names for ``group``, or None."""
    ref = group.workload_ref
    return ref.name if ref is not None and ref.kind == LWS_KIND else None


def served_by_deployment(group: Group, deployment: Mapping[str, Any] | None) -> bool:
    """Whether the Deployment target writes ``group`` (no LLMInferenceService or LeaderWorkerSet serves it)."""
    return llmisvc_name(group, deployment) is None and lws_name(group) is None


def llmisvc_name(group: Group, deployment: Mapping[str, Any] | None) -> str | None:
    """The LLMInferenceService serving ``group`` (``workloadRef``, else its Deployment's controller), or None."""
    if group.workload_ref is not None and group.workload_ref.kind == LLMISVC_KIND:
        return group.workload_ref.name
    return controller_llmisvc(deployment)


def claimed_workload(kind: str, name: str, group: Group, observed: Observed, inp: BuildInput,
                     refusals: dict[str, list[str]]) -> Mapping[str, Any] | None:
    """The observed ``kind`` ``name`` serving ``group``, for its target to write; None, with the refusal added to
    ``refusals``, when it is missing (``WorkloadMissing``) or another live KVPlan manages it (``OwnedByOther``)."""
    body = observed.get(name)
    if body is None:
        refusals.setdefault(C.WORKLOAD_MISSING, []).append(
            f"{kind} {name} (group {group.name}) not found in namespace {inp.run.namespace}")
        return None
    conflict = owner_conflict(kind, name, body, inp)
    if conflict:
        refusals.setdefault(C.OWNED_BY_OTHER, []).append(conflict)
        return None
    return body
