"""Who else manages a serving Deployment: its controller, its field managers, Helm. Pure.

kvplan writes a Deployment only where nothing else puts it back:

- **A controller owns it** (an ``ownerReferences[]`` entry with ``controller: true``): KServe's
  ``LLMInferenceService`` compares the pod template with its own on every reconcile and reverts any change, the
  production-stack ``VLLMRuntime`` operator renders its Deployments, a LeaderWorkerSet owns its pods' template. A
  write to such a Deployment starts an endless rollout, so the Deployment target refuses it
  (``OwnedByController``, naming the owner) and nothing of the plan is applied. :data:`OWNER_TARGETS` names the
  target that acts on the owner instead (its kind -> a target's name); a group whose owner has such a target is
  left to it. A KVPlan's own ownerReference is not a foreign controller (:mod:`.ownership` handles it).
- **The managers** of a Deployment (``metadata.managedFields[].manager``) name who wrote which fields; the refusal's
  message lists them, and :func:`replicas_writers` tells which managers last wrote ``spec.replicas`` (a scale client
  the spec names: :mod:`kvplan_operator.observe.replica_owner`).
- **Helm renders it** (label ``app.kubernetes.io/managed-by: Helm``, annotation ``meta.helm.sh/release-name``):
  kvplan writes it, but the next ``helm upgrade`` restores every field the chart renders (docs/upgrade.md, "Helm
  and GitOps"); :func:`helm_release` names the release for status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..kube import FIELD_MANAGER

#: Owner (API group, kind) -> the name of the target that acts on the owner instead of on its Deployment. A
#: Deployment owned by a kind listed here, whose target is among the targets that ran, is left to that target;
#: every other controller owner is refused (``OwnedByController``).
OWNER_TARGETS: Mapping[tuple[str, str], str] = {}

HELM_MANAGED_BY = ("app.kubernetes.io/managed-by", "Helm")
HELM_RELEASE = "meta.helm.sh/release-name"
HELM_NAMESPACE = "meta.helm.sh/release-namespace"


@dataclass(frozen=True)
class ControllerRef:
    """A Deployment's controller: the ownerReference with ``controller: true``."""

    kind: str
    name: str
    api_version: str

    @property
    def group(self) -> str:
        """The owner's API group (``serving.kserve.io``; ``""`` for the core group)."""
        return self.api_version.rpartition("/")[0]

    def describe(self) -> str:
        """``LLMInferenceService/chat (serving.kserve.io/v1alpha1)``."""
        return f"{self.kind}/{self.name} ({self.api_version})"


def _meta(body: Mapping[str, Any] | None) -> Mapping[str, Any]:
    meta = (body or {}).get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def controller_ref(body: Mapping[str, Any] | None) -> ControllerRef | None:
    """The object's controller ownerReference, or None. A KVPlan's (group ``kvplan.io``) is not a foreign
    controller and reads as None."""
    for ref in _meta(body).get("ownerReferences") or []:
        if not isinstance(ref, Mapping) or ref.get("controller") is not True:
            continue
        kind, api_version = str(ref.get("kind") or ""), str(ref.get("apiVersion") or "")
        if kind == "KVPlan" and api_version.startswith("kvplan.io/"):
            return None
        return ControllerRef(kind=kind or "?", name=str(ref.get("name") or "?"), api_version=api_version or "?")
    return None


def owner_target(ref: ControllerRef, available: frozenset[str],
                 registry: Mapping[tuple[str, str], str] = OWNER_TARGETS) -> str | None:
    """The target that acts on ``ref``'s object instead of its Deployment, when the registry has one and it is
    among ``available`` (the targets that ran); else None (the Deployment is refused)."""
    name = registry.get((ref.group, ref.kind))
    return name if name is not None and name in available else None


def field_managers(body: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The managers that wrote the object (``managedFields``), kvplan's own left out, in first-seen order."""
    out: list[str] = []
    for entry in _meta(body).get("managedFields") or []:
        manager = entry.get("manager") if isinstance(entry, Mapping) else None
        if isinstance(manager, str) and manager and manager != FIELD_MANAGER and manager not in out:
            out.append(manager)
    return tuple(out)


def replicas_writers(body: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The managers whose ``managedFields`` entry holds ``spec.replicas`` (``f:spec`` -> ``f:replicas``), in
    order; a write through the ``scale`` subresource is recorded the same way."""
    out: list[str] = []
    for entry in _meta(body).get("managedFields") or []:
        if not isinstance(entry, Mapping):
            continue
        fields = entry.get("fieldsV1")
        spec = fields.get("f:spec") if isinstance(fields, Mapping) else None
        manager = entry.get("manager")
        if isinstance(spec, Mapping) and "f:replicas" in spec and isinstance(manager, str) and manager not in out:
            out.append(manager)
    return tuple(out)


def refusal(deployment: str, ref: ControllerRef, body: Mapping[str, Any] | None) -> str:
    """The ``OwnedByController`` message: the owner, and the managers that wrote the Deployment."""
    managers = field_managers(body)
    return (f"Deployment {deployment} is controlled by {ref.describe()}; that controller restores its own pod "
            "template, so kvplan does not write it" + (f" (written by {', '.join(managers)})" if managers else ""))


def helm_release(body: Mapping[str, Any] | None) -> str | None:
    """``<namespace>/<release>`` (or ``<release>``) of the Helm release that renders the object, or None. A release
    annotation names it; the ``managed-by: Helm`` label alone reads as ``"?"``."""
    meta = _meta(body)
    raw_ann, raw_labels = meta.get("annotations"), meta.get("labels")
    ann: Mapping[str, Any] = raw_ann if isinstance(raw_ann, Mapping) else {}
    labels: Mapping[str, Any] = raw_labels if isinstance(raw_labels, Mapping) else {}
    release = ann.get(HELM_RELEASE)
    if isinstance(release, str) and release:
        ns = ann.get(HELM_NAMESPACE)
        return f"{ns}/{release}" if isinstance(ns, str) and ns else release
    if labels.get(HELM_MANAGED_BY[0]) == HELM_MANAGED_BY[1]:
        return "?"
    return None
