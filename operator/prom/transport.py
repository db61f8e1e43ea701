"""The Prometheus client's transport: urllib3 connections whose sockets a :class:`~kvplan_operator.deadline.
RequestGuard` can cut, and what a cut request is reported as.

:func:`pool_manager` is a ``urllib3.PoolManager`` whose HTTP and HTTPS connections register their socket with the
guard active on the calling thread when they open it, and again each time a kept-alive connection is reused. So a
guard's deadline bounds the whole request: TCP connect, TLS handshake, status line, headers and body, however the
server paces its bytes. :func:`cut_error` names the cut: ``PrometheusUnavailable`` (the request's own
``timeoutSeconds``), ``CycleDeadlineExceeded`` (the reconcile's cycle deadline) or ``OperatorStopping``.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from .. import conditions as C
from .. import deadline
from .error import PromError, PrometheusUnavailable


def _attach(sock: socket.socket | None) -> None:
    guard = deadline.current()
    if guard is not None and sock is not None:
        guard.attach(sock)


class _GuardedHTTPConnection(HTTPConnection):
    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        _attach(sock)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:  # a kept-alive connection: its socket exists already
        _attach(self.sock)
        super().request(*args, **kwargs)


class _GuardedHTTPSConnection(HTTPSConnection):
    def _new_conn(self) -> socket.socket:  # before the TLS handshake: a slow handshake is cut too
        sock = super()._new_conn()
        _attach(sock)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        _attach(self.sock)
        super().request(*args, **kwargs)


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _GuardedHTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _GuardedHTTPSConnection


def pool_manager(**kwargs: Any) -> urllib3.PoolManager:
    """A ``urllib3.PoolManager(**kwargs)`` whose connections a :class:`~kvplan_operator.deadline.RequestGuard`
    can cut (module docstring)."""
    manager = urllib3.PoolManager(**kwargs)
    manager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}
    return manager


def timeout(guard: deadline.RequestGuard) -> urllib3.Timeout:
    """Per-operation socket timeouts no longer than what the guard has left (the guard bounds the sum)."""
    left = max(0.001, guard.remaining())
    return urllib3.Timeout(connect=left, read=left)


def body_reader(rsp: Any, guard: deadline.RequestGuard) -> Callable[[int], bytes]:
    """``read(n)``: up to ``n`` bytes of the body (``b""`` at its end); checks the guard before each read, so a body
    that keeps coming fast is cut at the deadline too. Raises :class:`PromError` once the guard has fired."""

    def read(n: int) -> bytes:
        guard.check()
        if guard.fired is not None:
            raise _Cut()
        data: bytes = rsp.read(n)
        if guard.fired is not None:
            raise _Cut()
        return data

    return read


class _Cut(Exception):
    """Raised inside a read once the guard fired; the caller reports it with :func:`cut_error`."""


def is_cut(exc: BaseException) -> bool:
    return isinstance(exc, _Cut)


def cut_error(guard: deadline.RequestGuard, *, what: str, host: str, limit_s: float,
              cycle_s: float | None) -> PromError:
    """What a fired guard is reported as (module docstring)."""
    if guard.fired == deadline.STOPPING:
        return PromError(C.OPERATOR_STOPPING, f"{what}: the operator is stopping; the request to {host} was cut")
    if guard.fired == deadline.CYCLE:
        budget = f" ({cycle_s:g} s, --cycle-deadline)" if cycle_s is not None else ""
        return PromError(C.CYCLE_DEADLINE_EXCEEDED, f"{what}: the reconcile's cycle deadline{budget} passed during "
                         f"the request to {host}; nothing of this cycle applied")
    return PrometheusUnavailable(f"{what}: request to {host} timed out after {limit_s:g} s "
                                 "(spec.prometheus.timeoutSeconds bounds the whole request, not one read)")
