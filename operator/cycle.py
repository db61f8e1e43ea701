"""The reconcile's cycle deadline (issue 26): no reconcile outlives ``--cycle-deadline`` before it applies.

One reconcile may ask Prometheus once per history source, once for capacity and once per class with an
``arrivalRateQuery`` (up to 258 queries of up to 60 s each), then run the planner and the engine-model rules. The
cycle deadline (:attr:`~kvplan_operator.run.RunContext.deadline`, in the clock of ``Deps.clock``) bounds all of it:

- every Prometheus request ends by the deadline (:func:`bound` narrows the real client's per-request deadline to
  it, and refuses a query once it passed);
- it is checked again after observe and after decide (:func:`check`): a cycle past its deadline applies nothing;
- past the deadline the reconcile fails with ``CycleDeadlineExceeded`` (Degraded, the last good plan in force,
  retried with backoff), and while the operator stops (:func:`kvplan_operator.deadline.stopping`) with
  ``OperatorStopping``.

Apply and record are not cut once started (a half-applied plan would be worse than a late one); their Kubernetes
calls carry the client's own 15 s timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from . import conditions as C
from . import deadline
from .prom import PromApi, PromError
from .run import Failure, RunContext

#: Default cycle deadline, seconds (``KVPLAN_CYCLE_DEADLINE_S``): twice the longest ``timeoutSeconds`` the CRD
#: allows, and far above the 5-10 s a re-plan at 256 classes x 64 groups takes.
DEFAULT_CYCLE_DEADLINE_S = 120.0


def _message(run: RunContext, where: str) -> str:
    budget = f"{run.deadline_s:g} s" if run.deadline_s is not None else "its budget"
    return (f"the reconcile's cycle deadline ({budget}, --cycle-deadline) passed {where}; nothing of this cycle "
            "applied")


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
            setattr(inner, "cycle_deadline", time.monotonic() + (run.deadline - clock()))
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
