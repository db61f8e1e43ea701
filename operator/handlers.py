"""kopf handlers: they only translate kopf's calls into :func:`reconcile.reconcile` and its outcome into kopf's
errors. One reconcile runs on create, update (spec) and resume, and a timer re-plans at each KVPlan's
``spec.replan.interval`` (rolling horizon). The timer ticks every :attr:`Config.tick_s` and reconciles only when
due (new generation, interval elapsed, or a scheduled retry), so each KVPlan keeps its own interval.
A per-object lock keeps the timer and a change handler from reconciling the same KVPlan at once, and at most
``--namespace-concurrency`` reconciles of one namespace run at once (:mod:`.fairness`: a reconcile never waits for
a slot). On kopf's cleanup (SIGTERM) every Prometheus request in flight is cut (:func:`.deadline.stop_all`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from . import conditions as C
from .knob_cache import KnobCache
from .kube import GROUP, PLURAL, VERSION, Kube, KubeError
from .record.metrics import Metrics
from .prom import UrlPolicy, default_prom_factory
from .reconcile import Deps, Outcome, reconcile
from .budget import bounded_planner
from .cycle import DEFAULT_CYCLE_DEADLINE_S
from .deadline import reset_stop, stop_all
from .fairness import DEFAULT_NAMESPACE_CONCURRENCY, Slots, workers
from .run import DEFAULT_RULE_WORK
from .spec.base import parse_duration
from .record.status import parse_iso


@dataclass(frozen=True)
class Config:
    """Operator settings (environment variables in brackets)."""

    #: Timer tick, seconds [KVPLAN_TIMER_TICK_S]. 10 s: fine enough for a 30 s minimum interval, cheap when idle.
    tick_s: float = float(os.environ.get("KVPLAN_TIMER_TICK_S", "10"))
    #: First retry delay after a failure, seconds [KVPLAN_BACKOFF_BASE_S]; doubles per failure up to 300 s.
    backoff_base_s: float = float(os.environ.get("KVPLAN_BACKOFF_BASE_S", "10"))
    #: Metrics port, 0 = off [KVPLAN_METRICS_PORT]. 8080 is the chart's metrics Service port.
    metrics_port: int = int(os.environ.get("KVPLAN_METRICS_PORT", "0"))
    #: Work budget of the engine-model rules per re-plan cycle, simulated requests [KVPLAN_RULE_WORK]
    #: (:mod:`.engine_rules`; default :data:`~.run.DEFAULT_RULE_WORK`).
    rule_work: int = int(os.environ.get("KVPLAN_RULE_WORK", str(DEFAULT_RULE_WORK)))
    #: Cycle deadline of one reconcile, seconds [KVPLAN_CYCLE_DEADLINE_S] (:mod:`.cycle`; 0 = none).
    cycle_deadline_s: float = float(os.environ.get("KVPLAN_CYCLE_DEADLINE_S", str(DEFAULT_CYCLE_DEADLINE_S)))
    #: Reconciles in flight per namespace [KVPLAN_NAMESPACE_CONCURRENCY] (:mod:`.fairness`).
    namespace_concurrency: int = int(os.environ.get("KVPLAN_NAMESPACE_CONCURRENCY",
                                                    str(DEFAULT_NAMESPACE_CONCURRENCY)))


CONFIG = Config()


@dataclass
class Runtime:
    """Operator-wide state kept in kopf's memo: the injected dependencies and per-KVPlan scheduling."""

    deps: Deps
    locks: dict[str, threading.Lock] = field(default_factory=dict)
    last_attempt: dict[str, float] = field(default_factory=dict)
    retry_at: dict[str, float] = field(default_factory=dict)
    guard: threading.Lock = field(default_factory=threading.Lock)
    #: Reconciles in flight per namespace and per KVPlan (:mod:`.fairness`): never waited for.
    slots: Slots = field(default_factory=Slots)

    def lock(self, uid: str) -> threading.Lock:
        with self.guard:
            return self.locks.setdefault(uid, threading.Lock())


def default_runtime(config: Config = CONFIG) -> Runtime:
    from kvcore import plan

    metrics = Metrics()
    if config.metrics_port:
        metrics.serve(config.metrics_port)
    deps = Deps(kube=Kube.from_environment(),
                prom_factory=default_prom_factory,
                planner=bounded_planner(plan), metrics=metrics, backoff_base_s=config.backoff_base_s, knob_cache=KnobCache(),
                rule_work=config.rule_work,
                prom_policy=UrlPolicy.from_environment(),
                cycle_deadline_s=config.cycle_deadline_s if config.cycle_deadline_s > 0 else None)
    return Runtime(deps, slots=Slots(max(1, config.namespace_concurrency)))


@kopf.on.login()
def login(**kwargs: Any) -> Any:
    """In-cluster service account, else ``$KUBECONFIG`` read at login time (kopf's client-library login uses the
    path the kubernetes package cached at import)."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # Events are written by the reconcile on condition transitions only; kopf's own log lines are not events.
    settings.posting.enabled = False
    reset_stop()  # an operator started again in the same process (kopf.testing) is not stopping
    if getattr(memo, "runtime", None) is None:
        memo.runtime = default_runtime()
    # Enough workers that namespaces at their --namespace-concurrency cannot take them all (:mod:`.fairness`).
    settings.execution.max_workers = workers(settings.execution.max_workers, memo.runtime.slots.limit,
                                             os.cpu_count() or 1)
    started = getattr(memo, "started", None)
    if started is not None:  # kvplan-operator takes SIGTERM itself from here on (:mod:`.shutdown`)
        started.set()


@kopf.on.cleanup()
def stop(**_: Any) -> None:
    """SIGTERM: cut every Prometheus request in flight and refuse new ones, so each worker thread finishes its
    reconcile (without applying) at once and the process exits promptly."""
    stop_all()


def _run(body: Any, memo: kopf.Memo, trigger: str, logger: logging.Logger | logging.LoggerAdapter[Any]
         ) -> Outcome | None:
    rt: Runtime = memo.runtime
    meta = body["metadata"]
    uid = meta["uid"]
    busy = rt.slots.enter(meta["namespace"], uid)
    if busy is not None:  # never wait for a slot: waiting holds a kopf worker
        logger.info("reconcile (%s) not started: %s: %s", trigger, C.NAMESPACE_BUSY, busy)
        if trigger == "timer":
            return None
        return Outcome(False, C.NAMESPACE_BUSY, busy, min(rt.deps.backoff_base_s, CONFIG.tick_s), [], False, 0.0)
    try:
        return _run_in_slot(rt, body, trigger, logger)
    finally:
        rt.slots.leave(meta["namespace"], uid)


def _run_in_slot(rt: Runtime, body: Any, trigger: str, logger: logging.Logger | logging.LoggerAdapter[Any]
                 ) -> Outcome | None:
    meta = body["metadata"]
    uid = meta["uid"]
    with rt.lock(uid):
        try:
            fresh = rt.deps.kube.get_kvplan(meta["namespace"], meta["name"])
        except KubeError as exc:  # the apiserver is unreachable: a one-line retry, never a traceback
            logger.warning("reconcile (%s): %s; retrying", trigger, exc)
            rt.retry_at[uid] = rt.deps.clock() + rt.deps.backoff_base_s
            return Outcome(False, C.READ_FAILED, str(exc), rt.deps.backoff_base_s)
        if fresh is None:
            return None
        now = rt.deps.clock()
        if trigger == "timer":
            try:
                interval = parse_duration(str((fresh.get("spec", {}).get("replan") or {}).get("interval", "5m")))
            except ValueError:
                interval = 300.0
            if not is_due(fresh, now=now, interval_s=interval, last_attempt=rt.last_attempt.get(uid),
                          retry_at=rt.retry_at.get(uid)):
                return None
        rt.last_attempt[uid] = now
        outcome = reconcile(fresh, rt.deps)
        if outcome.retry_after is not None:
            rt.retry_at[uid] = now + outcome.retry_after
        else:
            rt.retry_at.pop(uid, None)
        logger.info("reconcile (%s): %s %s; %s", trigger, outcome.reason, outcome.message,
                    "; ".join(outcome.changed) or "no writes")
        return outcome


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


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def on_change(body: kopf.Body, memo: Any, logger: logging.Logger | logging.LoggerAdapter[Any], reason: str,
              **_: Any) -> None:
    outcome = _run(body, memo, str(reason), logger)
    if outcome is not None and outcome.retry_after is not None:
        raise kopf.TemporaryError(f"{outcome.reason}: {outcome.message}", delay=outcome.retry_after)


@kopf.timer(GROUP, VERSION, PLURAL, interval=CONFIG.tick_s, initial_delay=CONFIG.tick_s)
def on_timer(body: kopf.Body, memo: Any, logger: logging.Logger | logging.LoggerAdapter[Any], **_: Any) -> None:
    _run(body, memo, "timer", logger)


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
def on_delete(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Forget per-object scheduling state. Owned objects stay (the state ConfigMap is garbage-collected)."""
    rt: Runtime | None = getattr(memo, "runtime", None)
    if rt is not None:
        uid = body["metadata"]["uid"]
        rt.last_attempt.pop(uid, None)
        rt.retry_at.pop(uid, None)
        with rt.guard:
            rt.locks.pop(uid, None)
        metrics = getattr(rt.deps, "metrics", None)
        if metrics is not None:  # a deleted KVPlan's series go with it
            metrics.forget(body["metadata"]["namespace"], body["metadata"]["name"])

