"""Deadlines for the operator's outgoing requests, and the operator-wide stop.

A socket timeout bounds one read, not a request: a server that sends one byte inside each read timeout keeps a
request alive for ever (issue 26). A :class:`RequestGuard` bounds the whole request instead: a timer shuts the
request's socket down at its deadline, which wakes any read blocked on it (connect, TLS handshake, status line,
headers, body), and the caller then reports why (:attr:`RequestGuard.fired`):

- ``request``: the request's own limit (``spec.prometheus.timeoutSeconds``) passed;
- ``cycle``: the reconcile's cycle deadline (``--cycle-deadline``) came first;
- ``stopping``: the operator is shutting down (:func:`stop_all`, from kopf's cleanup on SIGTERM).

The socket is registered by the connection that creates it (:mod:`kvplan_operator.prom.transport`) with the guard
active on that thread. Name resolution happens before a socket exists, so the guard cannot cut it; it has the same
three bounds another way (:mod:`kvplan_operator.prom.resolve`): the lookup runs on a daemon thread that the observe
phase waits for at most ``spec.prometheus.timeoutSeconds``, never past the cycle deadline, and no longer once the
operator stops (:func:`wake_on_stop` ends that wait at once).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType

#: Why a guard fired.
REQUEST, CYCLE, STOPPING = "request", "cycle", "stopping"

_STOP = threading.Event()
_ACTIVE: set[RequestGuard] = set()
_ACTIVE_LOCK = threading.Lock()
_WAKE: set[threading.Event] = set()
_LOCAL = threading.local()


def stopping() -> bool:
    """True once :func:`stop_all` ran: every request in flight was cut and new ones fail at once."""
    return _STOP.is_set()


def stop_all() -> int:
    """The operator is stopping: cut every request in flight now, and every later one at its start. Returns how
    many were in flight."""
    _STOP.set()
    with _ACTIVE_LOCK:
        active = list(_ACTIVE)
        wake = list(_WAKE)
    for guard in active:
        guard.fire(STOPPING)
    for event in wake:
        event.set()
    return len(active)


def reset_stop() -> None:
    """Undo :func:`stop_all`: an operator started again in the same process (kopf's test runner, tests)."""
    _STOP.clear()


@contextmanager
def wake_on_stop(event: threading.Event) -> Iterator[None]:
    """While the block runs, :func:`stop_all` sets ``event`` (at once if it already ran): a wait on ``event`` that
    is not a request (a name lookup, :mod:`kvplan_operator.prom.resolve`) ends when the operator stops."""
    with _ACTIVE_LOCK:
        _WAKE.add(event)
    try:
        if _STOP.is_set():  # after the add: a stop_all racing with it either is seen here or sees the event
            event.set()
        yield
    finally:
        with _ACTIVE_LOCK:
            _WAKE.discard(event)


@contextmanager
def calls_until(end: float | None) -> Iterator[None]:
    """Kubernetes calls made on this thread inside the block end by the monotonic ``end`` (None: only their own
    timeout bounds them): :class:`kvplan_operator.kube.Kube` sends none once ``end`` passed and gives each the
    time left as its timeout. Blocks nest; the inner ``end`` applies inside it (the record phase's later end)."""
    outer = getattr(_LOCAL, "calls_end", None)
    _LOCAL.calls_end = end
    try:
        yield
    finally:
        _LOCAL.calls_end = outer


#: The clock of :func:`calls_until`'s ends (:func:`time.monotonic`; tests put a scripted one here).
calls_clock: Callable[[], float] = time.monotonic


def calls_left() -> float | None:
    """Seconds left for Kubernetes calls on this thread (:func:`calls_until`), None when unbounded."""
    end: float | None = getattr(_LOCAL, "calls_end", None)
    return None if end is None else end - calls_clock()


def current() -> RequestGuard | None:
    """The guard of the request running on this thread, if any."""
    guard: RequestGuard | None = getattr(_LOCAL, "guard", None)
    return guard


class RequestGuard:
    """Bounds one request to ``limit_s`` seconds and to the monotonic ``cycle_deadline`` (whichever is first).

    Use as a context manager around the request (connect included); sockets opened on this thread meanwhile are
    shut down when the deadline passes. ``clock`` is :func:`time.monotonic` (injectable for tests)."""

    def __init__(self, limit_s: float, cycle_deadline: float | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        now = clock()
        self.deadline = now + max(0.0, limit_s)
        self.cause = REQUEST
        if cycle_deadline is not None and cycle_deadline <= self.deadline:
            self.deadline, self.cause = cycle_deadline, CYCLE
        self.fired: str | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def remaining(self) -> float:
        """Seconds left (0 when the deadline passed or the guard fired)."""
        if self.fired is not None:
            return 0.0
        return max(0.0, self.deadline - self.clock())

    def attach(self, sock: socket.socket) -> None:
        """Shut ``sock`` down when the guard fires (at once if it already did)."""
        with self._lock:
            self._sockets.append(sock)
            fired = self.fired is not None
        if fired:
            _shutdown(sock)

    def fire(self, why: str) -> None:
        """Cut the request: every attached socket is shut down (idempotent; the first cause is kept)."""
        with self._lock:
            if self.fired is not None:
                return
            self.fired = why
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)

    def check(self) -> None:
        """Fire now if the deadline passed (between reads of a body that arrives fast but endlessly)."""
        if self.fired is None and self.clock() >= self.deadline:
            self.fire(self.cause)

    def __enter__(self) -> RequestGuard:
        _LOCAL.guard = self
        with _ACTIVE_LOCK:
            _ACTIVE.add(self)
        if _STOP.is_set():
            self.fire(STOPPING)
        else:
            left = self.deadline - self.clock()
            if left <= 0:
                self.fire(self.cause)
            else:
                self._timer = threading.Timer(left, self.fire, (self.cause,))
                self._timer.daemon = True
                self._timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with _ACTIVE_LOCK:
            _ACTIVE.discard(self)
        _LOCAL.guard = None


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
