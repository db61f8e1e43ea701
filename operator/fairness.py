"""One tenant cannot starve another (issue 26): at most ``--namespace-concurrency`` reconciles of one namespace run
at once, and one KVPlan never runs twice at once; a reconcile that would exceed either does not wait for a slot
(waiting would hold one of kopf's worker threads, which is how six slow KVPlans in one namespace once held all of
them): the timer skips it until its next tick, a change handler retries it shortly (kopf ``TemporaryError``).

With the cycle deadline (:mod:`kvplan_operator.cycle`) a slow namespace therefore holds at most
``namespace_concurrency`` of kopf's workers, each for at most the cycle deadline; the operator sizes kopf's pool
above that (:func:`workers`), so the other namespaces always find a free worker.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

#: Default reconciles in flight per namespace (``KVPLAN_NAMESPACE_CONCURRENCY``).
DEFAULT_NAMESPACE_CONCURRENCY = 2


@dataclass
class Slots:
    """Reconciles in flight per namespace (at most ``limit``) and per KVPlan uid (at most one)."""

    limit: int = DEFAULT_NAMESPACE_CONCURRENCY
    in_flight: dict[str, int] = field(default_factory=dict)
    running: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def enter(self, namespace: str, uid: str) -> str | None:
        """Take a slot for ``uid`` in ``namespace`` (returns None), or say why not (nothing taken)."""
        with self._lock:
            if uid in self.running:
                return "a reconcile of this KVPlan is in flight"
            n = self.in_flight.get(namespace, 0)
            if n >= self.limit:
                return (f"{n} reconcile(s) of namespace {namespace} in flight (--namespace-concurrency "
                        f"{self.limit})")
            self.in_flight[namespace] = n + 1
            self.running.add(uid)
            return None

    def leave(self, namespace: str, uid: str) -> None:
        with self._lock:
            self.running.discard(uid)
            n = self.in_flight.get(namespace, 0) - 1
            if n > 0:
                self.in_flight[namespace] = n
            else:
                self.in_flight.pop(namespace, None)


def workers(kopf_default: int | None, limit: int, cpus: int) -> int:
    """kopf's worker pool: its default (``min(32, cpus + 4)``) but at least four namespaces' worth of slots, so
    that three slow namespaces at their limit still leave workers for every other one."""
    base = kopf_default if kopf_default else min(32, cpus + 4)
    return max(base, 4 * max(1, limit))
