"""``Retry-After`` on a Prometheus answer (429 Too Many Requests, 503 Service Unavailable): how long the server
asked the operator to wait, so that the next attempt honours it instead of coming back at the backoff's first
step (``Retry-After: 30`` was retried after about 5 s).

Both forms of RFC 9110 section 10.2.3 are read: delta-seconds (``30``: digits only) and an HTTP-date, taken
relative to the answer's own ``Date`` header when it has one (so neither clock's skew counts), else to the
operator's clock. Anything else (a negative, fractional, hex or list value, a date that does not parse) is
ignored: the ordinary backoff applies. The value is the server's: :meth:`kvplan_operator.record.Recorder.failure`
waits ``max(backoff, Retry-After)``, never longer than the backoff's cap (``Deps.backoff_max_s``, 5 min), so a
server cannot stop the re-plans for longer than the operator would have waited anyway.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # prom imports this module
    from .error import PromError

#: Largest delta-seconds read (a day); a longer one is read as a day, then capped by the backoff.
MAX_SECONDS = 86400.0
_DELTA = re.compile(r"^[0-9]{1,12}$")


def _date(text: str) -> float | None:
    try:
        parsed = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if parsed is None or parsed.tzinfo is None:
        return None
    return parsed.timestamp()


def retry_after_seconds(headers: Mapping[str, str], *, clock: Callable[[], float] = time.time) -> float | None:
    """Seconds the answer's ``Retry-After`` asks to wait (0 for a date already past), or None when absent or not
    in either form."""
    raw = headers.get("Retry-After")
    if raw is None:
        return None
    text = raw.strip()
    if _DELTA.match(text):
        return min(float(text), MAX_SECONDS)
    when = _date(text)
    if when is None:
        return None
    now = _date(headers.get("Date", "")) or clock()
    return min(max(when - now, 0.0), MAX_SECONDS)


#: The statuses whose ``Retry-After`` is a wait (on a redirect it would be one too, but redirects are refused).
STATUSES = (429, 503)


def with_retry_after(exc: PromError, status: int, headers: Mapping[str, str], *,
                     clock: Callable[[], float] = time.time) -> PromError:
    """``exc`` (the failure of an answer with ``status``) with the wait its ``Retry-After`` asks set as
    ``exc.retry_after_s`` and said in its message (the operator's formatting of a number, never the header)."""
    seconds = retry_after_seconds(headers, clock=clock) if status in STATUSES else None
    if seconds is not None:
        exc.retry_after_s = seconds
        exc.args = (f"{exc} (Retry-After: {seconds:.0f} s)",)
    return exc
