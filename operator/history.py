"""Per-class observations from Prometheus: vLLM's output-length histogram -> kvcore ``History``, and the arrival rate.

This is the operator's one history source today (vLLM's ``request_generation_tokens`` histogram); other sources
plug in at :func:`observe_class`'s level (same inputs, a :class:`ClassObservation` out).

PromQL (one range query per class, so the cost does not grow with the number of windows):

    sum by (le) (increase({__name__=~"vllm:request_generation_tokens_bucket|vllm_request_generation_tokens_bucket",
                           <selector>}[<lookback/windows>]))

evaluated from ``now - lookback + window`` to ``now`` every ``window``: each point is one sub-window's histogram.
Both metric spellings are matched (``prometheus_client`` >= 0.23 may store ``vllm:`` as ``vllm_``).

Nothing doubtful becomes a plan silently; each of these is a :class:`~kvplan_operator.prom.PromError` with a named
reason (the last good plan stays in force):

- ``InvalidHistogram``: a count that is NaN, infinite, negative or above :data:`MAX_COUNT`; an ``le`` that is not a
  number or is negative; cumulative counts that *decrease* with ``le`` by more than scrape skew explains
  (:data:`SKEW_REQUESTS` requests plus :data:`SKEW_FRACTION` of the window's total) -- reversed buckets would put
  every request in the lowest bucket and shrink reservations to nothing. A dip within that tolerance is repaired
  by the running max (as :func:`kvcore.traces.histogram_to_samples` does);
- ``NoRateData``: an ``arrivalRateQuery`` that returns no sample (an empty vector is "unknown", not 0 req/s);
- ``InvalidRate``: a rate that is NaN, infinite, negative or above :data:`MAX_RATE`;
- ``PrometheusBadResponse``: a result of the wrong type or values that are not numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvcore.errors import InputError
from kvcore.samples import History, Samples
from kvcore.traces import histogram_to_samples

from . import conditions as C
from .prom import PromApi, PromError
from .spec import RequestClass

METRIC_NAMES = ("vllm:request_generation_tokens_bucket", "vllm_request_generation_tokens_bucket")
#: Largest believable request count in one sub-window. 1e15 is ten thousand years of a million requests per second;
#: anything above (1e308 included) is a broken exporter or recording rule, not traffic.
MAX_COUNT = 1e15
#: Largest believable arrival rate, requests/s (a million times a big fleet's load).
MAX_RATE = 1e9
#: Scrape skew tolerated in cumulative counts: a dip of at most this many requests ...
SKEW_REQUESTS = 1.0
#: ... plus this fraction of the window's total (``increase()`` extrapolates each series on its own).
SKEW_FRACTION = 0.01

Window = tuple[float, list[str], list[float]]


@dataclass(frozen=True)
class ClassObservation:
    """What Prometheus says about one class: its history (None when every window is empty), the requests counted,
    the number of non-empty windows and the arrival rate (requests/s)."""

    name: str
    history: History | None
    requests: float
    windows: int
    arrival_rate: float


def histogram_query(selector: str, window_s: float) -> str:
    """The per-``le`` increase over one sub-window, both metric spellings."""
    names = "|".join(METRIC_NAMES)
    sel = f'__name__=~"{names}"' + (f", {selector.strip()}" if selector.strip() else "")
    return f"sum by (le) (increase({{{sel}}}[{int(window_s)}s]))"


def _number(raw: Any, what: str) -> float:
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{what}: value {str(raw)[:20]!r} is not a number") from None


def _bound(le: Any, what: str) -> float:
    try:
        b = float(le)
    except (TypeError, ValueError):
        raise PromError(C.INVALID_HISTOGRAM, f"{what}: bucket bound le={str(le)[:20]!r} is not a number") from None
    if math.isnan(b) or b < 0:
        raise PromError(C.INVALID_HISTOGRAM, f"{what}: bucket bound le={le} must be >= 0")
    return b


def windows_from_matrix(data: Mapping[str, Any], *, what: str = "histogram") -> list[Window]:
    """A range-query ``data`` (one series per ``le``) -> ``[(timestamp, bounds, cumulative counts)]`` oldest first.

    Bounds are sorted ascending (series naming the same bound are summed); a timestamp missing from some ``le``
    series counts 0 there. Raises :class:`PromError` (``InvalidHistogram`` / ``PrometheusBadResponse``) on anything
    the module docstring lists."""
    if data.get("resultType") not in (None, "matrix") or not isinstance(data.get("result", []), list):
        raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{what}: expected a matrix, got {data.get('resultType')!r}")
    by_time: dict[float, dict[float, float]] = {}
    labels: dict[float, str] = {}
    for series in data.get("result", []):
        if not isinstance(series, Mapping):
            raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{what}: a series is not an object")
        le = (series.get("metric") or {}).get("le")
        if le is None:
            continue
        bound = _bound(le, what)
        labels.setdefault(bound, str(le))
        for point in series.get("values") or []:
            if not isinstance(point, Sequence) or len(point) != 2:
                raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{what}: a sample is not [time, value]")
            ts, v = _number(point[0], what), _number(point[1], what)
            if not math.isfinite(v) or v < 0 or v > MAX_COUNT:
                raise PromError(C.INVALID_HISTOGRAM, f"{what}: count {v:g} at le={le} (t={ts:.0f}) is not a finite "
                                f"request count in [0, {MAX_COUNT:g}]")
            row = by_time.setdefault(ts, {})
            row[bound] = row.get(bound, 0.0) + v
    bounds = sorted(labels)
    out: list[Window] = []
    for ts in sorted(by_time):
        counts = [by_time[ts].get(b, 0.0) for b in bounds]
        total = max(counts, default=0.0)
        peak = 0.0
        for b, c in zip(bounds, counts):
            if peak - c > SKEW_REQUESTS + SKEW_FRACTION * total:
                raise PromError(C.INVALID_HISTOGRAM, f"{what}: cumulative count falls from {peak:g} to {c:g} at "
                                f"le={labels[b]} (t={ts:.0f}); reversed or decreasing buckets")
            peak = max(peak, c)
        out.append((ts, [labels[b] for b in bounds], counts))
    return out


def history_from_windows(windows: Sequence[Window], *, max_model_len: float) -> tuple[History | None, float]:
    """Windows -> (History of the non-empty ones or None, total requests). Counts are ``increase()`` values."""
    samples: list[Samples] = []
    total = 0.0
    for _, bounds, counts in windows:
        if not bounds or max(counts, default=0.0) <= 0:
            continue
        try:
            samples.append(histogram_to_samples(bounds, counts, max_model_len=max_model_len))
        except InputError:
            continue  # an all-empty window after the running max; nothing to learn from it
        total += max(counts)
    return (History.of(samples) if samples else None), total


def rate_value(data: Mapping[str, Any], *, what: str = "arrivalRateQuery") -> float:
    """An instant query's value, requests/s: a scalar, or the sum of a vector's samples.

    An empty vector raises ``NoRateData``; NaN, +-Inf, negative or absurd values raise ``InvalidRate``."""
    result_type, result = data.get("resultType"), data.get("result")
    if result_type == "scalar" and isinstance(result, Sequence) and len(result) == 2:
        value = _number(result[1], what)
    elif result_type in ("vector", None) and isinstance(result, list):
        if not result:
            raise PromError(C.NO_RATE_DATA, f"{what} returned no sample (an empty result is not 0 requests/s)")
        value = 0.0
        for s in result:
            point = s.get("value") if isinstance(s, Mapping) else None
            if not isinstance(point, Sequence) or len(point) != 2:
                raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{what}: a sample is not [time, value]")
            value += _number(point[1], what)
    else:
        raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{what}: expected a scalar or vector, got {result_type!r}")
    if not math.isfinite(value) or value < 0 or value > MAX_RATE:
        raise PromError(C.INVALID_RATE, f"{what} returned {value:g} requests/s (must be finite, >= 0 and "
                        f"<= {MAX_RATE:g})")
    return value


def observe_class(prom: PromApi, cls: RequestClass, *, lookback_s: float, windows: int, now: float,
                  index: int = 0) -> ClassObservation:
    """Query one class's histogram windows (and its arrival-rate query if any). Raises :class:`PromError`."""
    window_s = max(60.0, lookback_s / windows)
    q = histogram_query(cls.history.selector, window_s)
    data = prom.query_range(q, start=now - window_s * (windows - 1), end=now, step=window_s)
    rows = windows_from_matrix(data, what=f"class {cls.name} histogram (spec.classes[{index}].history)")
    history, total = history_from_windows(rows, max_model_len=float(cls.max_output_tokens))
    if cls.arrival_rate is not None:
        rate = float(cls.arrival_rate)
    else:
        assert cls.arrival_rate_query is not None
        rate = rate_value(prom.query(cls.arrival_rate_query, at=now),
                          what=f"class {cls.name} spec.classes[{index}].arrivalRateQuery")
    return ClassObservation(cls.name, history, total, len(history.windows) if history else 0, rate)
