"""Resolving the Prometheus host under the request's deadline, the cycle's deadline and the operator's stop.

``getaddrinfo`` holds its thread for as long as the DNS servers take (``resolv.conf``'s timeouts and attempts, per
server and per search domain), so a hung DNS server held a kopf worker past ``spec.prometheus.timeoutSeconds``, past
the reconcile's cycle deadline and past SIGTERM. No socket exists yet for a
:class:`~kvplan_operator.deadline.RequestGuard` to cut, and a thread cannot be killed. So :class:`BoundedResolver`
runs the lookup (any raw resolver: :func:`system_lookup`, or a test's) on a daemon thread and waits for it at most
until the first of:

- ``limit_s`` (``spec.prometheus.timeoutSeconds``) passes: ``PrometheusUnavailable``;
- the reconcile's cycle deadline (``--cycle-deadline``, in :func:`time.monotonic`) passes: ``CycleDeadlineExceeded``;
- the operator stops (:func:`kvplan_operator.deadline.stop_all`, which wakes the wait): ``OperatorStopping``.

Then it raises :class:`ResolveCut` (a :class:`~kvplan_operator.prom.error.PromError` with that reason and a fixed
message, never the resolver's own text) and leaves the thread to end on its own. Abandoned threads are bounded, per
``key`` (the KVPlan's namespace: a tenant whose name never resolves must not stop other tenants' lookups) and in
all: when :data:`MAX_ABANDONED_PER_KEY` of a key's, or :data:`MAX_ABANDONED` of all, are still running, the resolver
is stuck and a new lookup (of that key, or of any) fails at once (``PrometheusUnavailable``) without starting another
thread, until one returns. A caller past the check adds at most one more, so at most ``MAX_ABANDONED`` plus one per
concurrent reconcile (kopf's worker pool) lookup threads ever exist. An answer in time, or the raw resolver's own
error (``OSError``: the name does not resolve), comes back as the raw resolver gave it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence

from .. import conditions as C
from .. import deadline
from .error import PromError

#: A raw resolver: host name -> its addresses; raises ``OSError`` when the name does not resolve.
RawResolver = Callable[[str], Sequence[str]]
#: Most cut lookups of one key (namespace) still running before that key's lookups count as stuck: the
#: namespace's share of kopf's workers (``--namespace-concurrency``, default 2).
MAX_ABANDONED_PER_KEY = 2
#: Most cut lookups still running in all before every lookup counts as stuck: four namespaces' worth, as kopf's
#: worker pool is sized (:mod:`kvplan_operator.fairness`).
MAX_ABANDONED = 8
#: Why a lookup was refused without being started: :data:`MAX_ABANDONED` earlier ones have not returned.
STUCK = "stuck"

_LOCK = threading.Lock()
_ABANDONED: set[_Lookup] = set()


def system_lookup(host: str) -> list[str]:
    """Every address of ``host``, in the order ``getaddrinfo`` prefers (RFC 6724), each once. Unbounded: only the
    system resolver's own limits end it (wrap it in :class:`BoundedResolver`)."""
    return list(dict.fromkeys(str(info[4][0]) for info in socket.getaddrinfo(host, None)))


def abandoned(key: str | None = None) -> int:
    """How many cut lookups (of ``key``; None: of any) are still running."""
    with _LOCK:
        return sum(1 for lookup in _ABANDONED if key is None or lookup.key == key)


class ResolveCut(PromError):
    """A lookup cut (or refused) before it answered; ``why`` is :data:`kvplan_operator.deadline.REQUEST`,
    ``CYCLE``, ``STOPPING`` or :data:`STUCK`, ``reason`` the condition reason it maps to."""

    def __init__(self, why: str, reason: str, message: str) -> None:
        super().__init__(reason, message)
        self.why = why


class _Lookup:
    """One lookup on its own thread; ``wake`` is set when it returned or raised."""

    def __init__(self, raw: RawResolver, host: str, key: str, wake: threading.Event) -> None:
        self.raw, self.host, self.key, self.wake = raw, host, key, wake
        self.finished = False
        self.answer: Sequence[str] = ()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.answer = self.raw(self.host)
        except BaseException as exc:  # handed to the waiting caller, which raises it as the raw resolver did
            self.error = exc
        finally:
            with _LOCK:
                self.finished = True
                _ABANDONED.discard(self)
            self.wake.set()

    def abandon(self) -> bool:
        """Leave the lookup running and count it; False when it has finished meanwhile (its answer is there)."""
        with _LOCK:
            if self.finished:
                return False
            _ABANDONED.add(self)
            return True


class BoundedResolver:
    """``raw`` bounded by ``limit_s`` seconds per lookup, the monotonic ``cycle_deadline`` (whichever is first; its
    budget ``cycle_s`` seconds, for messages) and the operator's stop; its abandoned lookups count against ``key``
    (module docstring)."""

    def __init__(self, raw: RawResolver = system_lookup, *, limit_s: float, cycle_deadline: float | None = None,
                 cycle_s: float | None = None, key: str = "") -> None:
        self.raw = raw
        self.key = key
        self.limit_s = limit_s
        self.cycle_deadline = cycle_deadline
        self.cycle_s = cycle_s

    def __call__(self, host: str) -> Sequence[str]:
        now = time.monotonic()
        end, why = now + max(0.0, self.limit_s), deadline.REQUEST
        if self.cycle_deadline is not None and self.cycle_deadline <= end:
            end, why = self.cycle_deadline, deadline.CYCLE
        if deadline.stopping():
            raise self._cut(deadline.STOPPING)
        if end <= now:  # the cycle deadline already passed: ask nothing
            raise self._cut(why)
        with _LOCK:
            stuck_all = len(_ABANDONED)
            stuck_here = sum(1 for lookup in _ABANDONED if lookup.key == self.key)
        if stuck_here >= MAX_ABANDONED_PER_KEY:
            raise self._cut(STUCK, f"{stuck_here} earlier lookups of this namespace")
        if stuck_all >= MAX_ABANDONED:
            raise self._cut(STUCK, f"{stuck_all} earlier lookups")
        wake = threading.Event()
        lookup = _Lookup(self.raw, host, self.key, wake)
        with deadline.wake_on_stop(wake):
            threading.Thread(target=lookup.run, name="kvplan-resolve", daemon=True).start()
            wake.wait(end - now)
        if lookup.abandon():
            raise self._cut(deadline.STOPPING if deadline.stopping() else why)
        if lookup.error is not None:
            raise lookup.error
        return lookup.answer

    def _cut(self, why: str, stuck: str = "") -> ResolveCut:
        where = "resolving the host of spec.prometheus.url"
        if why == deadline.STOPPING:
            return ResolveCut(why, C.OPERATOR_STOPPING, f"the operator is stopping ({where}); nothing applied")
        if why == deadline.CYCLE:
            budget = f" ({self.cycle_s:g} s, --cycle-deadline)" if self.cycle_s is not None else ""
            return ResolveCut(why, C.CYCLE_DEADLINE_EXCEEDED, f"the reconcile's cycle deadline{budget} passed while "
                              f"{where}; no request sent, nothing of this cycle applied")
        if why == STUCK:
            return ResolveCut(why, C.PROMETHEUS_UNAVAILABLE, f"spec.prometheus.url: name resolution is stuck ({stuck}, "
                              "cut at their deadline, have not returned); no request sent")
        return ResolveCut(why, C.PROMETHEUS_UNAVAILABLE, "spec.prometheus.url: resolving its host took longer than "
                          f"spec.prometheus.timeoutSeconds ({self.limit_s:g} s); no request sent")
