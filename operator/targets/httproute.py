"""A Gateway API HTTPRoute ``router.httpRoute`` (target ``httproute``): ``backendRefs[].weight`` of the backends that
stand for a group, through a merge patch that rebuilds ``spec.rules`` from the current rules with only those
weights changed (every other field, backend and rule is kept as it is).

A backendRef stands for a group when it is, in the route's own namespace (no ``namespace``, or the route's):

- a Service (core group, kind ``Service``: Gateway API's defaults) named ``groups[].service`` (default: the
  Deployment name), or
- an InferencePool (group ``inference.networking.k8s.io``, kind ``InferencePool``) named
  ``groups[].inferencePool`` (one pool per group; see :mod:`.inferencepool`).

A rule whose match has the header ``router.httpRoute.classHeader`` equal to a class name, or a class's ``match``
header and value (:func:`.class_rules.route_rule_class`), gets that class's routing; every other rule gets the
fleet mix (admitted arrival rate routed to each group). Weights are integers out of
:data:`WEIGHT_SCALE` (largest-remainder rounding; a group's share is split evenly when a rule names it twice).
Like the router ConfigMap, the route is written twice when Deployments change layout: first with the weights moved
off the groups about to change, last with the planned weights. Class rules also carry the class's vLLM priority as
the ``X-Vllm-Priority`` request header while some group runs the priority policy, and the other rules the priority
of requests of no class (:mod:`.httproute_priority`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from .. import conditions as C
from ..desired import ANN_OWNED, ANN_OWNER, ClassTarget, Stage, Write
from ..kube import KubeApi
from ..run import RunContext
from ..spec import HttpRouteRef, KVPlanSpec
from . import BuildInput, TargetPlan, TargetRefused, owner_conflict
from .class_rules import class_rules, route_rule_class, untagged_priority
from .httproute_priority import PRIORITY_HEADER, with_priority_headers

#: HTTPRoute weights are integers; shares are written out of this total (largest remainder, sums exactly).
WEIGHT_SCALE = 1000
POOL_GROUP, POOL_KIND = "inference.networking.k8s.io", "InferencePool"


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


def _rule_class(rule: Mapping[str, Any], ref: HttpRouteRef, spec: KVPlanSpec) -> str | None:
    return route_rule_class(rule, ref.class_header, class_rules(spec.classes), {c.name: c for c in spec.classes})


def backend_group(ref: Mapping[str, Any], spec: KVPlanSpec, route_namespace: str | None) -> str | None:
    """The group a backendRef stands for (see the module docstring), or None when kvplan does not own it."""
    if ref.get("namespace") not in (None, route_namespace):
        return None
    group, kind, name = ref.get("group") or "", ref.get("kind") or "Service", ref.get("name")
    for g in spec.groups:
        if group == "" and kind == "Service" and name == g.service_name:
            return g.name
        if group == POOL_GROUP and kind == POOL_KIND and g.inference_pool and name == g.inference_pool:
            return g.name
    return None


def reweighted_rules(route: Mapping[str, Any], *, ref: HttpRouteRef, spec: KVPlanSpec,
                     classes: Mapping[str, ClassTarget], rates: Mapping[str, float],
                     interim: bool = False) -> list[dict[str, Any]]:
    """``spec.rules`` of ``route`` with the weights of owned backendRefs set (a new list; ``route`` untouched).
    ``interim``: a rule with no share anywhere (its class has nowhere else to go) is left as it is."""
    route_ns = route.get("metadata", {}).get("namespace")
    fleet = fleet_shares(spec, classes, rates)
    rules: list[dict[str, Any]] = json.loads(json.dumps(list(route.get("spec", {}).get("rules") or [])))
    for rule in rules:
        cls = _rule_class(rule, ref, spec)
        shares = dict(classes[cls].routing) if cls is not None and cls in classes else fleet
        owned = [(i, g) for i, b in enumerate(rule.get("backendRefs") or [])
                 if (g := backend_group(b, spec, route_ns)) is not None]
        count = {g: sum(1 for _, h in owned if h == g) for _, g in owned}
        if interim and sum(shares.get(g, 0.0) for _, g in owned) <= 0:
            continue
        weights = integer_weights({str(i): shares.get(g, 0.0) / count[g] for i, g in owned})
        for i, _ in owned:
            rule["backendRefs"][i]["weight"] = weights[str(i)]
    return rules


def build_httproute_patch(route: Mapping[str, Any], *, ref: HttpRouteRef, spec: KVPlanSpec,
                          classes: Mapping[str, ClassTarget], rates: Mapping[str, float],
                          owner: str = "", interim: bool = False,
                          priorities: Mapping[str, int] | None = None) -> dict[str, Any] | None:
    """Merge patch replacing ``spec.rules`` with owned weights (and class priority headers) set; None when nothing
    would change."""
    rules = reweighted_rules(route, ref=ref, spec=spec, classes=classes, rates=rates, interim=interim)
    rules = with_priority_headers(rules, lambda r: _rule_class(r, ref, spec), priorities or {},
                                  untagged_priority(priorities or {}))
    annotations = {ANN_OWNED: "spec.rules[*].backendRefs[*].weight,spec.rules[*].filters[RequestHeaderModifier]"
                              f".set[{PRIORITY_HEADER}]"} | ({ANN_OWNER: owner} if owner else {})
    current_owner = (route.get("metadata", {}).get("annotations") or {}).get(ANN_OWNER)
    if rules == list(route.get("spec", {}).get("rules") or []) and (not owner or current_owner == owner):
        return None
    return {"metadata": {"annotations": annotations}, "spec": {"rules": rules}}


class HttpRouteTarget:
    """Target ``httproute`` (see the module docstring)."""

    name = "httproute"

    def names(self, spec: KVPlanSpec, run: RunContext) -> tuple[str, ...]:
        return (spec.router.http_route.name,) if spec.router.http_route is not None else ()

    def read(self, kube: KubeApi, namespace: str, names: tuple[str, ...]) -> dict[str, dict[str, Any] | None]:
        return {n: kube.get_httproute(namespace, n) for n in names}

    def build(self, inp: BuildInput) -> TargetPlan:
        ref = inp.spec.router.http_route
        if ref is None:
            return TargetPlan()
        route = inp.observed.get(self.name, {}).get(ref.name)
        if route is None:
            return TargetPlan(notes=(f"HTTPRoute {ref.name} not found: weights not set",))
        conflict = owner_conflict("HTTPRoute", ref.name, route, inp)
        if conflict:
            raise TargetRefused(C.OWNED_BY_OTHER, conflict)
        d = inp.desired
        writes: list[Write] = []
        if d.draining and d.interim_classes is not None:
            patch = build_httproute_patch(route, ref=ref, spec=inp.spec, classes=d.interim_classes, rates=d.rates,
                                          owner=inp.run.owner, interim=True, priorities=d.class_priority)
            if patch is not None:
                writes.append(Write(Stage.ROUTE_AWAY, self.name, "HTTPRoute", ref.name, "patch", patch,
                                    ("routing away from " + ", ".join(sorted(d.draining)),)))
                route = {"metadata": {**route.get("metadata", {}), "annotations": {
                    **(route.get("metadata", {}).get("annotations") or {}), **patch["metadata"]["annotations"]}},
                    "spec": {**route.get("spec", {}), "rules": patch["spec"]["rules"]}}
        patch = build_httproute_patch(route, ref=ref, spec=inp.spec, classes=d.classes, rates=d.rates,
                                      owner=inp.run.owner, priorities=d.class_priority)
        if patch is not None:
            writes.append(Write(Stage.ROUTE, self.name, "HTTPRoute", ref.name, "patch", patch))
        return TargetPlan(tuple(writes))

    def write(self, kube: KubeApi, namespace: str, w: Write) -> None:
        kube.patch_httproute(namespace, w.name, w.body)
