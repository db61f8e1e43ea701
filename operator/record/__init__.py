"""Phase 5, record: status, conditions, events and metrics, from what the phases say happened.

- Success (every write done, or DryRun): the plan's detail ConfigMaps (:mod:`kvplan_operator.targets.plandetail`:
  per class decisions, every note, the whole diff, the kvcore plan the next re-plan starts from; built here by
  :meth:`Recorder.detail_writes`, written by apply, like every write to an object other than the KVPlan), then
  ``status.plan`` (with ``detail`` naming those ConfigMaps), ``objective``, ``diff``, ``lastPlanTime`` and
  ``plannedGeneration`` move to the new plan; Ready/Planned/Applied True, Degraded False. A failed detail write is
  the outcome (``StatusWriteFailed``) and status is not patched.
- Failure in any phase: ``status.plan`` and the detail ConfigMaps stay as they were (they name the last plan
  applied in full); ``lastError`` says which phase, the reason and message, and for a failed apply what was written before
  the failing write; ``consecutiveFailures`` counts up (the retry backoff doubles with it). Observation failures
  are Degraded (Ready stays True when a plan is in force); the others set Ready False.
- Before the first write of an apply (:meth:`Recorder.intent`): Applied=Unknown (``Applying``) and
  ``status.applying`` = {planId, writes, since}. So if the operator dies, or the final status write fails, status
  says a plan was being applied instead of still claiming the older one; the next reconcile converges.
- Always: ``observedGeneration``, ``lastAttemptTime``, ``layoutChanges`` (a mirror of the budget the state
  ConfigMap keeps). Status is patched only when something other than ``lastAttemptTime`` changed; an Event is
  posted only on a condition transition (best effort: a refused Event changes nothing).

The status write itself can fail; that is the one thing status cannot say, so it is the outcome's reason
(``StatusWriteFailed``, retried with backoff) and the log line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import conditions as C
from .. import cycle, deadline
from ..apply import Applied
from ..build import Built
from ..desired import Write
from ..decide import Decided, pending_note
from ..decide.knobs import engine_status, knob_condition
from ..kube import CYCLE_DEADLINE, KubeError
from ..observe import Observation
from ..run import OWNED_STATUS, Deps, Failure, RunContext
from ..targets.plandetail import FORMAT, chunk_name, detail_writes, digest, encode, plan_json, split
from .status import (calibration_body, calibration_detail, class_entries, diff_body, diff_full, iso, objective_body,
                     plan_body, status_patch, step_times_condition, workload_body)


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
    #: wall seconds per phase of the reconcile that ran (``observe``, ``prometheus``, ``decide``, ``planner``,
    #: ``build``, ``apply``, ``record``; only the phases reached).
    phases: Mapping[str, float] = field(default_factory=dict)


class Recorder:
    """The status of one reconcile as it is being decided, and the conditions to set."""

    def __init__(self, run: RunContext, deps: Deps, obs: Observation | None = None) -> None:
        self.run, self.deps = run, deps
        old = run.old_status
        self.st: dict[str, Any] = {k: old[k] for k in OWNED_STATUS if k in old}
        self.st["lastAttemptTime"] = iso(run.now)
        self.st["observedGeneration"] = run.generation
        self.conds: list[tuple[str, bool, str, str]] = []
        #: what :meth:`intent` wrote (the stored status now differs from ``run.old_status`` by these keys).
        self.written_intent: dict[str, Any] = {}
        #: ``status.plan.detail``: where the plan's detail was stored (set by :meth:`detail`).
        self.detail_ref: dict[str, Any] = {}
        if obs is not None:
            self.st["mode"] = obs.spec.mode
            self.st["summary"] = {**(old.get("summary") or {}), "groups": len(obs.spec.groups),
                                  "classes": len(obs.spec.classes)}
            self.cond(C.DEGRADED, False, C.HEALTHY, "Prometheus answered; every class has enough samples")

    def cond(self, type_: str, status: bool, reason: str, message: str) -> None:
        self.conds.append((type_, status, reason, message))

    def backoff(self) -> float:
        n = int(self.st.get("consecutiveFailures") or 0)
        return float(min(self.deps.backoff_max_s, self.deps.backoff_base_s * 2 ** max(n - 1, 0)))

    def layout_changes(self, changes: Any) -> None:
        self.st["layoutChanges"] = [round(c.t, 3) for c in changes if self.run.now - c.t < 3600.0]

    def failure(self, f: Failure, *, changed: list[str] | None = None) -> Outcome:
        """A failed attempt: the last good plan stays in status and in force."""
        self.st["consecutiveFailures"] = int(self.st.get("consecutiveFailures") or 0) + 1
        self.st["lastError"] = {"phase": f.phase, "reason": f.reason, "message": C.truncate(f.message),
                                "time": iso(self.run.now), **dict(f.details)}
        self.st.pop("applying", None)
        old = self.run.old_status
        ready = C.find(old.get("conditions") or [], C.READY)
        have_plan = bool((old.get("plan") or {}).get("id") or old.get("lastGoodPlan"))
        if f.degraded:
            self.cond(C.DEGRADED, True, f.reason, f.message + (" (serving the last good plan)" if have_plan else ""))
            self.cond(C.PLANNED, False, f.reason, f.message)
            if not (have_plan and ready is not None and ready.get("status") == "True"):
                self.cond(C.READY, False, f.reason, f.message)
        else:
            self.cond(C.READY, False, f.reason, f.message)
            if f.phase in ("observe", "decide"):
                self.cond(C.PLANNED, False, f.reason, f.message)
            if f.phase != "decide" or f.reason == C.INVALID_SPEC:
                self.cond(C.APPLIED, False, f.reason, f.message if f.phase == "apply" else "nothing applied: "
                          + f.message)
        if self.deps.metrics is not None:
            self.deps.metrics.failure(self.run.owner, f.reason)
        retry = self.backoff() if f.temporary else None
        if retry is not None and f.retry_after_s is not None:  # the server asked for longer: honour it, within the cap
            retry = max(retry, min(f.retry_after_s, float(self.deps.backoff_max_s)))
        written, err = self.finish()
        if err is not None:
            return Outcome(False, C.STATUS_WRITE_FAILED, f"{f.reason}: {f.message}; and {err}", self.backoff(),
                           changed or [], False, self.run.elapsed())
        return Outcome(False, f.reason, f.message, retry, changed or [], written, self.run.elapsed())

    def intent(self, built: Built) -> KubeError | None:
        """Say, before the first write, which plan is being applied (no events: the outcome posts them)."""
        applying = {"planId": built.desired.plan_id, "writes": len(built.writes), "since": iso(self.run.now)}
        conds = list(self.run.old_status.get("conditions") or [])
        conds, _ = C.set_condition(conds, C.APPLIED, "Unknown", C.APPLYING,
                                   f"applying plan {built.desired.plan_id}: {len(built.writes)} write(s)",
                                   generation=self.run.generation, now=iso(self.run.now))
        patch = status_patch(self.run.old_status, {**self.run.old_status, "applying": applying, "conditions": conds},
                             owned=OWNED_STATUS)
        try:
            if patch:
                self.deps.kube.patch_kvplan_status(self.run.namespace, self.run.name, patch)
        except KubeError as exc:
            return exc
        self.written_intent = {"applying": applying, "conditions": conds}
        return None

    def success(self, obs: Observation, dec: Decided, built: Built, applied: Applied,
                detail_error: KubeError | None = None) -> Outcome:
        """Record a plan that was applied in full (or DryRun); ``detail_error``: apply's write of the plan's detail
        (:meth:`detail_writes`) failed, so status must not refer to it."""
        plan, desired, spec = dec.plan, built.desired, obs.spec
        if applied.ok or "state-configmap" in applied.targets_written:  # mirror only what the cluster holds
            self.layout_changes(desired.layout_changes)
        self.cond(C.PLANNED, True, C.PLAN_SUCCEEDED, f"{plan.status.value}: {plan.reason}")
        if (steps := step_times_condition(spec.capacity.step_times.from_engine, obs.capacity)) is not None:
            self.cond(C.STEP_TIMES, *steps)
        if not applied.ok:
            assert applied.failed is not None and applied.error is not None
            if applied.relayout_attempted and self.deps.metrics is not None:
                self.deps.metrics.relayout(self.run.owner)
            wrote = "; ".join(applied.done) or "nothing"
            reason = C.CYCLE_DEADLINE_EXCEEDED if applied.error.kind == CYCLE_DEADLINE else C.APPLY_FAILED
            return self.failure(Failure("apply", reason, f"plan {desired.plan_id}: {applied.error}; "
                                        f"written before it: {wrote}", temporary=True,
                                        details={"planId": desired.plan_id, "applied": list(applied.done),
                                                 "failedAt": f"{applied.failed.kind}/{applied.failed.name}"}),
                                changed=list(applied.done))
        autos = {g.name: obs.groups[g.name].autoscaler for g in spec.groups}
        if detail_error is not None:
            return Outcome(False, C.STATUS_WRITE_FAILED, f"plan {desired.plan_id} applied; its detail not "
                           f"stored: {detail_error}", self.backoff(), [], False, self.run.elapsed())
        workloads = {g.name: workload_body(replica_reason=obs.groups[g.name].replica_reason,
                                           helm=obs.groups[g.name].helm_release, target=desired.groups.get(g.name))
                     for g in spec.groups}
        self.st["plan"] = plan_body(plan, targets=desired.groups, autoscalers=autos, decision=dec.decision.reason,
                                    notes=built.notes, capacity=obs.capacity, detail=chunk_name(self.run.name, 0),
                                    workloads=workloads)
        self.st["plan"]["id"] = desired.plan_id
        self.st["plan"]["detail"] = self.detail_ref
        self.engine(dec)
        self.st["objective"] = objective_body(plan)
        self.st["diff"] = diff_body(plan)
        if dec.calibration is not None:
            self.st["calibration"] = calibration_body(dec.calibration)
        self.st.pop("lastGoodPlan", None)  # an older operator's copy: the detail ConfigMaps hold it now
        self.st["summary"] = {**self.st.get("summary", {}), "refused": sum(1 for c in plan.classes if not c.admitted)}
        self.st["lastPlanTime"] = iso(self.run.now)
        self.st["plannedGeneration"] = self.run.generation
        self.st["consecutiveFailures"] = 0
        self.st.pop("lastError", None)
        self.st.pop("applying", None)
        if spec.mode == "DryRun":
            self.cond(C.APPLIED, False, C.DRY_RUN, "mode DryRun: plan written to status (and its "
                      "detail ConfigMaps) only")
        else:
            n = len(applied.done)
            self.cond(C.APPLIED, True, C.APPLY_SUCCEEDED, f"plan {desired.plan_id}: "
                      + (f"{n} write(s) in order" if n else "cluster already matched"))
        objective = plan.objective.total if plan.objective else float("nan")
        self.cond(C.READY, True, C.DRY_RUN if spec.mode == "DryRun" else C.RECONCILED,
                  f"objective {objective:.6g}/s; {dec.decision.reason}")
        if self.deps.metrics is not None:
            self.deps.metrics.planned(self.run.owner, plan, dec.solve_seconds, relayout=applied.relayout_attempted,
                                      now=self.run.now)
            self.deps.metrics.disruption(self.run.namespace, self.run.name, len(self.st["layoutChanges"]),
                                         spec.replan.max_layout_changes_per_hour)
            if dec.calibration is not None:
                self.deps.metrics.calibration(self.run.namespace, self.run.name, dec.calibration.verdicts)
        written, err = self.finish()
        if err is not None:
            return Outcome(False, C.STATUS_WRITE_FAILED, str(err), self.backoff(), list(applied.done), False,
                           self.run.elapsed())
        return Outcome(True, C.RECONCILED, dec.decision.reason, None, list(applied.done), written,
                       self.run.elapsed())

    def detail_writes(self, obs: Observation, dec: Decided, built: Built) -> list[Write]:
        """The writes that store the plan's detail (:mod:`kvplan_operator.targets.plandetail`), for apply to send
        before status refers to them (a failed one is the outcome, ``StatusWriteFailed``, status left as it was:
        it says which plan was being applied). Pure but for remembering the reference status will carry."""
        plan, desired = dec.plan, built.desired
        stored = plan.model_copy(update={"solve_seconds": 0.0})  # the time is in status; the document stays put
        classes = class_entries(plan, observed=obs.classes, applied=desired.classes)
        for c, p in desired.class_priority.items():  # the engine knobs per class (vLLM --scheduling-policy)
            if c in classes:
                classes[c]["priority"] = p
        doc = {"format": FORMAT, "kvplan": self.run.owner, "plan": desired.plan_id, "classes": classes,
               "notes": list(built.notes), "diff": diff_full(plan), "lastGoodPlan": plan_json(stored)}
        if dec.calibration is not None:
            doc["calibration"] = calibration_detail(dec.calibration)
        if dec.gate.groups:  # per plugin group and class, what its reservation file gates admission with, and why
            doc["gates"] = {g: gate.detail() for g, gate in dec.gate.groups.items()}
        writes = detail_writes(kvplan=self.run.name, namespace=self.run.namespace, owner=self.run.owner,
                               owner_ref=self.run.owner_reference, plan_id=desired.plan_id, doc=doc,
                               observed=obs.detail)
        text = encode(doc)
        chunks = len(split(text))
        self.detail_ref = {"configMaps": [chunk_name(self.run.name, i) for i in range(chunks)], "format": FORMAT,
                           "bytes": len(text), "digest": digest(text)[:16]}
        return list(writes)

    def engine(self, dec: Decided) -> None:
        """The engine knobs and the plugin's reservations: ``status.plan.groups.<g>.engine``, ``groups.<g>.gate``
        (the rule's reason and counts; per class, what the group's reservation file gates admission with against
        the plan's y goes to the plan's detail, ``gates.<g>``, with each class's ``priority``: :meth:`detail`),
        ``plan.rules`` (the engine-model rules' work this cycle, what ran and what is pending), and the EngineKnobs
        condition."""
        for g, k in dec.knobs.groups.items():
            if g in self.st["plan"]["groups"]:
                self.st["plan"]["groups"][g]["engine"] = engine_status(k)
        for g, gate in dec.gate.groups.items():
            if g in self.st["plan"]["groups"]:
                self.st["plan"]["groups"][g]["gate"] = gate.status()
        if dec.rules.ran or any(dec.rules.pending.values()):
            self.st["plan"]["rules"] = dec.rules.summary()
        if dec.knobs.groups:
            self.cond(C.ENGINE_KNOBS, *knob_condition(dec.knobs, reserve_failed=dec.gate.failed,
                                                      pending=dec.rules.pending, pending_note=pending_note(dec.rules)))

    def finish(self) -> tuple[bool, KubeError | None]:
        """Set conditions, write the status patch if anything changed, post events for transitions."""
        run = self.run
        stored = {**run.old_status, **self.written_intent}
        before = list(run.old_status.get("conditions") or [])
        conds = list(stored.get("conditions") or [])
        for type_, status, reason, message in self.conds:
            conds, _ = C.set_condition(conds, type_, status, reason, message, generation=run.generation,
                                       now=iso(run.now))
        self.st["conditions"] = conds
        if self.deps.metrics is not None:
            self.deps.metrics.conditions(run.namespace, run.name, {c["type"]: c["status"] == "True" for c in conds})
        # lastAttemptTime alone does not justify a write (it would make every timer tick a status write).
        probe = dict(self.st)
        probe["lastAttemptTime"] = stored.get("lastAttemptTime")
        if status_patch(stored, probe, owned=OWNED_STATUS) is None:
            return False, None
        patch = status_patch(stored, self.st, owned=OWNED_STATUS)
        with deadline.calls_until(cycle.record_end(run, self.deps.clock)):  # the cycle's reserve for this write
            if patch:
                try:
                    self.deps.kube.patch_kvplan_status(run.namespace, run.name, patch)
                except KubeError as exc:
                    return False, exc
            post_events(self.deps, run.body, before, conds)
        return True, None


def post_events(deps: Deps, body: Mapping[str, Any], before: list[Any], after: list[Any]) -> None:
    """One Event per condition that changed status or reason (Warning when it went bad)."""
    for type_ in C.TYPES:
        if C.transitioned(before, after, type_):
            c = C.find(after, type_)
            if c is None:
                continue
            bad = ((type_ == C.DEGRADED) == (c["status"] == "True") and c["reason"] != C.DRY_RUN
                   and type_ not in C.INFORMATIONAL)
            try:
                deps.kube.post_event(body, type_="Warning" if bad else "Normal", reason=c["reason"],
                                     message=f"{type_}={c['status']}: {c['message']}")
            except Exception:  # an event is best effort; the condition is the record
                pass
