"""The router ConfigMap ``router.configMap`` (target ``router-configmap``): ``data[key]`` holds the routing document
(format ``kvplan.v1``, docs/operator.md), written through a merge patch of that key and kvplan's annotations only.

Two writes when Deployments change layout (docs/operator.md, "Write order"): first (stage ROUTE_AWAY) a document
that describes the groups as they are now, marks the groups about to change ``"draining": true`` (no layout
claimed) and moves the weights off them where another group can take the class; last (stage ROUTE) the planned
document. So the document never claims a layout that the Deployments lack.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .. import conditions as C
from ..desired import ANN_OWNED, ANN_OWNER, ANN_PLAN, ClassTarget, Desired, Stage, Write
from ..kube import KubeApi
from ..run import RunContext
from ..spec import KVPlanSpec
from . import BuildInput, TargetPlan, TargetRefused
from .ownership import router_conflict
from .plandetail import is_chunk
from .state_configmap import configmap_drift, write_configmap

ROUTER_FORMAT = "kvplan.v1"


def _nonzero(values: Mapping[str, float], spec: KVPlanSpec) -> dict[str, float]:
    """Per group, rounded to 6 digits, only the non-zero ones (a group not listed gets 0): at 256 classes x 64
    groups the dense maps alone would be about a megabyte, a ConfigMap's whole limit."""
    out = {g.name: round(float(values.get(g.name, 0.0)), 6) for g in spec.groups}
    return {k: v for k, v in out.items() if v}


def build_router_document(*, owner: str, plan_id: str, spec: KVPlanSpec, desired: Desired,
                          interim: bool = False, published: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The router JSON. Weights of an admitted class sum to 1 over groups; ``weights`` and ``prefixCacheFraction``
    list only groups with a non-zero value. ``interim``: the document written while
    ``desired.draining`` groups change layout (see the module docstring); a class with no interim routing keeps
    its weights in ``published`` (the current document's ``classes``)."""
    classes: Mapping[str, ClassTarget] = desired.classes
    groups: dict[str, Any] = {}
    for g in spec.groups:
        entry: dict[str, Any] = {"service": g.service_name, "deployment": g.deployment}
        if g.inference_pool:
            entry["inferencePool"] = g.inference_pool
        if interim and g.name in desired.draining:
            entry["draining"] = True
        elif interim and g.name in desired.current:
            tp, pp, replicas = desired.current[g.name]
            entry.update(tp=tp, pp=pp, replicas=replicas)
        else:
            t = desired.groups[g.name]
            entry.update(tp=t.tp, pp=t.pp, replicas=t.replicas)
        groups[g.name] = entry
    if interim and desired.interim_classes is not None:
        classes = dict(desired.interim_classes)
        for name, ct in desired.interim_classes.items():
            if not ct.routing:
                old = ((published or {}).get(name) or {}).get("weights") or desired.classes[name].routing
                classes[name] = ClassTarget(name, ct.reserve_tokens, ct.admitted,
                                            {g: float(w) for g, w in old.items()}, ct.prefix_fraction)
    return {
        "format": ROUTER_FORMAT,
        "kvplan": owner,
        "plan": plan_id,
        "groups": groups,
        "classes": {
            c.name: {
                "admit": round(classes[c.name].admitted, 6),
                "reserveTokens": int(classes[c.name].reserve_tokens),
                "weights": _nonzero(classes[c.name].routing, spec),
                "prefixCacheFraction": _nonzero(classes[c.name].prefix_fraction, spec),
            } | ({"priority": desired.class_priority[c.name]} if c.name in desired.class_priority else {})
            for c in spec.classes
        },
    }


def build_router_configmap_patch(document: Mapping[str, Any], *, key: str) -> dict[str, Any]:
    """Merge patch for the router ConfigMap: only ``data[key]`` and the owner annotations."""
    return {
        "metadata": {"annotations": {ANN_OWNER: str(document["kvplan"]), ANN_PLAN: str(document["plan"]),
                                     ANN_OWNED: f"data[{key}]"}},
        "data": {key: json.dumps(document, sort_keys=True, indent=1)},
    }


def _published(current: Mapping[str, Any], key: str) -> dict[str, Any]:
    """The ``classes`` of the document now in the ConfigMap ({} if unreadable)."""
    try:
        doc = json.loads((current.get("data") or {}).get(key) or "{}")
    except ValueError:
        return {}
    classes = doc.get("classes") if isinstance(doc, dict) else None
    return classes if isinstance(classes, dict) else {}


class RouterConfigMapTarget:
    """Target ``router-configmap`` (see the module docstring)."""

    name = "router-configmap"

    def names(self, spec: KVPlanSpec, run: RunContext) -> tuple[str, ...]:
        return (spec.router.config_map.name,) if spec.router.config_map is not None else ()

    def read(self, kube: KubeApi, namespace: str, names: tuple[str, ...]) -> dict[str, dict[str, Any] | None]:
        return {n: kube.get_configmap(namespace, n) for n in names}

    def build(self, inp: BuildInput) -> TargetPlan:
        ref = inp.spec.router.config_map
        if ref is None:
            return TargetPlan()
        if ref.name == inp.run.state_configmap or is_chunk(inp.run.name, ref.name):
            what = "state ConfigMap" if ref.name == inp.run.state_configmap else "plan detail ConfigMaps"
            raise TargetRefused(C.ROUTER_TARGET_INVALID, f"spec.router.configMap.name {ref.name!r} is one of this "
                                                         f"KVPlan's {what}; choose another name")
        current = inp.observed.get(self.name, {}).get(ref.name)
        conflict = router_conflict(ref.name, current, owner=inp.run.owner, namespace=inp.run.namespace,
                                   owners_alive=inp.owners_alive)
        if conflict:
            raise TargetRefused(C.OWNED_BY_OTHER, conflict)
        writes: list[Write] = []
        if inp.desired.draining and current is not None:
            doc = build_router_document(owner=inp.run.owner, plan_id=inp.desired.plan_id, spec=inp.spec,
                                        desired=inp.desired, interim=True, published=_published(current, ref.key))
            patch = build_router_configmap_patch(doc, key=ref.key)
            drift = configmap_drift(current, patch)
            if drift:
                writes.append(Write(Stage.ROUTE_AWAY, self.name, "ConfigMap", ref.name, "patch", patch,
                                    ("routing away from " + ", ".join(sorted(inp.desired.draining)),)))
                current = {"metadata": {"annotations": patch["metadata"]["annotations"]}, "data": patch["data"]}
        doc = build_router_document(owner=inp.run.owner, plan_id=inp.desired.plan_id, spec=inp.spec,
                                    desired=inp.desired)
        patch = build_router_configmap_patch(doc, key=ref.key)
        if current is None:
            body = {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": ref.name, "namespace": inp.run.namespace,
                                 "annotations": patch["metadata"]["annotations"]}, "data": patch["data"]}
            writes.append(Write(Stage.ROUTE, self.name, "ConfigMap", ref.name, "create", body))
        elif configmap_drift(current, patch):
            writes.append(Write(Stage.ROUTE, self.name, "ConfigMap", ref.name, "patch", patch))
        return TargetPlan(tuple(writes))

    def write(self, kube: KubeApi, namespace: str, w: Write) -> None:
        write_configmap(kube, namespace, w)
