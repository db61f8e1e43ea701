"""Pure ``build_*`` functions: a plan decision plus the observed object -> the patch body the operator sends.

Nothing here talks to the cluster. Each builder returns only the fields kvplan owns, so the patch keeps everything
else the user set (see ``apply.py`` for how each is sent). Owned fields are listed in the annotation
``kvplan.io/owned-fields`` on every object kvplan patches.

Deployment (strategic merge patch, the vLLM container matched by name):
  - container ``args``: ``--tensor-parallel-size``/``--pipeline-parallel-size``/``--max-num-seqs`` replaced
    (both ``--flag value`` and ``--flag=value`` spellings), every other arg kept in order;
  - container ``resources.limits["nvidia.com/gpu"]`` = TP x PP (and the same request);
  - container env ``KVPLAN_RESERVE_<CLASS>`` read from the KVPlan's state ConfigMap (``configMapKeyRef``), so a
    reservation change never rolls pods;
  - pod ``nodeSelector`` (merged) and ``tolerations`` (the user's kept, the pool's added);
  - ``spec.replicas`` unless an HPA or KEDA ScaledObject targets the Deployment;
  - annotations ``kvplan.io/owner``, ``kvplan.io/generation`` (KVPlan generation applied), ``kvplan.io/layout``,
    ``kvplan.io/reservations``, ``kvplan.io/owned-fields`` on the Deployment (not the pod template: they never
    trigger a rollout). Only values that concern this Deployment, so a re-plan that changes nothing for it
    writes nothing to it.

``--max-num-seqs`` mapping: a replica holds at most ``M(z)`` KV tokens; the mean request routed to the group
reserves ``L_in - delta*L_pre + r`` tokens (lambda-weighted over classes), so the replica fits
``floor(M(z) / mean)`` such requests at once. That is the largest batch vLLM can run without preempting a
request that stays within its reservation.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .spec import Group, HttpRouteRef, KVPlanSpec, RequestClass

ANN_OWNER = "kvplan.io/owner"
ANN_PLAN = "kvplan.io/plan"
ANN_LAYOUT = "kvplan.io/layout"
ANN_RESERVATIONS = "kvplan.io/reservations"
ANN_OWNED = "kvplan.io/owned-fields"
ANN_GENERATION = "kvplan.io/generation"
GPU_RESOURCE = "nvidia.com/gpu"
TP_FLAG = "--tensor-parallel-size"
PP_FLAG = "--pipeline-parallel-size"
SEQS_FLAG = "--max-num-seqs"
ROUTER_FORMAT = "kvplan.v1"
#: HTTPRoute weights are integers; shares are written out of this total (largest remainder, sums exactly).
WEIGHT_SCALE = 1000


@dataclass(frozen=True)
class GroupTarget:
    """What one group should look like: layout, replicas, and the vLLM batch limit."""

    name: str
    tp: int
    pp: int
    replicas: int
    max_num_seqs: int | None = None

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp


@dataclass(frozen=True)
class ClassTarget:
    """Per class: reservation (output tokens), admitted fraction, routing weights and prefix-cache fractions."""

    name: str
    reserve_tokens: int
    admitted: float
    routing: Mapping[str, float]
    prefix_fraction: Mapping[str, float] = field(default_factory=dict)


def plan_id(groups: Mapping[str, GroupTarget], classes: Mapping[str, ClassTarget]) -> str:
    """Content hash of the decisions (12 hex): unchanged decisions give an unchanged id, so nothing is rewritten."""
    doc = {"g": {k: [v.tp, v.pp, v.replicas, v.max_num_seqs] for k, v in sorted(groups.items())},
           "c": {k: [v.reserve_tokens, round(v.admitted, 6), sorted((g, round(w, 6)) for g, w in v.routing.items()),
                     sorted((g, round(w, 6)) for g, w in v.prefix_fraction.items())]
                 for k, v in sorted(classes.items())}}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]


def state_configmap_name(kvplan_name: str) -> str:
    """The per-KVPlan ConfigMap holding ``KVPLAN_RESERVE_*`` values for the env references."""
    return f"{kvplan_name}-kvplan"


def max_num_seqs(kv_capacity_tokens: float, classes: Sequence[RequestClass], targets: Mapping[str, ClassTarget],
                 rates: Mapping[str, float], group: str) -> int | None:
    """``floor(M / mean reserved tokens per request routed to group)``; None when no traffic goes there."""
    num = den = 0.0
    for c in classes:
        t = targets[c.name]
        share = rates.get(c.name, 0.0) * t.admitted * t.routing.get(group, 0.0)
        if share <= 0:
            continue
        tokens = c.input_tokens - t.prefix_fraction.get(group, 0.0) * c.prefix_tokens + t.reserve_tokens
        num += share * max(tokens, 1.0)
        den += share
    if den <= 0:
        return None
    return max(1, math.floor(kv_capacity_tokens / (num / den)))


def set_flag(args: Sequence[str], flag: str, value: str | None) -> list[str]:
    """Replace ``flag``'s value in ``args`` (either spelling; later duplicates dropped) or append it.

    ``value=None`` leaves ``args`` unchanged. Every other arg keeps its position.
    """
    if value is None:
        return list(args)
    out: list[str] = []
    placed = False
    i = 0
    while i < len(args):
        a = args[i]
        if a == flag or a.startswith(flag + "="):
            if not placed:
                out += [flag, value]
                placed = True
            takes_next = a == flag and i + 1 < len(args) and not args[i + 1].startswith("--")
            i += 2 if takes_next else 1
            continue
        out.append(a)
        i += 1
    if not placed:
        out += [flag, value]
    return out


def read_flag(args: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` in ``args`` (either spelling), or None."""
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
        if a == flag and i + 1 < len(args):
            return args[i + 1]
    return None


def find_container(deployment: Mapping[str, Any], name: str | None) -> Mapping[str, Any] | None:
    """The named container of the pod template; the only one when ``name`` is None; else None."""
    containers = deployment.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []) or []
    if name is None:
        return containers[0] if len(containers) == 1 else None
    return next((c for c in containers if c.get("name") == name), None)


def _merge_tolerations(current: Iterable[Mapping[str, Any]], pool: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = [dict(t) for t in current]
    for t in pool:
        if dict(t) not in out:
            out.append(dict(t))
    return out


def build_deployment_patch(
    deployment: Mapping[str, Any],
    *,
    group: Group,
    target: GroupTarget,
    classes: Sequence[RequestClass],
    reservations: Mapping[str, int],
    owner: str,
    generation: int | None,
    state_configmap: str,
    manage_replicas: bool,
    stale_env: Iterable[str] = (),
) -> dict[str, Any]:
    """Strategic-merge patch for one group's Deployment (fields listed in the module docstring).

    ``stale_env``: ``KVPLAN_RESERVE_*`` names of classes no longer in the spec, deleted with ``$patch: delete``.
    Raises LookupError when the container is not found.
    """
    container = find_container(deployment, group.container)
    if container is None:
        raise LookupError(f"Deployment {group.deployment!r} has no container "
                          + (f"named {group.container!r}" if group.container else "(set groups[].container: it has several)"))
    args = list(container.get("args") or [])
    args = set_flag(args, TP_FLAG, str(target.tp))
    args = set_flag(args, PP_FLAG, str(target.pp))
    args = set_flag(args, SEQS_FLAG, None if target.max_num_seqs is None else str(target.max_num_seqs))
    gpus = str(target.gpus_per_replica)
    env: list[dict[str, Any]] = [
        {"name": c.env_name, "valueFrom": {"configMapKeyRef": {"name": state_configmap, "key": c.env_name}}}
        for c in classes
    ]
    env += [{"name": name, "$patch": "delete"} for name in stale_env]
    pod_spec_current = deployment.get("spec", {}).get("template", {}).get("spec", {})
    owned = ["containers[%s].args" % container["name"], "containers[%s].resources.*[%s]" % (container["name"], GPU_RESOURCE),
             "containers[%s].env[KVPLAN_RESERVE_*]" % container["name"], "nodeSelector", "tolerations"]
    spec: dict[str, Any] = {
        "template": {
            "spec": {
                "nodeSelector": group.node_pool.selector(),
                "tolerations": _merge_tolerations(pod_spec_current.get("tolerations") or [],
                                                  [t.model_dump(by_alias=True, exclude_none=True) for t in group.node_pool.tolerations]),
                "containers": [{
                    "name": container["name"],
                    "args": args,
                    "resources": {"limits": {GPU_RESOURCE: gpus}, "requests": {GPU_RESOURCE: gpus}},
                    "env": env,
                }],
            }
        }
    }
    if manage_replicas:
        spec["replicas"] = target.replicas
        owned.append("replicas")
    annotations = {
        ANN_OWNER: owner,
        ANN_GENERATION: str(generation),
        ANN_LAYOUT: f"tp={target.tp},pp={target.pp},replicas={target.replicas}",
        ANN_RESERVATIONS: json.dumps(dict(sorted(reservations.items())), separators=(",", ":")),
        ANN_OWNED: ",".join(owned),
    }
    return {"metadata": {"annotations": annotations}, "spec": spec}


def build_state_configmap(*, name: str, namespace: str, owner_ref: Mapping[str, Any], classes: Sequence[RequestClass],
                          reservations: Mapping[str, int]) -> dict[str, Any]:
    """The KVPlan's state ConfigMap: ``KVPLAN_RESERVE_<CLASS>`` -> reserved output tokens (string)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": [dict(owner_ref)],
                     "labels": {"app.kubernetes.io/managed-by": "kvplan-operator"},
                     "annotations": {ANN_OWNED: "data"}},
        "data": {c.env_name: str(int(reservations[c.name])) for c in classes},
    }


def build_router_document(*, owner: str, plan_id: str, spec: KVPlanSpec,
                          groups: Mapping[str, GroupTarget], classes: Mapping[str, ClassTarget]) -> dict[str, Any]:
    """The router JSON (format ``kvplan.v1``, see docs/operator.md). Weights per class sum to 1 over groups."""
    return {
        "format": ROUTER_FORMAT,
        "kvplan": owner,
        "plan": plan_id,
        "groups": {
            g.name: {"service": g.service_name, "deployment": g.deployment, "tp": groups[g.name].tp,
                     "pp": groups[g.name].pp, "replicas": groups[g.name].replicas}
            for g in spec.groups
        },
        "classes": {
            c.name: {
                "admit": round(classes[c.name].admitted, 6),
                "reserveTokens": int(classes[c.name].reserve_tokens),
                "weights": {g.name: round(float(classes[c.name].routing.get(g.name, 0.0)), 6) for g in spec.groups},
                "prefixCacheFraction": {g.name: round(float(classes[c.name].prefix_fraction.get(g.name, 0.0)), 6)
                                        for g in spec.groups},
            }
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


def hold_small_moves(new: Mapping[str, ClassTarget], previous: Mapping[str, Mapping[str, Any]],
                     min_change: float) -> dict[str, ClassTarget]:
    """Routing hysteresis: keep a class's previous weights and prefix fractions when admission is unchanged and no
    value moved by ``min_change`` or more (re-plans on fresh data wobble by far less than that)."""
    out = dict(new)
    for name, t in new.items():
        prev = previous.get(name)
        if not prev or bool(prev.get("admitted")) != (t.admitted > 0):
            continue
        pr, pf = prev.get("routing") or {}, prev.get("prefixCacheFraction") or {}
        if set(pr) != set(t.routing):
            continue
        moved = [abs(float(pr.get(g) or 0) - w) for g, w in t.routing.items()]
        moved += [abs(float(pf.get(g) or 0) - f) for g, f in t.prefix_fraction.items()]
        if max(moved, default=0.0) < min_change:
            out[name] = ClassTarget(t.name, t.reserve_tokens, t.admitted, {g: float(pr[g]) for g in pr},
                                    {g: float(pf.get(g) or 0) for g in t.prefix_fraction})
    return out


def integer_weights(shares: Mapping[str, float], total: int = WEIGHT_SCALE) -> dict[str, int]:
    """Largest-remainder rounding of non-negative shares to integers summing to ``total`` (0s if all zero)."""
    s = sum(max(v, 0.0) for v in shares.values())
    if s <= 0:
        return {k: 0 for k in shares}
    raw = {k: max(v, 0.0) / s * total for k, v in shares.items()}
    out = {k: math.floor(v) for k, v in raw.items()}
    rest = total - sum(out.values())
    for k in sorted(raw, key=lambda k: (-(raw[k] - out[k]), k))[:rest]:
        out[k] += 1
    return out


def fleet_shares(spec: KVPlanSpec, classes: Mapping[str, ClassTarget], rates: Mapping[str, float]) -> dict[str, float]:
    """Admitted traffic share per group, lambda-weighted over classes."""
    out = {g.name: 0.0 for g in spec.groups}
    for c in spec.classes:
        t = classes[c.name]
        for g in spec.groups:
            out[g.name] += rates.get(c.name, 0.0) * t.admitted * t.routing.get(g.name, 0.0)
    return out


def _header_class(rule: Mapping[str, Any], header: str) -> str | None:
    for match in rule.get("matches") or []:
        for h in match.get("headers") or []:
            if str(h.get("name", "")).lower() == header.lower() and h.get("type", "Exact") == "Exact":
                return str(h.get("value"))
    return None


def build_httproute_patch(route: Mapping[str, Any], *, ref: HttpRouteRef, spec: KVPlanSpec,
                          classes: Mapping[str, ClassTarget], rates: Mapping[str, float]) -> dict[str, Any] | None:
    """Merge patch replacing ``spec.rules`` with backendRef weights set; None when nothing would change.

    A rule whose match has header ``ref.class_header`` equal to a class name gets that class's routing; every other
    rule gets the fleet mix. Only backendRefs naming a group's Service are re-weighted: core group, kind Service
    (Gateway API's defaults) and the route's own namespace; others (an InferencePool or a Service elsewhere that
    happens to share the name) keep their weight.
    """
    by_service = {g.service_name: g.name for g in spec.groups}
    route_ns = route.get("metadata", {}).get("namespace")

    def group_service(b: Mapping[str, Any]) -> bool:
        return ((b.get("group") or "") == "" and (b.get("kind") or "Service") == "Service"
                and b.get("namespace") in (None, route_ns) and b.get("name") in by_service)

    fleet = fleet_shares(spec, classes, rates)
    rules = json.loads(json.dumps(list(route.get("spec", {}).get("rules") or [])))
    for rule in rules:
        cls = _header_class(rule, ref.class_header)
        shares = dict(classes[cls].routing) if cls is not None and cls in classes else fleet
        refs = [b for b in rule.get("backendRefs") or [] if group_service(b)]
        weights = integer_weights({b["name"]: shares.get(by_service[b["name"]], 0.0) for b in refs})
        for b in refs:
            b["weight"] = weights[b["name"]]
    if rules == list(route.get("spec", {}).get("rules") or []):
        return None
    return {"metadata": {"annotations": {ANN_OWNED: "spec.rules[*].backendRefs[*].weight"}}, "spec": {"rules": rules}}
