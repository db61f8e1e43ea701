"""Whether a Prometheus answer is about the time asked: its samples' timestamps against the query's.

Prometheus stamps a range query's points exactly ``start + k * step`` up to ``end``, and an instant query's sample
exactly ``time``; the operator asks for ``end = time = now``. A caching query frontend serving an old answer, a
proxy replaying one, or a broken exporter of recording rules answers other times, and those samples would plan as
if current (two-hour-old histories were accepted as healthy). So, with a slack of :func:`slack`
(:data:`MAX_SKEW_S`, or half a step when the step is shorter: room for rounding, never a window's worth):

- every point of a range answer lies in ``[start - slack, end + slack]`` and within the slack of the step's grid
  (an answer with no point near ``end`` is left to the rate check: a series that stopped is ``NoRateData``);
- an instant answer's sample lies within :data:`MAX_SKEW_S` of ``time``.

Anything else is ``StaleSamples`` naming the query and how far off the answer is (the operator's own numbers,
nothing of the answer's text); the last good plan stays in force.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from .. import conditions as C
from .error import PromError

#: Largest distance of a sample from the time asked, seconds (5 min: far beyond any frontend's rounding, far below
#: a window: the default window is an hour).
MAX_SKEW_S = 300.0


def slack(step: float) -> float:
    """How far a range answer's point may be from the grid, seconds."""
    return min(step / 2.0, MAX_SKEW_S)


def _ago(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds:.0f} s"


def check_range_times(times: Iterable[float], *, start: float, end: float, step: float, what: str) -> None:
    """Raise ``StaleSamples`` unless every point time of a range answer is on the asked grid (module docstring)."""
    s = slack(step)
    for ts in times:
        if not math.isfinite(ts):
            raise PromError(C.STALE_SAMPLES, f"{what}: a sample has no finite timestamp")
        if ts < start - s:
            raise PromError(C.STALE_SAMPLES, f"{what}: a sample is {_ago(start - ts)} older than the requested "
                            "window (a stale cache or a replayed answer?); not used")
        if ts > end + s:
            raise PromError(C.STALE_SAMPLES, f"{what}: a sample is {_ago(ts - end)} newer than the query's end "
                            "(not an answer to this query); not used")
        off = abs(ts - (start + round((ts - start) / step) * step))
        if off > s:
            raise PromError(C.STALE_SAMPLES, f"{what}: a sample is {off:.0f} s off the query's {step:g} s step (not an "
                            "answer to this query); not used")


def check_instant_time(ts: float, *, at: float, what: str) -> None:
    """Raise ``StaleSamples`` unless an instant answer's sample is at the time asked."""
    if not math.isfinite(ts):
        raise PromError(C.STALE_SAMPLES, f"{what}: the sample has no finite timestamp")
    if abs(ts - at) > MAX_SKEW_S:
        side = "older" if ts < at else "newer"
        raise PromError(C.STALE_SAMPLES, f"{what}: the sample is {_ago(abs(ts - at))} {side} than the time asked "
                        "(a stale cache or a replayed answer?); not used")
