"""The run context every phase may read, the injected dependencies, and the one failure type a phase returns.

Bottom of the operator, with :mod:`kvplan_operator.desired`: it imports no phase.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kvcore import Plan

from .knob_cache import KnobCache
from .kube import GROUP, VERSION, KubeApi
from .prom import PromApi, PromConnection, UrlPolicy

#: Work budget of kvcore's engine-model rules per re-plan cycle, simulated requests (:mod:`.decide.rules`): sized
#: so that the cycle at the CRD's caps (256 classes x 64 groups) stays within its 10 s target at the measured cost
#: per simulated request (docs/benchmarks.md, "The engine-model rules"). A group under no memory pressure costs
#: both rules stock vLLM's two replays (4,000 requests, shared); one under pressure about ten times that.
DEFAULT_RULE_WORK = 100_000

#: Top-level status keys the operator owns (kopf keeps its own, e.g. ``status.kopf``).
OWNED_STATUS = ("observedGeneration", "plannedGeneration", "lastPlanTime", "lastAttemptTime", "mode", "conditions",
                "plan", "objective", "diff", "summary", "layoutChanges", "lastGoodPlan", "consecutiveFailures",
                "lastError", "applying", "calibration")


@dataclass(frozen=True)
class Deps:
    """Everything with a side effect, injected. ``kube`` is :class:`kvplan_operator.kube.Kube` or a fake."""

    kube: KubeApi
    #: A Prometheus client for a connection (:func:`kvplan_operator.prom.default_prom_factory`).
    prom_factory: Callable[[PromConnection], PromApi]
    planner: Callable[..., Plan]
    metrics: Any = None
    clock: Callable[[], float] = time.time
    #: First retry delay after a failure, seconds; doubles per consecutive failure. 10 s: Prometheus restarts fast.
    backoff_base_s: float = 10.0
    #: Longest retry delay, seconds: 5 min matches the default re-plan interval.
    backoff_max_s: float = 300.0
    #: Where Prometheus requests (and their bearer tokens) may go; see :mod:`kvplan_operator.prom`.
    prom_policy: UrlPolicy = field(default_factory=UrlPolicy)
    #: Host resolver for the URL policy (injected so tests can point a name at a link-local address).
    resolve: Callable[[str], Any] | None = None
    #: The engine-knob rule, ``knobs_for_plan(plan, instance, *, engine_version, current)``; None: kvcore's
    #: (:func:`kvcore.rules.knobs.knobs_for_plan`).
    knobs: Callable[..., Mapping[str, Any]] | None = None
    #: The reservation rule, ``reserves_for_plan(plan, instance, *, groups, bases, priorities, store, work_limit)``;
    #: None: kvcore's (:func:`kvcore.rules.reserve.reserves_for_plan`).
    reserves: Callable[..., Mapping[str, Any]] | None = None
    #: Where the engine-model rules' answers are reused between re-plans (:mod:`kvplan_operator.knob_cache`); None:
    #: the rules run every reconcile (tests). The operator's runtime keeps one.
    knob_cache: KnobCache | None = None
    #: Work budget of the engine-model rules per re-plan cycle, simulated requests (:mod:`.engine_rules`).
    rule_work: int = DEFAULT_RULE_WORK
    #: The reconcile's cycle deadline, seconds (:mod:`kvplan_operator.cycle`); None: none (the operator's runtime
    #: sets ``--cycle-deadline``).
    cycle_deadline_s: float | None = None


@dataclass(frozen=True)
class Failure:
    """Why a phase stopped: a condition ``reason`` (conditions.REASONS), a one-line message, whether to retry
    with backoff (``temporary``) and whether the last good plan stays in force as Degraded (``degraded``)."""

    phase: str
    reason: str
    message: str
    temporary: bool
    degraded: bool = False
    #: Extra keys for ``status.lastError`` (e.g. the planner's raw status).
    details: Mapping[str, Any] = field(default_factory=dict)
    #: How long the failing server asked to wait (Prometheus' ``Retry-After``); the retry waits at least this long,
    #: within the backoff's cap.
    retry_after_s: float | None = None


@dataclass(frozen=True)
class RunContext:
    """One reconcile of one KVPlan: who it is, when, and the status it starts from."""

    body: Mapping[str, Any]
    namespace: str
    name: str
    uid: str | None
    generation: int | None
    now: float
    old_status: Mapping[str, Any]
    started: float
    #: When the cycle's work must be done (every read, the planner, every write but record's), in the clock ``now``
    #: came from (None: no deadline); when record's status write must be done (the cycle deadline itself: the
    #: work's end plus the reserve kept for that write); and the cycle's budget in seconds
    #: (:mod:`kvplan_operator.cycle`).
    deadline: float | None = None
    deadline_s: float | None = None
    record_deadline: float | None = None

    @classmethod
    def start(cls, body: Mapping[str, Any], now: float, deadline_s: float | None = None, *,
              record_reserve_s: float = 0.0) -> RunContext:
        meta = body["metadata"]
        return cls(body=body, namespace=meta["namespace"], name=meta["name"], uid=meta.get("uid"),
                   generation=meta.get("generation"), now=now, old_status=dict(body.get("status") or {}),
                   started=time.perf_counter(),
                   deadline=None if deadline_s is None else now + deadline_s - record_reserve_s,
                   deadline_s=deadline_s, record_deadline=None if deadline_s is None else now + deadline_s)

    @property
    def owner(self) -> str:
        """``<namespace>/<name>``: the value of ``kvplan.io/owner`` on every object this KVPlan writes."""
        return f"{self.namespace}/{self.name}"

    @property
    def state_configmap(self) -> str:
        """The per-KVPlan state ConfigMap (reservations and the disruption budget)."""
        return f"{self.name}-kvplan"

    @property
    def owner_reference(self) -> dict[str, Any]:
        return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "KVPlan", "name": self.name, "uid": self.uid,
                "controller": True, "blockOwnerDeletion": False}

    def previous_plan(self) -> Plan | None:
        """The last plan applied in full (``status.lastGoodPlan``), or None."""
        raw = self.old_status.get("lastGoodPlan")
        if not raw:
            return None
        try:
            return Plan.model_validate_json(raw)
        except ValueError:
            return None

    def elapsed(self) -> float:
        return time.perf_counter() - self.started
