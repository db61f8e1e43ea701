"""One idempotent reconcile of one KVPlan, in numbered phases:

1. **spec**: the CR -> :class:`KVPlanSpec` (``InvalidSpec``/``LayoutExceedsNode`` -> Ready=False, nothing applied);
2. **snapshot**: Prometheus histories and rates per class, the target Deployments, who scales them
   (Prometheus down or too few samples -> keep the last good plan, Degraded=True, retry with backoff);
3. **plan**: ``kvcore.planner.plan`` (free, and pinned to current layouts when a re-layout is proposed), then the
   disruption policy (``policy.decide``); infeasible -> status says why, nothing applied;
4. **build**: pure ``build_*`` patches; 5. **apply** what differs (Apply mode, every target present);
6. **status**: one merge patch, written only when it changed; events only on condition transitions.

Level-based: everything is recomputed from the CR, Prometheus and the cluster each time. The applied layout is
read back from the Deployment's ``kvplan.io/layout`` annotation (written in the same patch as the args), so a
restart between phases converges without duplicate or conflicting writes. Side effects go through ``Deps``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from kvcore.errors import InputError
from kvcore.instance import input_error
from kvcore.planmodel import Plan

from . import conditions as C
from .apply import Desired, apply_desired
from .builders import (ANN_GENERATION, ANN_LAYOUT, PP_FLAG, SEQS_FLAG, TP_FLAG, GroupTarget,
                       build_deployment_patch, build_httproute_patch, build_router_configmap_patch,
                       build_router_document, build_state_configmap, find_container, hold_small_moves, plan_id,
                       read_flag, state_configmap_name)
from .policy import OK_STATUSES, decide, layout_moves, recent_changes
from .snapshot import PromApi, PrometheusUnavailable, Snapshot, take_snapshot
from .spec import InvalidSpec, KVPlanSpec, parse_spec
from .status import diff_body, iso, objective_body, parse_iso, plan_body, status_patch
from .translate import build_instance, horizon_ratio, radius_policy, targets

#: Top-level status keys this module owns (kopf keeps its own, e.g. ``status.kopf``).
OWNED = ("observedGeneration", "plannedGeneration", "lastPlanTime", "lastAttemptTime", "mode", "conditions", "plan",
         "objective", "diff", "summary", "layoutChanges", "lastGoodPlan", "consecutiveFailures", "lastError")


@dataclass(frozen=True)
class Deps:
    """Everything with a side effect, injected. ``kube`` is :class:`kvplan_operator.kube.Kube` or a fake."""

    kube: Any
    prom_factory: Callable[[str, float, str | None], PromApi]
    planner: Callable[..., Plan]
    metrics: Any = None
    clock: Callable[[], float] = time.time
    #: First retry delay after a failure, seconds; doubles per consecutive failure. 10 s: Prometheus restarts fast.
    backoff_base_s: float = 10.0
    #: Longest retry delay, seconds: 5 min matches the default re-plan interval.
    backoff_max_s: float = 300.0


@dataclass(frozen=True)
class Outcome:
    """What a reconcile did. ``retry_after`` (s) is set for temporary failures (handlers raise TemporaryError)."""

    ok: bool
    reason: str
    message: str = ""
    retry_after: float | None = None
    changed: list[str] = field(default_factory=list)
    status_written: bool = False
    cycle_seconds: float = 0.0


def current_layout(body: Mapping[str, Any] | None, container: str | None) -> tuple[tuple[int, int] | None, bool, int | None]:
    """(layout, adopted, max_num_seqs) of a Deployment: our annotation first, else its args (default tp=pp=1)."""
    if body is None:
        return None, False, None
    cont = find_container(body, container)
    args = list((cont or {}).get("args") or [])
    seqs_text = read_flag(args, SEQS_FLAG)
    seqs = int(seqs_text) if seqs_text and seqs_text.isdigit() else None
    ann = (body.get("metadata", {}).get("annotations") or {}).get(ANN_LAYOUT)
    if ann:
        parts = dict(p.split("=", 1) for p in ann.split(",") if "=" in p)
        try:
            return (int(parts["tp"]), int(parts["pp"])), True, seqs
        except (KeyError, ValueError):
            pass
    tp, pp = read_flag(args, TP_FLAG), read_flag(args, PP_FLAG)
    return (int(tp) if tp and tp.isdigit() else 1, int(pp) if pp and pp.isdigit() else 1), False, seqs


def _input_error_path(exc: Exception) -> list[tuple[str, str]]:
    """kvcore's refusal as (spec path, message); kvcore's classes[i]/groups[i] index like the spec's."""
    if isinstance(exc, ValidationError):
        exc = input_error(exc)
    if isinstance(exc, InputError):
        return [("spec." + exc.field if exc.field.startswith(("classes", "groups", "profiles")) else exc.field,
                 exc.message)]
    return [("spec", str(exc))]


class _Run:
    """State of one reconcile call: the status being built and the conditions to set."""

    def __init__(self, body: Mapping[str, Any], deps: Deps) -> None:
        self.body, self.deps = body, deps
        self.t0 = time.perf_counter()
        self.now = deps.clock()
        meta = body["metadata"]
        self.ns, self.name = meta["namespace"], meta["name"]
        self.gen = meta.get("generation")
        self.old: dict[str, Any] = dict(body.get("status") or {})
        self.st: dict[str, Any] = {k: self.old[k] for k in OWNED if k in self.old}
        self.st["lastAttemptTime"] = iso(self.now)
        self.st["observedGeneration"] = self.gen
        self.conds: list[tuple[str, bool, str, str]] = []

    @property
    def owner(self) -> str:
        return f"{self.ns}/{self.name}"

    def cond(self, type_: str, status: bool, reason: str, message: str) -> None:
        self.conds.append((type_, status, reason, message))

    def backoff(self) -> float:
        n = int(self.st.get("consecutiveFailures") or 0)
        return float(min(self.deps.backoff_max_s, self.deps.backoff_base_s * 2 ** max(n - 1, 0)))

    def fail(self, reason: str, message: str, *, temporary: bool, degraded: bool = False) -> Outcome:
        """A failed attempt: nothing applied; the last good plan stays in status."""
        self.st["consecutiveFailures"] = int(self.st.get("consecutiveFailures") or 0) + 1
        self.st["lastError"] = {"reason": reason, "message": C.truncate(message), "time": iso(self.now)}
        have_plan = bool(self.old.get("lastGoodPlan"))
        ready = C.find(self.old.get("conditions") or [], C.READY)
        if degraded:
            self.cond(C.DEGRADED, True, reason, message + (" (serving the last good plan)" if have_plan else ""))
            self.cond(C.PLANNED, False, reason, message)
            if not (have_plan and ready is not None and ready.get("status") == "True"):
                self.cond(C.READY, False, reason, message)
        else:
            self.cond(C.READY, False, reason, message)
            self.cond(C.PLANNED if reason in (C.INFEASIBLE, C.PLANNER_ERROR) else C.APPLIED, False, reason, message)
            if reason in (C.INVALID_SPEC, C.LAYOUT_EXCEEDS_NODE):
                self.cond(C.PLANNED, False, reason, message)
                self.cond(C.APPLIED, False, reason, "nothing applied: " + message)
        if self.deps.metrics is not None:
            self.deps.metrics.failure(self.owner, reason)
        retry = self.backoff() if temporary else None
        written = self.finish()
        return Outcome(False, reason, message, retry, [], written, time.perf_counter() - self.t0)

    def finish(self) -> bool:
        """Set conditions, write the status patch if anything changed, post events for transitions."""
        before = list(self.old.get("conditions") or [])
        conds = list(before)
        for type_, status, reason, message in self.conds:
            conds, _ = C.set_condition(conds, type_, status, reason, message, generation=self.gen, now=iso(self.now))
        self.st["conditions"] = conds
        # lastAttemptTime alone does not justify a write (it would make every timer tick a status write).
        probe = dict(self.st)
        probe["lastAttemptTime"] = self.old.get("lastAttemptTime")
        if status_patch(self.old, probe, owned=OWNED) is None:
            return False
        patch = status_patch(self.old, self.st, owned=OWNED)
        if patch:
            self.deps.kube.patch_kvplan_status(self.ns, self.name, patch)
        for type_ in C.TYPES:
            if C.transitioned(before, conds, type_):
                c = C.find(conds, type_)
                assert c is not None
                bad = (type_ == C.DEGRADED) == (c["status"] == "True") and c["reason"] != C.DRY_RUN
                try:
                    self.deps.kube.post_event(self.body, type_="Warning" if bad else "Normal", reason=c["reason"],
                                              message=f"{type_}={c['status']}: {c['message']}")
                except Exception:  # an event is best effort; the condition is the record
                    pass
        return True


def reconcile(body: Mapping[str, Any], deps: Deps) -> Outcome:
    """Run the phases once for ``body`` (a KVPlan as the apiserver returned it)."""
    run = _Run(body, deps)
    # 1. spec ---------------------------------------------------------------------------------------------------
    try:
        spec = parse_spec(body.get("spec"))
    except InvalidSpec as exc:
        return run.fail(exc.reason, str(exc), temporary=False)
    run.st["mode"] = spec.mode
    run.st["summary"] = {"groups": len(spec.groups), "classes": len(spec.classes)}
    # 2. snapshot -----------------------------------------------------------------------------------------------
    token = None
    ref = spec.prometheus.auth_secret_ref
    if ref is not None:
        token = deps.kube.read_secret_key(run.ns, ref.name, ref.key)
        if token is None:
            return run.fail(C.PROMETHEUS_UNAVAILABLE, f"auth secret {ref.name}[{ref.key}] not found",
                            temporary=True, degraded=True)
    try:
        prom = deps.prom_factory(spec.prometheus.url, spec.prometheus.timeout_seconds, token)
        snap = take_snapshot(spec, namespace=run.ns, prom=prom, kube=deps.kube, now=run.now)
    except PrometheusUnavailable as exc:
        return run.fail(C.PROMETHEUS_UNAVAILABLE, str(exc), temporary=True, degraded=True)
    few = [f"{c.name} ({snap.classes[c.name].requests:g} < {c.history.min_samples})" for c in spec.classes
           if snap.classes[c.name].history is None or snap.classes[c.name].requests < c.history.min_samples]
    if few:
        return run.fail(C.TOO_FEW_SAMPLES, "too few samples in the lookback for class " + ", ".join(few),
                        temporary=True, degraded=True)
    run.cond(C.DEGRADED, False, C.HEALTHY, "Prometheus answered; every class has enough samples")
    return _plan_and_apply(run, spec, snap)


def _plan_and_apply(run: _Run, spec: KVPlanSpec, snap: Snapshot) -> Outcome:
    deps = run.deps
    missing = [g.deployment for g in spec.groups if snap.deployments[g.name].body is None]
    no_container = [g.deployment for g in spec.groups
                    if snap.deployments[g.name].body is not None
                    and find_container(snap.deployments[g.name].body or {}, g.container) is None]
    current: dict[str, tuple[int, int]] = {}
    adopted: dict[str, bool] = {}
    cur_seqs: dict[str, int | None] = {}
    for g in spec.groups:
        lay, adop, seqs = current_layout(snap.deployments[g.name].body, g.container)
        if lay is not None:
            current[g.name], adopted[g.name], cur_seqs[g.name] = lay, adop, seqs
    # 3. plan ---------------------------------------------------------------------------------------------------
    previous = None
    if run.old.get("lastGoodPlan"):
        try:
            previous = Plan.model_validate_json(run.old["lastGoodPlan"])
        except ValidationError:
            previous = None
    try:
        free = deps.planner(build_instance(spec, snap), previous=previous)
    except (InputError, ValidationError) as exc:
        return run.fail(C.INVALID_SPEC, str(InvalidSpec(_input_error_path(exc))), temporary=False)
    solve_s = free.solve_seconds
    if free.status not in OK_STATUSES:
        reason = C.INFEASIBLE if free.status.value == "infeasible" else C.PLANNER_ERROR
        run.st["plan"] = dict(run.old.get("plan") or {})
        run.st["plan"]["lastFailure"] = {"status": free.status.value, "reason": free.reason, "rawStatus": free.raw_status}
        return run.fail(reason, f"planner {free.status.value}: {free.reason}; nothing applied", temporary=False)
    spec_changed = run.old.get("plannedGeneration") != run.gen
    pinned = {k: v for k, v in current.items() if adopted.get(k)}
    hold = None
    if layout_moves(free, pinned) and not spec_changed:
        hold = deps.planner(build_instance(spec, snap, layouts=pinned), previous=previous)
        solve_s += hold.solve_seconds
    changes = recent_changes([float(t) for t in run.old.get("layoutChanges") or []], run.now)
    decision = decide(free, hold, current=pinned, min_improvement=spec.replan.min_improvement,
                      changes_last_hour=len(changes), max_per_hour=spec.replan.max_layout_changes_per_hour,
                      spec_changed=spec_changed)
    plan = decision.plan
    # 4. build --------------------------------------------------------------------------------------------------
    rates = {c: o.arrival_rate for c, o in snap.classes.items()}
    gt, ct = targets(spec, plan, rates, current)
    ct = hold_small_moves(ct, (run.old.get("plan") or {}).get("classes") or {}, spec.router.min_weight_change)
    for g in spec.groups:  # --max-num-seqs rides along with a rollout, never triggers one on its own
        t = gt[g.name]
        dbody = snap.deployments[g.name].body or {}
        applied_gen = (dbody.get("metadata", {}).get("annotations") or {}).get(ANN_GENERATION)
        same_spec = applied_gen is not None and applied_gen == str(run.gen)
        same_layout = current.get(g.name) == (t.tp, t.pp)
        if same_layout and adopted.get(g.name) and same_spec and cur_seqs.get(g.name) is not None:
            gt[g.name] = GroupTarget(t.name, t.tp, t.pp, t.replicas, cur_seqs[g.name])
    pid = plan_id(gt, ct)
    reservations = {c: t.reserve_tokens for c, t in ct.items()}
    notes = [decision.reason]
    for c in spec.classes:
        note = radius_policy(c.robustness or spec.robustness, horizon=horizon_ratio(spec)).note
        if note:
            notes.append(f"class {c.name}: {note}")
    autos = {g.name: snap.deployments[g.name].autoscaler for g in spec.groups}
    for g in spec.groups:
        if autos[g.name]:
            notes.append(f"group {g.name}: replicas left to {autos[g.name]} (planned {gt[g.name].replicas})")
    cm_name = state_configmap_name(run.name)
    meta = run.body["metadata"]
    owner_ref = {"apiVersion": "kvplan.io/v1alpha1", "kind": "KVPlan", "name": run.name, "uid": meta.get("uid"),
                 "controller": True, "blockOwnerDeletion": False}
    dep_patches: dict[str, tuple[Mapping[str, Any], Mapping[str, Any]]] = {}
    for g in spec.groups:
        observed = snap.deployments[g.name].body
        if observed is None or g.deployment in no_container:
            continue
        dbody = observed
        prev_env = {e.get("name") for e in (find_container(dbody, g.container) or {}).get("env") or []}
        stale = sorted(n for n in prev_env if n and n.startswith("KVPLAN_RESERVE_")
                       and n not in {c.env_name for c in spec.classes})
        dep_patches[g.deployment] = (dbody, build_deployment_patch(
            dbody, group=g, target=gt[g.name], classes=spec.classes, reservations=reservations, owner=run.owner,
            generation=run.gen, state_configmap=cm_name, manage_replicas=autos[g.name] is None, stale_env=stale))
    router_cm = None
    route_patch = None
    if spec.router.config_map is not None:
        doc = build_router_document(owner=run.owner, plan_id=pid, spec=spec, groups=gt, classes=ct)
        router_cm = (spec.router.config_map.name, build_router_configmap_patch(doc, key=spec.router.config_map.key))
    if spec.router.http_route is not None and spec.mode == "Apply":
        route = deps.kube.get_httproute(run.ns, spec.router.http_route.name)
        if route is None:
            notes.append(f"HTTPRoute {spec.router.http_route.name} not found: weights not set")
        else:
            p = build_httproute_patch(route, ref=spec.router.http_route, spec=spec, classes=ct, rates=rates)
            route_patch = (spec.router.http_route.name, p) if p else None
    run.cond(C.PLANNED, True, C.PLAN_SUCCEEDED, f"{plan.status.value}: {plan.reason}")
    # 5. apply --------------------------------------------------------------------------------------------------
    run.st["plan"] = plan_body(plan, snapshot=snap, targets=gt, applied=ct, autoscalers=autos,
                               decision=decision.reason, notes=notes)
    run.st["plan"]["id"] = pid
    run.st["objective"] = objective_body(plan)
    run.st["diff"] = diff_body(plan)
    changed: list[str] = []
    if spec.mode == "DryRun":
        run.cond(C.APPLIED, False, C.DRY_RUN, "mode DryRun: plan written to status only")
    elif missing or no_container:
        msg = "; ".join([f"Deployment {d} not found in namespace {run.ns}" for d in missing]
                        + [f"Deployment {d}: vLLM container not found (set groups[].container)" for d in no_container])
        reason = C.DEPLOYMENT_MISSING if missing else C.CONTAINER_NOT_FOUND
        _record_plan(run, plan, relayout=False)
        return run.fail(reason, msg + "; nothing applied", temporary=True)
    else:
        desired = Desired(
            deployments=dep_patches,
            state_configmap=build_state_configmap(name=cm_name, namespace=run.ns, owner_ref=owner_ref,
                                                  classes=spec.classes, reservations=reservations),
            router_configmap=router_cm, httproute=route_patch)
        try:
            result = apply_desired(deps.kube, run.ns, desired)
        except Exception as exc:  # the apiserver refused a patch: report, retry
            _record_plan(run, plan, relayout=False)
            return run.fail(C.APPLY_FAILED, f"{type(exc).__name__}: {exc}", temporary=True)
        changed = result.changed
        run.cond(C.APPLIED, True, C.APPLY_SUCCEEDED,
                 f"plan {pid}: " + (f"{len(changed)} object(s) patched" if changed else "cluster already matched"))
    # 6. status -------------------------------------------------------------------------------------------------
    relayout = decision.relayout and spec.mode == "Apply" and any(
        adopted.get(k) and current.get(k) != (t.tp, t.pp) for k, t in gt.items())
    _record_plan(run, plan, relayout=relayout)
    run.st["lastPlanTime"] = iso(run.now)
    run.st["plannedGeneration"] = run.gen
    run.st["consecutiveFailures"] = 0
    run.st.pop("lastError", None)
    objective = plan.objective.total if plan.objective else float("nan")
    run.cond(C.READY, True, C.DRY_RUN if spec.mode == "DryRun" else C.RECONCILED,
             f"objective {objective:.6g}/s; {decision.reason}")
    if deps.metrics is not None:
        deps.metrics.planned(run.owner, plan, solve_s, relayout=relayout)
    written = run.finish()
    return Outcome(True, C.RECONCILED, decision.reason, None, changed, written, time.perf_counter() - run.t0)


def _record_plan(run: _Run, plan: Plan, *, relayout: bool) -> None:
    """Keep the plan as ``previous`` for the next solve and count a re-layout in the hourly budget."""
    run.st["lastGoodPlan"] = plan.model_copy(update={"diff": None}).model_dump_json()
    changes = recent_changes([float(t) for t in run.old.get("layoutChanges") or []], run.now)
    if relayout:
        changes.append(round(run.now, 3))
    run.st["layoutChanges"] = changes


def is_due(body: Mapping[str, Any], *, now: float, interval_s: float, last_attempt: float | None,
           retry_at: float | None) -> bool:
    """Timer gate: a new generation, the re-plan interval elapsed, or a scheduled retry reached."""
    status = body.get("status") or {}
    if status.get("observedGeneration") != body.get("metadata", {}).get("generation"):
        return True
    if retry_at is not None:
        return now >= retry_at
    last = last_attempt if last_attempt is not None else parse_iso(status.get("lastPlanTime"))
    return last is None or now - last >= interval_s


