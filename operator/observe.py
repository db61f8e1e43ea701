"""Phase 1, observe: every read of a reconcile, and nothing else.

In order: the spec (:func:`kvplan_operator.spec.parse_spec`); where Prometheus may be asked
(:func:`kvplan_operator.prom.check_url`); every target's objects (state ConfigMap, Deployments, router
ConfigMap, HTTPRoute, InferencePools); the HPAs/ScaledObjects; the KVPlans named as owner by objects this one
wants to write; the bearer-token Secret; then Prometheus (each class's histogram windows and arrival rate).

A failure becomes a :class:`~kvplan_operator.run.Failure` here, at the phase boundary: ``InvalidSpec`` /
``LayoutExceedsNode`` (permanent), ``PrometheusUrlRefused``, ``ReadFailed`` (a Kubernetes read other than 404),
``AuthSecretMissing``, every Prometheus reason of :mod:`kvplan_operator.prom` and :mod:`kvplan_operator.history`,
and ``TooFewSamples``. A missing object (404) is not a failure: it reads as ``None``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import conditions as C
from .desired import ANN_GENERATION, ANN_LAYOUT_CHANGES, ANN_OWNER, ANN_RELAYOUT_GENERATION, LayoutChange
from .history import ClassObservation, observe_class
from .kube import KubeError
from .prom import PromError, check_url
from .run import Deps, Failure, RunContext
from .spec import InvalidSpec, KVPlanSpec, parse_spec
from .targets import Observed, Target, all_targets
from .targets.deployment import read_layout
from .targets.state_configmap import decode_changes


@dataclass(frozen=True)
class GroupState:
    """One group's Deployment as observed: its body (None: missing), layout (kvplan's annotation first, else its
    flags), whether kvplan manages it already (``adopted``), its ``--max-num-seqs``, replicas and autoscaler."""

    body: Mapping[str, Any] | None
    layout: tuple[int, int] | None
    adopted: bool
    max_num_seqs: int | None
    replicas: int | None
    autoscaler: str | None
    #: the KVPlan generation kvplan last wrote to it (``kvplan.io/generation``), if any.
    generation: str | None = None


@dataclass(frozen=True)
class Observation:
    """Everything one reconcile knows about the world."""

    spec: KVPlanSpec
    classes: Mapping[str, ClassObservation]
    groups: Mapping[str, GroupState]
    #: target name -> object name -> body (None: missing).
    objects: Mapping[str, Observed]
    #: ``kvplan.io/owner`` values of other KVPlans found on our objects -> whether that KVPlan exists.
    owners_alive: Mapping[str, bool] = field(default_factory=dict)
    #: re-layouts attempted in the last hour (state ConfigMap record, with status.layoutChanges as a floor).
    layout_changes: tuple[LayoutChange, ...] = ()
    #: the generation whose spec change has already re-laid out (state ConfigMap), if any.
    relayout_generation: int | None = None
    query_seconds: float = 0.0


def _read_objects(run: RunContext, deps: Deps, spec: KVPlanSpec, targets: tuple[Target, ...]
                  ) -> dict[str, Observed]:
    return {t.name: t.read(deps.kube, run.namespace, t.names(spec, run)) for t in targets}


def _owners(run: RunContext, deps: Deps, objects: Mapping[str, Observed]) -> dict[str, bool]:
    """Other KVPlans named as owner on the objects we would write -> whether each still exists."""
    found: set[str] = set()
    for observed in objects.values():
        for body in observed.values():
            owner = ((body or {}).get("metadata", {}).get("annotations") or {}).get(ANN_OWNER)
            if owner and owner != run.owner:
                found.add(str(owner))
    out: dict[str, bool] = {}
    for owner in sorted(found):
        ns, _, name = owner.partition("/")
        # A KVPlan only manages its own namespace, so an owner elsewhere is not a live claim on this object.
        out[owner] = ns == run.namespace and bool(name) and deps.kube.get_kvplan(ns, name) is not None
    return out


def _budget(run: RunContext, state: Mapping[str, Any] | None) -> tuple[tuple[LayoutChange, ...], int | None]:
    ann = (state or {}).get("metadata", {}).get("annotations") or {}
    changes = list(decode_changes(ann.get(ANN_LAYOUT_CHANGES)))
    seen = {round(c.t, 3) for c in changes}
    for t in run.old_status.get("layoutChanges") or []:  # records written before the state ConfigMap kept them
        try:
            if round(float(t), 3) not in seen:
                changes.append(LayoutChange(float(t), ""))
        except (TypeError, ValueError):
            continue
    gen_text = ann.get(ANN_RELAYOUT_GENERATION)
    gen = int(gen_text) if isinstance(gen_text, str) and gen_text.isdigit() else None
    return tuple(sorted(changes, key=lambda c: c.t)), gen


def observe(run: RunContext, deps: Deps) -> Observation | Failure:
    """Phase 1 (see the module docstring)."""
    try:
        spec = parse_spec(run.body.get("spec"))
    except InvalidSpec as exc:
        return Failure("observe", exc.reason, str(exc), temporary=False)
    refused = check_url(spec.prometheus.url, deps.prom_policy,
                        **({"resolve": deps.resolve} if deps.resolve is not None else {}))
    if refused:
        return Failure("observe", C.PROMETHEUS_URL_REFUSED, refused + "; no request sent", temporary=False,
                       degraded=True)
    targets = all_targets()
    token: str | None = None
    try:
        objects = _read_objects(run, deps, spec, targets)
        scaled = deps.kube.autoscaled_deployments(run.namespace)
        owners = _owners(run, deps, objects)
        ref = spec.prometheus.auth_secret_ref
        if ref is not None:
            token = deps.kube.read_secret_key(run.namespace, ref.name, ref.key)
            if token is None:
                return Failure("observe", C.AUTH_SECRET_MISSING, f"auth secret {ref.name}[{ref.key}] not found "
                               f"(spec.prometheus.authSecretRef)", temporary=True, degraded=True)
    except KubeError as exc:
        return Failure("observe", C.READ_FAILED, str(exc), temporary=True, degraded=True)
    groups = {}
    for g in spec.groups:
        body = objects["deployment"].get(g.deployment)
        layout, adopted, seqs = read_layout(body, g.container)
        replicas = (body or {}).get("spec", {}).get("replicas")
        generation = ((body or {}).get("metadata", {}).get("annotations") or {}).get(ANN_GENERATION)
        groups[g.name] = GroupState(body, layout, adopted, seqs, replicas if isinstance(replicas, int) else None,
                                    scaled.get(g.deployment), generation)
    changes, relayout_gen = _budget(run, objects["state-configmap"].get(run.state_configmap))
    t0 = time.perf_counter()
    try:
        prom = deps.prom_factory(spec.prometheus.url, spec.prometheus.timeout_seconds, token)
        classes = {c.name: observe_class(prom, c, lookback_s=spec.prometheus.lookback_seconds,
                                         windows=spec.prometheus.windows, now=run.now, index=i)
                   for i, c in enumerate(spec.classes)}
    except PromError as exc:
        return Failure("observe", exc.reason, str(exc), temporary=True, degraded=True)
    few = [f"{c.name} ({classes[c.name].requests:g} < {c.history.min_samples})" for c in spec.classes
           if classes[c.name].history is None or classes[c.name].requests < c.history.min_samples]
    if few:
        return Failure("observe", C.TOO_FEW_SAMPLES, "too few samples in the lookback for class " + ", ".join(few),
                       temporary=True, degraded=True)
    return Observation(spec=spec, classes=classes, groups=groups, objects=objects, owners_alive=owners,
                       layout_changes=changes, relayout_generation=relayout_gen,
                       query_seconds=time.perf_counter() - t0)
