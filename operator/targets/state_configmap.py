"""The KVPlan's state ConfigMap ``<kvplan>-kvplan`` (target ``state-configmap``).

- keys ``KVPLAN_RESERVE_<CLASS>`` that earlier releases wrote are removed once no Deployment refers to them
  (:mod:`.legacy_reserve`);
- annotation ``kvplan.io/layout-changes``: the re-layouts attempted in the last hour, written *before* the
  Deployments are patched, so the disruption budget counts an attempt even when the patch fails or the operator
  dies right after it; ``kvplan.io/relayout-generation``: the generation whose spec change re-laid out already;
- ``data["reservations-<group>.json"]``: per group running kvplan's vLLM plugin, the ``kvplan.reservations.v1``
  document (:mod:`kvcore.reservation_file`) its plugin reads (:mod:`kvplan_operator.decide.gate`: the reservations that
  pay on that group), mounted by that group's Deployment only (:mod:`.plugin_mount`); the kubelet updates the
  mounted file in place, so a reservation change reaches the engines without a restart. A reservation key no
  group writes any more is removed, unless a Deployment of the spec still projects it (a pod started meanwhile
  could not mount its volume);
- an ownerReference to the KVPlan (garbage-collected with it) and the annotation ``kvplan.io/owner``; an existing
  ConfigMap of that name that is not this KVPlan's is refused (``OwnedByOther``: :mod:`.ownership`).

Created when missing (a 409 on create, another writer won the race, re-reads the object and patches it only when it
is this KVPlan's: :func:`.ownership.recheck_created`), else merge-patched when a value differs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .. import conditions as C
from ..desired import (ANN_LAYOUT_CHANGES, ANN_OWNED, ANN_OWNER, ANN_RELAYOUT_GENERATION, Desired, LayoutChange,
                       Stage, Write)
from ..kube import KubeApi, KubeError
from ..run import RunContext
from ..spec import KVPlanSpec
from . import BuildInput, TargetPlan, TargetRefused
from .ownership import own_conflict, recheck_created
from .legacy_reserve import PREFIX, legacy_refs
from .plugin_mount import file_key, is_file_key, projected_keys

def encode_changes(changes: tuple[LayoutChange, ...]) -> str:
    return json.dumps([{"t": round(c.t, 3), "layouts": c.layouts} for c in changes], separators=(",", ":"))


def decode_changes(text: str | None) -> tuple[LayoutChange, ...]:
    """The budget record of a state ConfigMap (unreadable entries are dropped: they cannot be trusted either way,
    and ``status.layoutChanges`` is read too)."""
    try:
        raw = json.loads(text or "[]")
    except ValueError:
        return ()
    out = []
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, dict) and isinstance(item.get("t"), (int, float)):
            out.append(LayoutChange(float(item["t"]), str(item.get("layouts", ""))))
    return tuple(out)


def build_state_configmap(*, name: str, namespace: str, owner_ref: Mapping[str, Any],
                          desired: Desired, owner: str) -> dict[str, Any]:
    """The whole state ConfigMap for ``desired``."""
    annotations = {ANN_OWNER: owner, ANN_OWNED: "data,metadata.annotations[kvplan.io/layout-changes]",
                   ANN_LAYOUT_CHANGES: encode_changes(desired.layout_changes)}
    if desired.relayout_generation is not None:
        annotations[ANN_RELAYOUT_GENERATION] = str(desired.relayout_generation)
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": [dict(owner_ref)],
                     "labels": {"app.kubernetes.io/managed-by": "kvplan-operator"}, "annotations": annotations},
        "data": {file_key(g): doc for g, doc in sorted(desired.reservation_files.items())},
    }


def configmap_drift(current: Mapping[str, Any] | None, patch: Mapping[str, Any]) -> list[str]:
    """Keys of ``patch`` (``data`` and annotations; a None value means "remove") that ``current`` does not have."""
    if current is None:
        return ["created"]
    out = []
    data = current.get("data") or {}
    out += [f"data[{k}]" for k, v in (patch.get("data") or {}).items() if data.get(k) != v]
    ann = current.get("metadata", {}).get("annotations") or {}
    out += [f"metadata.annotations[{k}]" for k, v in patch.get("metadata", {}).get("annotations", {}).items()
            if ann.get(k) != v]
    return out


def write_configmap(kube: KubeApi, namespace: str, w: Write) -> None:
    """Create or merge-patch one ConfigMap; a create that meets an existing object (409) re-reads it and patches."""
    if w.verb == "patch":
        kube.patch_configmap(namespace, w.name, w.body)
        return
    try:
        kube.create_configmap(namespace, w.body)
    except KubeError as exc:
        if exc.status != 409:
            raise
        annotations = w.body["metadata"]["annotations"]
        refused = recheck_created(kube.get_configmap(namespace, w.name), name=w.name, owner=annotations[ANN_OWNER],
                                  namespace=namespace, generated=w.target != "router-configmap")
        if refused:
            raise KubeError(f"create ConfigMap/{w.name}", "Conflict", 409, refused) from None
        kube.patch_configmap(namespace, w.name, {"metadata": {"annotations": annotations}, "data": w.body["data"]})


class StateConfigMapTarget:
    """Target ``state-configmap`` (see the module docstring)."""

    name = "state-configmap"

    def names(self, spec: KVPlanSpec, run: RunContext) -> tuple[str, ...]:
        return (run.state_configmap,)

    def read(self, kube: KubeApi, namespace: str, names: tuple[str, ...]) -> dict[str, dict[str, Any] | None]:
        return {n: kube.get_configmap(namespace, n) for n in names}

    def build(self, inp: BuildInput) -> TargetPlan:
        name = inp.run.state_configmap
        current = inp.observed.get(self.name, {}).get(name)
        conflict = own_conflict("state", name, current, owner=inp.run.owner, namespace=inp.run.namespace,
                                owners_alive=inp.owners_alive)
        if conflict:
            raise TargetRefused(C.OWNED_BY_OTHER, conflict)
        body = build_state_configmap(name=name, namespace=inp.run.namespace, owner_ref=inp.run.owner_reference,
                                     desired=inp.desired, owner=inp.run.owner)
        if current is None:
            return TargetPlan((Write(Stage.STATE, self.name, "ConfigMap", name, "create", body),))
        data: dict[str, Any] = dict(body["data"])
        deployments = [d for d in (inp.observed.get("deployment") or {}).values() if d is not None]
        referred = set().union(*(legacy_refs(d, name) for d in deployments))
        data.update({k: None for k in current.get("data") or {} if k.startswith(PREFIX) and k not in referred})
        mounted = set().union(*(projected_keys(d) for d in deployments))
        data.update({k: None for k in current.get("data") or {}
                     if is_file_key(k) and k not in data and k not in mounted})
        patch = {"metadata": {"annotations": body["metadata"]["annotations"]}, "data": data}
        drift = configmap_drift(current, patch)
        if not drift:
            return TargetPlan()
        return TargetPlan((Write(Stage.STATE, self.name, "ConfigMap", name, "patch", patch),))

    def write(self, kube: KubeApi, namespace: str, w: Write) -> None:
        write_configmap(kube, namespace, w)
