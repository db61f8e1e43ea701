"""The reconcile's cycle deadline (issue 26): no reconcile outlives ``--cycle-deadline``.

One reconcile may ask Prometheus once per history source, once for capacity and once per class with an
``arrivalRateQuery`` (up to 258 queries of up to 60 s each), run the planner and the engine-model rules, and then
write. The deadline has two ends, in the clock of ``Deps.clock``:

- the work's end (:attr:`~kvplan_operator.run.RunContext.deadline`): :func:`record_reserve_s` before the cycle
  deadline. Every read, query, solve and write but record's ends by it:
  - every Prometheus request ends by it (:func:`bound` narrows the real client's per-request deadline to it, and
    refuses a query once it passed), and so does the lookup of the Prometheus host;
  - it is checked after observe and after decide (:func:`check`): a cycle past it applies nothing;
  - apply asks before each write (:func:`late_write`): a write not started in time is not sent, and the cycle
    stops there exactly as at a failed write. Every write is idempotent and the stage order keeps routing off the
    groups still changing, so the next reconcile finishes what this one started;
  - the real Kubernetes client's timeout is cut to the time left, and no call is sent once it passed
    (:func:`writes_end`, :func:`kvplan_operator.deadline.calls_until`);
- the cycle deadline itself (``RunContext.record_deadline``, :func:`record_end`) ends the record phase's status
  write, so a cycle cut for its deadline still has the time to say so.

Past the work's end the reconcile fails with ``CycleDeadlineExceeded`` (Degraded, the last good plan in force,
retried with backoff), and while the operator stops (:func:`kvplan_operator.deadline.stopping`) with
``OperatorStopping``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from . import conditions as C
from . import deadline
from .desired import Write
from .kube import CYCLE_DEADLINE, KubeError
from .prom import PromApi, PromError
from .run import Failure, RunContext

#: Default cycle deadline, seconds (``KVPLAN_CYCLE_DEADLINE_S``): twice the longest ``timeoutSeconds`` the CRD
#: allows, and far above the 5-10 s a re-plan at 256 classes x 64 groups takes.
DEFAULT_CYCLE_DEADLINE_S = 120.0
#: Most seconds kept for the record phase's status write at the end of a cycle (a quarter of a shorter deadline):
#: one Kubernetes call's client timeout (:data:`kvplan_operator.kube.REQUEST_TIMEOUT_S`).
RECORD_RESERVE_S = 15.0


def record_reserve_s(deadline_s: float | None) -> float:
    """Seconds of a cycle of ``deadline_s`` kept for the record phase (0 without a deadline): the work's end
    (:attr:`~kvplan_operator.run.RunContext.deadline`) is that much before the cycle deadline."""
    return 0.0 if deadline_s is None else min(RECORD_RESERVE_S, deadline_s / 4)


def _monotonic(end: float | None, clock: Callable[[], float]) -> float | None:
    return None if end is None else time.monotonic() + (end - clock())


def writes_end(run: RunContext, clock: Callable[[], float]) -> float | None:
    """Monotonic time by which the cycle's work (its queries, the host lookup, its Kubernetes calls before record)
    must end (None: no deadline)."""
    return _monotonic(run.deadline, clock)


def record_end(run: RunContext, clock: Callable[[], float]) -> float | None:
    """Monotonic time by which the record phase's status write must end: the cycle deadline (None: none)."""
    return _monotonic(run.record_deadline, clock)


def late_write(run: RunContext, clock: Callable[[], float]) -> Callable[[Write], KubeError | None]:
    """For apply: before each write, the error that stops the cycle there when the writes' end passed, else None."""
    def late(w: Write) -> KubeError | None:
        if run.deadline is None or clock() < run.deadline:
            return None
        return KubeError(f"{w.verb} {w.kind}/{w.name}", CYCLE_DEADLINE,
                         detail=f"not sent: the reconcile's cycle deadline ({run.deadline_s:g} s, --cycle-deadline) "
                                f"keeps its last {record_reserve_s(run.deadline_s):g} s for the status write")
    return late


def _message(run: RunContext, where: str) -> str:
    if run.deadline_s is None:
        return f"the reconcile's cycle deadline passed {where}; nothing of this cycle applied"
    return (f"the reconcile's cycle deadline ({run.deadline_s:g} s, --cycle-deadline) passed {where} (its last "
            f"{record_reserve_s(run.deadline_s):g} s are kept for the status write); nothing of this cycle applied")


def check(run: RunContext, clock: Callable[[], float], *, phase: str, where: str) -> Failure | None:
    """A Failure when the operator is stopping or the cycle deadline passed, else None."""
    if deadline.stopping():
        return Failure(phase, C.OPERATOR_STOPPING, f"the operator is stopping ({where}); nothing applied",
                       temporary=True)
    if run.deadline is not None and clock() >= run.deadline:
        return Failure(phase, C.CYCLE_DEADLINE_EXCEEDED, _message(run, where), temporary=True, degraded=True)
    return None


class BoundedProm:
    """A :class:`~kvplan_operator.prom.PromApi` that refuses queries once the cycle deadline passed (or the operator
    is stopping) and hands the deadline to the real client, whose requests it then cuts."""

    def __init__(self, inner: PromApi, run: RunContext, clock: Callable[[], float]) -> None:
        self.inner, self.run, self.clock = inner, run, clock
        if run.deadline is not None and hasattr(inner, "cycle_deadline"):  # the real client: it cuts requests
            setattr(inner, "cycle_deadline", writes_end(run, clock))
            setattr(inner, "cycle_s", run.deadline_s)

    def __getattr__(self, name: str) -> Any:  # requests_sent and the like
        return getattr(self.inner, name)

    def _check(self, what: str) -> None:
        failure = check(self.run, self.clock, phase="observe", where=f"before the {what}")
        if failure is not None:
            raise PromError(failure.reason, failure.message)

    def query(self, promql: str, *, at: float | None = None) -> Mapping[str, Any]:
        self._check("instant query")
        return self.inner.query(promql, at=at)

    def query_range(self, promql: str, *, start: float, end: float, step: float) -> Mapping[str, Any]:
        self._check("range query")
        return self.inner.query_range(promql, start=start, end=end, step=step)


def bound(prom: PromApi, run: RunContext, clock: Callable[[], float]) -> PromApi:
    """``prom`` bounded by ``run``'s cycle deadline (unchanged when it has none and the operator is not stopping)."""
    return BoundedProm(prom, run, clock)
