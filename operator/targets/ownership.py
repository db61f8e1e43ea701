"""Which KVPlan an object belongs to, and which ConfigMap names can collide (issue 26, item 6). Pure.

Every ConfigMap kvplan writes carries its owner, ``kvplan.io/owner: <namespace>/<kvplan>``: the state ConfigMap
``<kvplan>-kvplan`` and the plan's detail chunks ``<kvplan>-plan``, ``<kvplan>-plan-<i>`` (with an ownerReference
to the KVPlan too), and the router ConfigMap ``router.configMap.name``. Before any write, the object as observed is
checked (:func:`own_conflict`, :func:`claimant`); a create that meets an existing object re-reads it and checks it
again (:func:`recheck_created`), so kvplan never writes over another KVPlan's object:

- a ConfigMap whose name a KVPlan derives from its own (state, detail) must be absent or this KVPlan's: one that
  another KVPlan claims (annotation or ownerReference), or that nobody claims (a ConfigMap someone else made under
  that name), is refused (``OwnedByOther``, nothing applied), unless its claiming KVPlan no longer exists (then it
  is adopted);
- the router ConfigMap is refused when another live KVPlan claims it, by annotation or ownerReference, or when it is
  some KVPlan's state or detail ConfigMap (its markers: ``kvplan.io/layout-changes``, ``kvplan.io/plan-chunk``, the
  ``kvplan.io/plan-detail`` label);
- names of the generated forms are reserved (:func:`reserved_form`, in :mod:`kvplan_operator.spec`): ``router.configMap.name`` may not end in
  ``-kvplan``, ``-plan`` or ``-plan-<digits>`` (``InvalidSpec``), so a router ConfigMap can never be the state or
  detail ConfigMap of any KVPlan, present or future. Generated names never collide with each other: ``-kvplan``
  and ``-plan[-<digits>]`` are disjoint suffixes, and ``<a>-plan-<i>`` = ``<b>-plan[-<j>]`` forces ``a = b``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..desired import ANN_LAYOUT_CHANGES, ANN_OWNER
from .plandetail import ANN_CHUNK, LABEL as LABEL_DETAIL
from ..spec import generated_configmap_form as reserved_form

__all__ = ["reserved_form", "claimant", "generated_kind", "own_conflict", "router_conflict", "recheck_created"]


def claimant(body: Mapping[str, Any] | None, namespace: str) -> str | None:
    """The KVPlan (``<namespace>/<name>``) an object names as its owner: ``kvplan.io/owner``, else an
    ownerReference of kind KVPlan (group ``kvplan.io``); None when neither."""
    meta = (body or {}).get("metadata") or {}
    owner = (meta.get("annotations") or {}).get(ANN_OWNER)
    if owner:
        return str(owner)
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("kind") == "KVPlan" \
                and str(ref.get("apiVersion", "")).startswith("kvplan.io/") and ref.get("name"):
            return f"{namespace}/{ref['name']}"
    return None


def generated_kind(body: Mapping[str, Any] | None) -> str | None:
    """Whether an object is some KVPlan's state (``"state"``) or plan-detail (``"plan detail"``) ConfigMap, by
    its markers; None otherwise."""
    meta = (body or {}).get("metadata") or {}
    ann, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    if ANN_LAYOUT_CHANGES in ann:
        return "state"
    if ANN_CHUNK in ann or LABEL_DETAIL in labels:
        return "plan detail"
    return None


def own_conflict(what: str, name: str, body: Mapping[str, Any] | None, *, owner: str, namespace: str,
                 owners_alive: Mapping[str, bool]) -> str | None:
    """For a ConfigMap this KVPlan names after itself (``what``: ``"state"``, ``"plan detail"``): None when it is
    absent or this KVPlan's (or its claimant is gone); else why kvplan must not write it."""
    if body is None:
        return None
    who = claimant(body, namespace)
    if who == owner or (who is not None and not owners_alive.get(who, True)):
        return None
    if who is None:
        return (f"ConfigMap {name} (this KVPlan's {what} ConfigMap by name) exists and is not this KVPlan's: no "
                f"{ANN_OWNER} and no ownerReference to it; kvplan does not write over it (rename or delete it)")
    return f"ConfigMap {name} (this KVPlan's {what} ConfigMap by name) is managed by KVPlan {who}"


def router_conflict(name: str, body: Mapping[str, Any] | None, *, owner: str, namespace: str,
                    owners_alive: Mapping[str, bool]) -> str | None:
    """For the router ConfigMap: None when kvplan may write its key into it; else why not."""
    if body is None:
        return None
    who = claimant(body, namespace)
    kind = generated_kind(body)
    if kind is not None and who != owner:
        return f"ConfigMap {name} is " + (f"KVPlan {who}'s" if who else "a KVPlan's") + f" {kind} ConfigMap"
    if who is not None and who != owner and owners_alive.get(who, True):
        return f"ConfigMap {name} is managed by KVPlan {who}"
    return None


def recheck_created(current: Mapping[str, Any] | None, *, name: str, owner: str, namespace: str,
                    generated: bool) -> str | None:
    """After a create met an existing object (409), re-read: None when kvplan may patch it (``generated``: a
    state or detail ConfigMap, which must be this KVPlan's; else the router ConfigMap, which may be anyone's but
    another KVPlan's); else why not. Gone again (None): the patch that follows fails on its own."""
    if current is None:
        return None
    who = claimant(current, namespace)
    if who is not None and who != owner:
        return f"ConfigMap {name} was created meanwhile by KVPlan {who}"
    if who is None and (generated or generated_kind(current) is not None):
        return f"ConfigMap {name} was created meanwhile by someone else (not this KVPlan's)"
    return None
