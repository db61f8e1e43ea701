"""The Prometheus client's one error type, below the client and its helpers (transport, streaming reader,
Retry-After), so that they import it without importing the client."""

from __future__ import annotations

from .. import conditions as C


class PromError(RuntimeError):
    """A Prometheus failure with the condition ``reason`` it maps to and a short message (no response body)."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        #: How long the server asked to wait (its ``Retry-After``, :mod:`kvplan_operator.prom.retry_after`), or None.
        self.retry_after_s: float | None = None
        super().__init__(message)


class PrometheusUnavailable(PromError):
    """Connection refused, DNS failure, timeout or HTTP 5xx."""

    def __init__(self, message: str) -> None:
        super().__init__(C.PROMETHEUS_UNAVAILABLE, message)
