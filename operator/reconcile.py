"""One idempotent reconcile of one KVPlan: five phases, top to bottom, each in its own module.

1. :mod:`observe <kvplan_operator.observe>`: every read (spec, Secret, Deployments, autoscalers, router objects,
   Prometheus);
2. :mod:`decide <kvplan_operator.decide>` (pure): the kvcore plan, hold vs free, the disruption budget;
3. :mod:`build <kvplan_operator.build>` (pure): one desired state, and each target's writes for it;
4. :mod:`apply <kvplan_operator.apply>`: the writes in order, stopping at the first failure (status says which
   plan is being applied before the first write);
5. :mod:`record <kvplan_operator.record>`: status, conditions, events and metrics from what apply did.

While observe waits only for the history of classes labelled by kvplan's classification file
(:class:`~kvplan_operator.observe.HistoryAwaited`), the same phases run for the file alone
(:func:`_bootstrap`: :mod:`decide.bootstrap <kvplan_operator.decide.bootstrap>`, :mod:`kvplan_operator.build_bootstrap`,
apply, :mod:`kvplan_operator.record.bootstrap`), so that history can start; the reconcile stays that failure.

A phase that cannot go on returns a :class:`~kvplan_operator.run.Failure` with a condition reason, and record
writes it; nothing raises out of :func:`reconcile` (an unexpected exception, a bug, is recorded as
``InternalError`` with its type), so kopf never sees a traceback. Level-based: everything is recomputed from the
CR, Prometheus and the cluster each time.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from . import conditions as C
from . import cycle, deadline
from .apply import apply, apply_detail
from .build import build
from .build_bootstrap import build_bootstrap
from .decide import decide
from .decide.bootstrap import decide_bootstrap
from .observe import HistoryAwaited, observe
from .record import Outcome, Recorder
from .record.bootstrap import record_bootstrap
from .run import Deps, Failure, RunContext

__all__ = ["Deps", "Outcome", "reconcile"]


class _Clock:
    """Wall seconds per phase (``Outcome.phases``): observe (of which ``prometheus``: the queries and their
    checks), decide (of which ``planner``: kvcore's own solve time), build, apply (with the intent status write and the plan's
    detail), record (the status patch)."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self.t = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.phases[name] = self.phases.get(name, 0.0) + now - self.t
        self.t = now


def _stopped(run: RunContext, f: Failure) -> Outcome:
    """The operator is stopping: no status write on the way out (the next operator re-plans)."""
    return Outcome(False, f.reason, f.message, None, [], False, run.elapsed())


def _bootstrap(run: RunContext, deps: Deps, awaited: HistoryAwaited, clock: _Clock) -> Outcome | None:
    """The classification file's bootstrap (module docstring); None when it does not apply."""
    boot = decide_bootstrap(run, awaited)
    clock.lap("decide")
    if boot is None or awaited.observation is None:
        return None
    rec = Recorder(run, deps, awaited.observation)
    built = build_bootstrap(run, awaited.observation, boot)
    clock.lap("build")
    if isinstance(built, Failure):
        return record_bootstrap(rec, awaited, boot, built, None)
    late = cycle.check(run, deps.clock, phase="build", where="before the classification file's writes")
    if late is not None:
        return _stopped(run, late) if late.reason == C.OPERATOR_STOPPING else rec.failure(late)
    if built.writes:
        refused = rec.intent(built)
        if refused is not None:
            return Outcome(False, C.STATUS_WRITE_FAILED, f"{refused}; nothing applied", rec.backoff(), [], False,
                           run.elapsed())
    applied = apply(deps.kube, run.namespace, built.writes, built.targets, late=cycle.late_write(run, deps.clock))
    clock.lap("apply")
    return record_bootstrap(rec, awaited, boot, None, applied)


def _reconcile(run: RunContext, deps: Deps, clock: _Clock) -> Outcome:
    obs = observe(run, deps)
    clock.lap("observe")
    if isinstance(obs, HistoryAwaited):
        booted = _bootstrap(run, deps, obs, clock)
        if booted is not None:
            return booted
    if isinstance(obs, Failure):
        return _stopped(run, obs) if obs.reason == C.OPERATOR_STOPPING else Recorder(run, deps).failure(obs)
    late = cycle.check(run, deps.clock, phase="observe", where="after observe")
    if late is not None:
        return _stopped(run, late) if late.reason == C.OPERATOR_STOPPING else Recorder(run, deps).failure(late)
    clock.phases["prometheus"] = obs.query_seconds
    rec = Recorder(run, deps, obs)
    dec = decide(run, obs, deps)
    clock.lap("decide")
    if isinstance(dec, Failure):
        return rec.failure(dec)
    late = cycle.check(run, deps.clock, phase="decide", where="after decide, before any write")
    if late is not None:
        return _stopped(run, late) if late.reason == C.OPERATOR_STOPPING else rec.failure(late)
    clock.phases["planner"] = dec.solve_seconds
    built = build(run, obs, dec)
    clock.lap("build")
    if isinstance(built, Failure):
        rec.cond(C.PLANNED, True, C.PLAN_SUCCEEDED, f"{dec.plan.status.value}: {dec.plan.reason}")
        return rec.failure(built)
    if built.writes:
        refused = rec.intent(built)
        if refused is not None:
            return Outcome(False, C.STATUS_WRITE_FAILED, f"{refused}; nothing applied", rec.backoff(), [], False,
                           run.elapsed())
    too_late = cycle.late_write(run, deps.clock)
    applied = apply(deps.kube, run.namespace, built.writes, built.targets, late=too_late)
    detail_error = apply_detail(deps.kube, run.namespace, rec.detail_writes(obs, dec, built),
                                late=too_late) if applied.ok else None
    clock.lap("apply")
    return rec.success(obs, dec, built, applied, detail_error)


def reconcile(body: Mapping[str, Any], deps: Deps) -> Outcome:
    """Run the five phases once for ``body`` (a KVPlan as the apiserver returned it). Never raises ``Exception``."""
    run = RunContext.start(body, deps.clock(), deps.cycle_deadline_s,
                           record_reserve_s=cycle.record_reserve_s(deps.cycle_deadline_s))
    clock = _Clock()
    try:
        with deadline.calls_until(cycle.writes_end(run, deps.clock)):  # record widens it to the whole cycle
            out = _reconcile(run, deps, clock)
        clock.lap("record")
        return replace(out, phases=dict(clock.phases))
    except Exception as exc:  # a bug: record it as a condition rather than hand kopf a traceback
        failure = Failure("reconcile", C.INTERNAL_ERROR, f"{type(exc).__name__} in the operator; nothing more "
                          "applied", temporary=True)
        try:
            return Recorder(run, deps).failure(failure)
        except Exception:
            return Outcome(False, C.INTERNAL_ERROR, failure.message, deps.backoff_base_s, [], False, run.elapsed())
