"""Phase 1, observe: every read of a reconcile, and nothing else.

In order: the spec (:func:`kvplan_operator.spec.parse_spec`); where Prometheus may be asked
(:func:`kvplan_operator.prom.vet_url`: refused, or the addresses the client will connect to; the host lookup is
bounded by ``timeoutSeconds``, the cycle deadline and the operator's stop, :mod:`kvplan_operator.prom.resolve`);
every target's objects (state ConfigMap, Deployments, router ConfigMap, HTTPRoute, InferencePools); the autoscalers (HPAs,
ScaledObjects, PodAutoscalers) and who owns each group's replicas (:mod:`.replica_owner`);
the ConfigMaps holding groups' model configs (:mod:`.model_config`); the KVPlans named as owner by objects this one wants to write; the Prometheus credentials and CA bundle (Secrets, a ConfigMap, an allowed token file); then
Prometheus: one range query per history source (:mod:`kvplan_operator.observe.sources`), one instant query for the
engines' capacity (:mod:`kvplan_operator.observe.sources.capacity`) and one for plan calibration
(:mod:`kvplan_operator.observe.calibration`, when a class has per-class preemption series) and one range query for
the step times (:mod:`kvplan_operator.observe.sources.steptime`, unless ``spec.capacity.stepTimes.fromEngine`` is
false). With every arrival rate from the sources (or given), that is the whole query budget of a re-plan:
``sources + 3``. The calibration and step-time queries never fail the reconcile: their failures are
``Observation.calibration.reason`` and each group's ``capacity[g].step_fit.reason``.

A failure becomes a :class:`~kvplan_operator.run.Failure` here, at the phase boundary: ``InvalidSpec`` /
``LayoutExceedsNode`` (permanent), ``PrometheusUrlRefused``, ``PrometheusAuthRefused``, ``ReadFailed`` (a
Kubernetes read other than 404), ``AuthSecretMissing``, every Prometheus reason of :mod:`kvplan_operator.prom`,
:mod:`kvplan_operator.observe.history` and :mod:`kvplan_operator.observe.sources`, and ``TooFewSamples``. A missing object (404)
is not a failure: it reads as ``None``.

When the only thing missing is the history of classes whose source is labelled by kvplan's classification file
(``MetricAbsent`` of :class:`~kvplan_operator.observe.sources.observe.ClassesAbsent`, or ``TooFewSamples`` of
those classes only), the failure is a :class:`HistoryAwaited`: it carries what was observed of the cluster, so
that the bootstrap (:mod:`kvplan_operator.decide.bootstrap`) can mount that file, which is what the history waits
for.
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kvcore import Plan

from .. import conditions as C
from .. import cycle
from ..desired import ANN_GENERATION, ANN_LAYOUT_CHANGES, ANN_RELAYOUT_GENERATION, LayoutChange
from .calibration import RealisedCalibration, observe_calibration
from .history import ClassObservation
from .model_config import read_model_configs
from ..targets.plandetail import Detail, read_detail
from ..kube import CYCLE_DEADLINE, KubeApi, KubeError
from ..prom import PromConnection, PromError, UrlPolicy, vet_url
from ..prom.credentials import BadCredential, basic_password, basic_user, bearer_token
from ..prom.resolve import BoundedResolver, ResolveCut, system_lookup
from ..run import Deps, Failure, RunContext
from .sources import observe_histories
from .sources.capacity import capacity_query, engine_capacity
from .sources.observe import FILE_LABELLED, ClassesAbsent, window_seconds
from ..spec import InvalidSpec, KVPlanSpec, parse_spec
from .capacity import GroupCapacity, SpecProfiles, capacity_view
from .sources.steptime import observe_step_fits
from .workloads import group_body, read_llmisvcs
from ..targets import Observed, Target, all_targets
from ..targets.deployment import read_dp_local, read_layout
from ..targets.workload_owner import helm_release
from .replica_owner import replica_owner
from ..targets.ownership import claimant
from ..targets.state_configmap import decode_changes


@dataclass(frozen=True)
class GroupState:
    """One group's Deployment as observed: its body (None: missing), layout (kvplan's annotation first, else its
    flags), whether kvplan manages it already (``adopted``), its ``--max-num-seqs``, replicas and who owns them
    (``autoscaler``: None when kvplan does; :mod:`.replica_owner`)."""

    body: Mapping[str, Any] | None
    layout: tuple[int, int] | None
    adopted: bool
    max_num_seqs: int | None
    replicas: int | None
    autoscaler: str | None
    #: the KVPlan generation kvplan last wrote to it (``kvplan.io/generation``), if any.
    generation: str | None = None
    #: why ``autoscaler`` owns the replicas (:data:`kvplan_operator.conditions.REPLICA_REASONS`).
    replica_reason: str = C.REPLICAS_BY_KVPLAN
    #: the Helm release that renders the Deployment (``helm upgrade`` restores the chart's fields), if any.
    helm_release: str | None = None
    #: vLLM engines per pod (data parallelism, :func:`kvplan_operator.targets.deployment.read_dp_local`); None:
    #: known only at run time (the Deployment target refuses to write it).
    dp_local: int | None = 1


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
    #: per group: where its KV capacity comes from (the engine or the profile) and what the engines report.
    capacity: Mapping[str, GroupCapacity] = field(default_factory=dict)
    #: the plan's detail ConfigMaps as read (the last plan recorded: its kvcore plan and published routing).
    detail: Detail = field(default_factory=lambda: Detail(None))
    #: ``status.lastGoodPlan`` and ``status.plan.classes`` as an operator before the detail ConfigMaps wrote them
    #: (None / empty: absent); read only when the detail is absent.
    legacy_plan: Plan | None = None
    legacy_published: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: plan calibration's realised side (None: not asked, e.g. a test world built by hand).
    calibration: RealisedCalibration | None = None

    def previous_plan(self) -> Plan | None:
        """The last plan applied in full: the detail's, else an older operator's ``status.lastGoodPlan``."""
        return self.detail.previous_plan() or self.legacy_plan

    def published(self) -> Mapping[str, Mapping[str, Any]]:
        """Per class as last published (``admitted``, ``routing``, ``prefixCacheFraction``; sparse maps)."""
        return self.detail.published() or self.legacy_published


@dataclass(frozen=True)
class HistoryAwaited(Failure):
    """``MetricAbsent`` / ``TooFewSamples`` of only the classes in ``classes``, whose history source is labelled by
    kvplan's classification file; ``observation`` is everything else observe read (its ``classes`` empty)."""

    observation: Observation | None = None
    classes: tuple[str, ...] = ()


def _read_objects(run: RunContext, deps: Deps, spec: KVPlanSpec, targets: tuple[Target, ...]
                  ) -> dict[str, Observed]:
    return {t.name: t.read(deps.kube, run.namespace, t.names(spec, run)) for t in targets}


def _owners(run: RunContext, deps: Deps, objects: Mapping[str, Observed], detail: Detail) -> dict[str, bool]:
    """Other KVPlans named as owner (``kvplan.io/owner`` or an ownerReference) on the objects we would write, the
    plan's detail ConfigMaps included -> whether each still exists."""
    found: set[str] = set()
    for observed in (*objects.values(), detail.chunks):
        for body in observed.values():
            owner = claimant(body, run.namespace)
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


def rolled_out_at(body: Mapping[str, Any] | None) -> float | None:
    """When a Deployment's last rollout completed: its ``Progressing`` condition's ``lastUpdateTime`` with reason
    ``NewReplicaSetAvailable`` (unix seconds), else None."""
    for cond in ((body or {}).get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "Progressing" \
                and cond.get("reason") == "NewReplicaSetAvailable":
            try:
                return _dt.datetime.strptime(str(cond.get("lastUpdateTime")), "%Y-%m-%dT%H:%M:%SZ").replace(
                    tzinfo=_dt.UTC).timestamp()
            except ValueError:
                return None
    return None


def relayout_times(spec: KVPlanSpec, changes: tuple[LayoutChange, ...],
                   groups: Mapping[str, GroupState] | None = None) -> dict[str, float]:
    """Per group, the later of its last re-layout attempt and the end of its Deployment's last rollout
    (:func:`rolled_out_at`), unix seconds: the step-time fit reads only windows after it, so that no window mixes
    engines of two layouts. An attempt names every group's target; it re-lays out a group only where that target
    differs from the group's target in the attempt before (the first attempt naming a group counts; an attempt
    naming no group counts for all)."""
    out: dict[str, float] = {}
    target: dict[str, str] = {}
    for change in sorted(changes, key=lambda c: c.t):
        named = dict(part.partition("=")[::2] for part in change.layouts.split(",") if part)
        for g in spec.groups:
            if not named or (g.name in named and target.get(g.name) != named[g.name]):
                out[g.name] = max(out.get(g.name, change.t), change.t)
        target.update(named)
    for name, state in (groups or {}).items():
        if (done := rolled_out_at(state.body)) is not None:
            out[name] = max(out.get(name, done), done)
    return out


def unsettled(body: Mapping[str, Any] | None) -> str | None:
    """Why a Deployment's pods may not all run its current template (so its engines' capacity cannot be tied to
    its layout), or None. A Deployment the apiserver versioned (``metadata.generation``) but no controller has
    observed counts as unsettled: nothing says its pods exist, let alone in which layout."""
    st = (body or {}).get("status") or {}
    meta = (body or {}).get("metadata") or {}
    gen, seen = meta.get("generation"), st.get("observedGeneration")
    if isinstance(gen, int) and not isinstance(seen, int):
        return "no Deployment controller has observed it yet"
    if isinstance(gen, int) and isinstance(seen, int) and seen < gen:
        return "it is rolling out (its controller has not caught up)"
    want = ((body or {}).get("spec") or {}).get("replicas")
    updated, total = st.get("updatedReplicas"), st.get("replicas")
    if isinstance(updated, int) and ((isinstance(want, int) and updated < want)
                                     or (isinstance(total, int) and updated < total)):
        return "it is rolling out (engines may run two layouts)"
    return None


class CredentialRefused(Exception):
    """A Prometheus credential or CA bundle that cannot be used; ``failure`` is the condition to record."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def connection(spec: KVPlanSpec, namespace: str, kube: KubeApi, policy: UrlPolicy) -> PromConnection:
    """``spec.prometheus`` -> :class:`PromConnection`, reading its Secrets, ConfigMap or token file. Raises
    :class:`CredentialRefused` (``AuthSecretMissing``, ``PrometheusAuthRefused``) or :class:`KubeError`."""
    p = spec.prometheus
    token: str | None = None
    basic: tuple[str, str] | None = None
    ca: str | None = None
    origin = ""

    def missing(what: str, field_path: str) -> CredentialRefused:
        return CredentialRefused(Failure("observe", C.AUTH_SECRET_MISSING, f"{what} not found ({field_path})", temporary=True,
                                degraded=True))

    def sendable(clean: Callable[[str, str], str], raw: str, origin: str, field_path: str) -> str:
        try:
            return clean(raw, origin)
        except BadCredential as exc:
            raise CredentialRefused(Failure("observe", C.PROMETHEUS_AUTH_REFUSED, f"{field_path}: {exc}; no request "
                                            "sent", temporary=True, degraded=True)) from None

    if p.auth_secret_ref is not None:
        ref = p.auth_secret_ref
        token = kube.read_secret_key(namespace, ref.name, ref.key)
        if token is None:
            raise missing(f"auth secret {ref.name}[{ref.key}]", "spec.prometheus.authSecretRef")
        token = sendable(bearer_token, token, f"Secret/{ref.name}[{ref.key}]", "spec.prometheus.authSecretRef")
    elif p.bearer_token_file is not None:
        path = os.path.normpath(p.bearer_token_file)
        if path not in policy.token_files:
            raise CredentialRefused(Failure("observe", C.PROMETHEUS_AUTH_REFUSED, f"spec.prometheus.bearerTokenFile: {path} "
                                   "is not in the operator's allowed token files (--prometheus-token-files); no "
                                   "request sent", temporary=False, degraded=True))
        try:
            with open(path, encoding="utf-8") as handle:
                token = handle.read(65536).strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise CredentialRefused(Failure("observe", C.PROMETHEUS_AUTH_REFUSED, f"spec.prometheus.bearerTokenFile: cannot "
                                   f"read {path} ({type(exc).__name__})", temporary=True, degraded=True)) from None
        token = sendable(bearer_token, token, path, "spec.prometheus.bearerTokenFile")
    elif p.basic_auth is not None:
        b = p.basic_auth
        user = kube.read_secret_key(namespace, b.secret_ref.name, b.username_key)
        password = kube.read_secret_key(namespace, b.secret_ref.name, b.password_key)
        if user is None or password is None:
            key = b.username_key if user is None else b.password_key
            raise missing(f"basic-auth secret {b.secret_ref.name}[{key}]", "spec.prometheus.basicAuth")
        basic = (sendable(basic_user, user, f"Secret/{b.secret_ref.name}[{b.username_key}]",
                          "spec.prometheus.basicAuth"),
                 sendable(basic_password, password, f"Secret/{b.secret_ref.name}[{b.password_key}]",
                          "spec.prometheus.basicAuth"))
    tls = p.tls
    if tls is not None and tls.ca_secret_ref is not None:
        origin = f"Secret/{tls.ca_secret_ref.name}[{tls.ca_secret_ref.key}]"
        ca = kube.read_secret_key(namespace, tls.ca_secret_ref.name, tls.ca_secret_ref.key)
        if ca is None:
            raise missing(f"CA bundle {origin}", "spec.prometheus.tls.caSecretRef")
    elif tls is not None and tls.ca_config_map_ref is not None:
        ref2 = tls.ca_config_map_ref
        origin = f"ConfigMap/{ref2.name}[{ref2.key}]"
        body = kube.get_configmap(namespace, ref2.name)
        ca = ((body or {}).get("data") or {}).get(ref2.key)
        if not ca:
            raise missing(f"CA bundle {origin}", "spec.prometheus.tls.caConfigMapRef")
    return PromConnection(p.url, p.timeout_seconds, token, basic, tuple(p.headers.items()), ca,
                          bool(tls and tls.insecure_skip_verify), origin)


def _partial(run: RunContext, spec: KVPlanSpec, groups: Mapping[str, GroupState], objects: Mapping[str, Observed],
             owners: Mapping[str, bool], changes: tuple[LayoutChange, ...], relayout_gen: int | None,
             detail: Detail) -> Observation:
    """What observe read of the cluster, without the histories (for :class:`HistoryAwaited`)."""
    return Observation(spec=spec, classes={}, groups=groups, objects=objects, owners_alive=owners,
                       layout_changes=changes, relayout_generation=relayout_gen, detail=detail,
                       legacy_plan=run.previous_plan())


def _resolver(run: RunContext, deps: Deps, spec: KVPlanSpec) -> BoundedResolver:
    """The host lookup for :func:`vet_url` (``deps.resolve``, else the system's), bounded by
    ``spec.prometheus.timeoutSeconds``, the time left to the cycle deadline and the operator's stop
    (:mod:`kvplan_operator.prom.resolve`); lookups cut are counted per namespace. ``run.deadline`` is in
    ``deps.clock``; the bound is monotonic."""
    return BoundedResolver(deps.resolve if deps.resolve is not None else system_lookup,
                           limit_s=spec.prometheus.timeout_seconds, cycle_deadline=cycle.writes_end(run, deps.clock),
                           cycle_s=run.deadline_s, key=run.namespace)


def observe(run: RunContext, deps: Deps) -> Observation | Failure:
    """Phase 1 (see the module docstring)."""
    try:
        spec = parse_spec(run.body.get("spec"))
    except InvalidSpec as exc:
        return Failure("observe", exc.reason, str(exc), temporary=False)
    try:
        vetted = vet_url(spec.prometheus.url, deps.prom_policy, resolve=_resolver(run, deps, spec))
    except ResolveCut as exc:  # the lookup outlived timeoutSeconds or the cycle deadline, or the operator stops
        return Failure("observe", exc.reason, str(exc), temporary=True, degraded=exc.reason != C.OPERATOR_STOPPING)
    if vetted.refused:
        return Failure("observe", C.PROMETHEUS_URL_REFUSED, vetted.refused + "; no request sent", temporary=False,
                       degraded=True)
    if vetted.unresolved:  # the client would look the name up again, and a second answer is not what was vetted
        return Failure("observe", C.PROMETHEUS_UNAVAILABLE, "spec.prometheus.url: its host does not resolve; no "
                       "request sent", temporary=True, degraded=True)
    targets = all_targets()
    try:
        with_configs = read_model_configs(deps.kube, run.namespace, spec)
        if isinstance(with_configs, Failure):
            return with_configs
        spec = with_configs
        objects = read_llmisvcs(deps.kube, run.namespace, spec, _read_objects(run, deps, spec, targets))
        scaled = deps.kube.autoscaled_deployments(run.namespace)
        detail = read_detail(deps.kube, run.namespace, run.name)
        owners = _owners(run, deps, objects, detail)
        conn = replace(connection(spec, run.namespace, deps.kube, deps.prom_policy), addresses=vetted.addresses)
    except CredentialRefused as exc:
        return exc.failure
    except KubeError as exc:
        reason = C.CYCLE_DEADLINE_EXCEEDED if exc.kind == CYCLE_DEADLINE else C.READ_FAILED
        return Failure("observe", reason, str(exc), temporary=True, degraded=True)
    groups = {}
    for g in spec.groups:
        body = group_body(g, objects)
        layout, adopted, seqs = read_layout(body, g.container)
        replicas = (body or {}).get("spec", {}).get("replicas")
        generation = ((body or {}).get("metadata", {}).get("annotations") or {}).get(ANN_GENERATION)
        owner = replica_owner(g, body, scaled)
        groups[g.name] = GroupState(body, layout, adopted, seqs, replicas if isinstance(replicas, int) else None,
                                    None if owner.kvplan else owner.by, generation, owner.reason,
                                    helm_release(body), read_dp_local(body, g.container))
    changes, relayout_gen = _budget(run, objects["state-configmap"].get(run.state_configmap))
    t0 = time.perf_counter()
    try:
        prom = cycle.bound(deps.prom_factory(conn), run, deps.clock)
        classes = observe_histories(prom, spec, run.namespace, now=run.now)
        engines = None
        if spec.capacity.from_engine:
            engines = engine_capacity(prom.query(capacity_query(spec, run.namespace, window_seconds(spec)),
                                                 at=run.now), spec, at=run.now)
    except ClassesAbsent as exc:  # every other source answered: their classes are checked below
        awaited, absent, classes = exc.classes, str(exc), exc.observed
    except PromError as exc:
        return Failure("observe", exc.reason, str(exc), temporary=exc.reason != C.PROMETHEUS_URL_REFUSED,
                       degraded=True, retry_after_s=exc.retry_after_s)
    else:
        awaited, absent = (), ""
    short = [c for c in spec.classes if c.name in classes
             and (classes[c.name].history is None or classes[c.name].requests < c.history.min_samples)]
    if awaited or short:
        reason = C.METRIC_ABSENT if awaited else C.TOO_FEW_SAMPLES
        message = absent or "too few samples in the lookback for class " + ", ".join(
            f"{c.name} ({classes[c.name].requests:g} < {c.history.min_samples})" for c in short)
        if all(c.history.source in FILE_LABELLED for c in short):
            return HistoryAwaited("observe", reason, message, temporary=True, degraded=True,
                                  observation=_partial(run, spec, groups, objects, owners, changes, relayout_gen,
                                                       detail),
                                  classes=(*awaited, *(c.name for c in short)))
        return Failure("observe", reason, message, temporary=True, degraded=True)
    calibration = observe_calibration(prom, spec, run.namespace, now=run.now, window_s=window_seconds(spec))
    layouts = {k: s.layout for k, s in groups.items()}
    settling = {g.name: unsettled(groups[g.name].body) for g in spec.groups}
    own = SpecProfiles.of(spec)
    fits = observe_step_fits(prom, spec, run.namespace, now=run.now, engines=engines, layouts=layouts,
                             unsettled=settling, since=relayout_times(spec, changes, groups), models=own.models,
                             gpus=own.gpus, profile_kv={g.name: own.tokens(g, z) if (z := layouts.get(g.name))
                                                        else None for g in spec.groups})
    capacity = capacity_view(spec, engines, layouts, settling, fits)
    legacy = (run.old_status.get("plan") or {}).get("classes")
    return Observation(spec=spec, classes=classes, groups=groups, objects=objects, owners_alive=owners,
                       layout_changes=changes, relayout_generation=relayout_gen,
                       query_seconds=time.perf_counter() - t0, capacity=capacity, detail=detail,
                       calibration=calibration,
                       legacy_plan=run.previous_plan(),
                       legacy_published=legacy if isinstance(legacy, Mapping) and legacy and all(
                           isinstance(v, Mapping) for v in legacy.values()) else {})
