"""Prometheus answers -> per-class observations: histogram windows checked with named reasons, then kvcore
``History``; the arrival rate from the same counts. Pure (the queries themselves are :mod:`kvplan_operator.observe.sources`).

A history source asks one range query for all its classes; its ``matrix`` answer holds one series per (``le``,
key), where the key is the source's class label (``kvplan_class``, ``fairness_id``, ...) or, for stock vLLM, a
label the query adds per Deployment (:data:`KEY_LABEL`). Each point is one sub-window's ``increase()``.
:func:`windows_by_key` regroups it as ``{key: [(t, bounds, cumulative counts)]}``, oldest first.

Nothing doubtful becomes a plan silently; each of these is a :class:`~kvplan_operator.prom.PromError` with a named
reason (the last good plan stays in force):

- ``InvalidHistogram``: a count that is NaN, infinite, negative or above :data:`MAX_COUNT`; an ``le`` that is not a
  number or is negative; cumulative counts that *decrease* with ``le`` by more than scrape skew explains
  (kvcore's own tolerance: ``kvcore.history.buckets.SKEW_REQUESTS`` requests plus ``SKEW_FRACTION`` of the window's
  total) -- reversed buckets would put every request in the lowest bucket and shrink reservations to nothing --
  named specially when the ``+Inf`` bucket is the one below the last finite bucket. A dip within that tolerance is
  repaired by kvcore's running max;
- ``TooManySeries``: more than :data:`MAX_SERIES` series, or more than :data:`MAX_KEYS` values of the class label
  (a request id or user id as class label would otherwise become thousands of plans);
- ``NoRateData``: no count in the newest window for a class whose arrival rate comes from the source, or an
  ``arrivalRateQuery`` that returns no sample (an empty vector is "unknown", not 0 req/s);
- ``InvalidRate``: a rate that is NaN, infinite, negative or above :data:`MAX_RATE`;
- ``PrometheusBadResponse``: a result of the wrong type or values that are not numbers.

Binning: :func:`class_histories` is the one place where bucket counts become samples:
:func:`kvcore.history.bucketed.class_histories` reads each window with the within-bucket model and gives every
window its binning bound for the radius rule. A class whose windows kvcore still refuses is ``InvalidHistogram``
naming the class, the window and the bucket.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from kvcore import SKEW_FRACTION, SKEW_REQUESTS
from kvcore import ClassHistory
from kvcore import class_histories as _binned_histories
from kvcore import History

from .. import conditions as C
from ..prom.answer_time import check_instant_time
from ..prom import PromError
from ..prom.response_text import le_label, le_text, result_type_text, series_key_text
from ..prom.stream import Points

#: The label a query adds to tell apart the keys of a source without a class label (stock vLLM, one key per
#: Deployment or selector): ``label_replace(..., "kvplan_key", "<key>", "", "")``.
KEY_LABEL = "kvplan_key"
#: Largest believable request count in one sub-window. 1e15 is ten thousand years of a million requests per second;
#: anything above (1e308 included) is a broken exporter or recording rule, not traffic.
MAX_COUNT = 1e15
#: Largest believable arrival rate, requests/s (a million times a big fleet's load).
MAX_RATE = 1e9
#: Most values of a class label one query may yield: four times the CRD's 256 classes, room for other tenants'
#: classes on a shared label and the plugin's ``default`` class; a request id or user id takes far more.
MAX_KEYS = 1024
#: Most series one history query may return: the CRD's 256 classes x 256 buckets (kvplan's fine layout has 87 at an
#: 8k context and 116 at 128k), i.e. 64 per key at MAX_KEYS.
MAX_SERIES = 65_536
#: Most buckets (distinct ``le``) of one class's histogram: kvplan's fine layout has 87 at an 8k context and 116 at
#: 128k; more is a selector mixing histograms, and each becomes part of every window of the class's history.
MAX_BUCKETS = 256

Window = tuple[float, list[str], list[float]]
"""One window of one key: its time, the ``le`` labels (ascending bounds) and their cumulative counts."""


@dataclass(frozen=True)
class ClassObservation:
    """What Prometheus says about one class: its history (None when every window is empty), the requests counted,
    the number of non-empty windows, the arrival rate (requests/s), the source it came from and how the rate was
    obtained (``spec``, ``query`` or ``source``)."""

    name: str
    history: History | None
    requests: float
    windows: int
    arrival_rate: float
    source: str = "vllm"
    rate_from: str = "spec"
    #: the newest window's histogram, ``(bounds, cumulative counts)`` ascending with ``+Inf``, when it has a point
    #: at the query's end (plan calibration reads its realised overflow share from it; None: no such window).
    newest: tuple[tuple[float, ...], tuple[float, ...]] | None = None


def _number(raw: Any, what: str) -> float:
    try:
        return float(raw)
    except (TypeError, ValueError, OverflowError):
        raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{what}: a sample value or timestamp is not a number") from None


def _bound(le: Any, what: str) -> float:
    try:
        b = float(le)
    except (TypeError, ValueError, OverflowError):
        raise PromError(C.INVALID_HISTOGRAM, f"{what}: a bucket bound (le) is not a number") from None
    if math.isnan(b) or b < 0:
        raise PromError(C.INVALID_HISTOGRAM, f"{what}: bucket bound le={le_text(b)} must be >= 0")
    return b


def _series(data: Mapping[str, Any], what: str) -> list[Any]:
    if data.get("resultType") not in (None, "matrix") or not isinstance(data.get("result", []), list):
        raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{what}: expected a matrix, got "
                        f"{result_type_text(data.get('resultType'))}")
    result: list[Any] = data.get("result", [])
    if len(result) > MAX_SERIES:
        raise PromError(C.TOO_MANY_SERIES, f"{what}: the query returned {len(result)} series (more than "
                        f"{MAX_SERIES}); narrow the selector or choose a class label with fewer values")
    return result


def check_window(bounds: Sequence[float], labels: Sequence[str], counts: Sequence[float], *, what: str,
                 ts: float) -> None:
    """Cumulative counts must not fall with ``le`` beyond scrape skew; raises ``InvalidHistogram``."""
    total = max(counts, default=0.0)
    peak, peak_bound = 0.0, 0.0
    for b, c in zip(bounds, counts):  # messages show the bounds as numbers, never the answer's label text
        if peak - c > SKEW_REQUESTS + SKEW_FRACTION * total:
            if math.isinf(b):
                raise PromError(C.INVALID_HISTOGRAM, f"{what}: the +Inf bucket ({c:g}) is lower than the last finite "
                                f"bucket le={le_text(peak_bound)} ({peak:g}) at t={ts:.0f}: every request is counted "
                                "in +Inf")
            raise PromError(C.INVALID_HISTOGRAM, f"{what}: cumulative count falls from {peak:g} to {c:g} at "
                            f"le={le_text(b)} (t={ts:.0f}); reversed or decreasing buckets")
        if c >= peak:
            peak, peak_bound = c, b


class KeyWindows(Sequence[Window]):
    """One key's windows, oldest first, kept compact: the times, the ``le`` labels (ascending bounds) and one
    ``float64`` matrix of cumulative counts (window x bucket); each :data:`Window` is made when asked for."""

    def __init__(self, times: Sequence[float], labels: list[str], counts: Any) -> None:
        self.times, self.labels, self.counts = list(times), labels, counts

    def __len__(self) -> int:
        return len(self.times)

    @overload
    def __getitem__(self, i: int) -> Window: ...

    @overload
    def __getitem__(self, i: slice) -> list[Window]: ...

    def __getitem__(self, i: int | slice) -> Window | list[Window]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        if self.counts is None:
            raise LookupError("this key's counts were not kept (windows_by_key keep=...)")
        return self.times[i], self.labels, [float(c) for c in self.counts[i]]


def _points(series: Mapping[str, Any], what: str, where: str, le: Any) -> tuple[Any, Any]:
    """A series' points as (times, values) float arrays, each checked (module docstring)."""
    raw = series.get("values") or []
    if isinstance(raw, Points):
        ts, vs = np.frombuffer(raw.t, dtype=np.float64), np.frombuffer(raw.v, dtype=np.float64)
    else:
        ts_l, vs_l = [], []
        for point in raw:
            if not isinstance(point, Sequence) or len(point) != 2:
                raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{what}: a sample is not [time, value]")
            ts_l.append(_number(point[0], what))
            vs_l.append(_number(point[1], what))
        ts, vs = np.asarray(ts_l, dtype=np.float64), np.asarray(vs_l, dtype=np.float64)
    if not np.isfinite(ts).all():
        raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{where}: a sample's time is not a finite number")
    bad = ~(np.isfinite(vs) & (vs >= 0) & (vs <= MAX_COUNT))
    if bad.any():
        k = int(np.argmax(bad))
        raise PromError(C.INVALID_HISTOGRAM, f"{where}: count {vs[k]:g} at le={le_text(_bound(le, where))} (t={ts[k]:.0f}) is "
                        f"not a finite request count in [0, {MAX_COUNT:g}]")
    return ts, vs


def windows_by_key(data: Mapping[str, Any], key_label: str | None, *, what: str = "histogram",
                   describe: Mapping[str, str] | None = None, keep: Collection[str] | None = None,
                   max_windows: int | None = None) -> dict[str, KeyWindows]:
    """A range-query ``data`` (one series per ``le`` and key) -> ``{key: windows}`` (:class:`KeyWindows`: per
    window ``(t, bounds, cumulative counts)``, oldest first). ``key_label`` None: every series is one key ``""``.
    Bounds are sorted ascending (series naming the same bound are summed); a timestamp missing from some ``le``
    series of a key counts 0 there. ``describe`` names a key in messages (``class chat``). Every key is checked;
    only those in ``keep`` (all when None) are returned, with at most :data:`MAX_BUCKETS` buckets each, and a key
    may have at most ``max_windows`` distinct timestamps (the range's steps); the others are listed without their
counts. Memory: one ``float64`` per (key
    kept, window, bucket). Raises :class:`PromError` on anything the module docstring lists."""
    refs: dict[str, list[tuple[float, str, Any, Any]]] = {}
    times: dict[str, set[float]] = {}

    def where_of(key: str) -> str:
        name = (describe or {}).get(key, series_key_text(key_label))
        return f"{what}" + (f", {name}" if name else "")

    for series in _series(data, what):
        if not isinstance(series, Mapping):
            raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{what}: a series is not an object")
        metric = series.get("metric") or {}
        if not isinstance(metric, Mapping) or not isinstance(series.get("values") or [], (list, Points)):
            raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{what}: a series is not {{metric, values}}")
        le = metric.get("le")
        if le is None:
            continue
        key = "" if key_label is None else str(metric.get(key_label, ""))
        if key not in refs and len(refs) >= MAX_KEYS:
            raise PromError(C.TOO_MANY_SERIES, f"{what}: label {key_label} takes more than {MAX_KEYS} values; "
                            "choose a class label with one value per request class, or narrow the selector")
        where = where_of(key)
        bound = _bound(le, where)
        ts, vs = _points(series, what, where, le)
        seen = times.setdefault(key, set())
        seen.update(ts.tolist())
        if max_windows is not None and len(seen) > max_windows:
            raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{where}: more distinct timestamps than the {max_windows} "
                            "windows of the range asked for")
        refs.setdefault(key, []).append((bound, le_label(le, bound), ts, vs))
    out: dict[str, KeyWindows] = {}
    for key, items in refs.items():
        where = where_of(key)
        labels: dict[float, str] = {}
        for bound, label, _, _ in items:
            labels.setdefault(bound, label)
        bounds = sorted(labels)
        if (keep is None or key in keep) and len(bounds) > MAX_BUCKETS:
            raise PromError(C.TOO_MANY_SERIES, f"{where}: {len(bounds)} buckets (more than {MAX_BUCKETS}); is "
                            "the selector mixing histograms?")
        order = np.asarray(sorted(times[key]), dtype=np.float64)
        column = {b: j for j, b in enumerate(bounds)}
        counts = np.zeros((len(order), len(bounds)))
        for bound, _, ts, vs in items:
            if len(ts):
                np.add.at(counts[:, column[bound]], np.searchsorted(order, ts), vs)
        names = [labels[b] for b in bounds]
        _check_rows(order, bounds, names, counts, where)
        # a key not kept is listed (its windows' times and buckets, for messages), its counts dropped
        out[key] = KeyWindows(order.tolist(), names, counts if keep is None or key in keep else None)
    return out


def _check_rows(order: Any, bounds: list[float], names: list[str], counts: Any, where: str) -> None:
    """:func:`check_window` on every window of one key at once; the first window that fails is named by it."""
    if counts.size == 0:
        return
    peak = np.maximum.accumulate(np.maximum(counts, 0.0), axis=1)
    before = np.concatenate([np.zeros((counts.shape[0], 1)), peak[:, :-1]], axis=1)
    tol = SKEW_REQUESTS + SKEW_FRACTION * counts.max(axis=1, initial=0.0)
    bad = np.nonzero(((before - counts) > tol[:, None]).any(axis=1))[0]
    if len(bad):
        i = int(bad[0])
        check_window(bounds, names, counts[i].tolist(), what=where, ts=float(order[i]))


def windows_from_matrix(data: Mapping[str, Any], *, what: str = "histogram") -> Sequence[Window]:
    """One key's windows (a query summed ``by (le)`` only)."""
    return windows_by_key(data, None, what=what).get("", KeyWindows([], [], np.zeros((0, 0))))


def class_histories(windows_by_class: Mapping[str, Sequence[Mapping[str, float]]], *,
                    max_model_len: Mapping[str, float]) -> dict[str, ClassHistory]:
    """THE adapter from the range-query shape (per class, per window, ``le`` -> cumulative count; windows oldest
    first, ``le`` strings as Prometheus writes them) to per-class histories: :func:`kvcore.history.bucketed.
    class_histories` (the within-bucket model, each window's binning bound; empty windows skipped). The counts were
    checked by :func:`windows_by_key`; anything kvcore still refuses is ``InvalidHistogram`` naming the class."""
    out = _binned_histories(windows_by_class, max_model_len=dict(max_model_len))
    for cls, ch in out.items():
        if ch.error is not None:
            raise PromError(C.INVALID_HISTOGRAM, f"class {cls}: {ch.error}")
    return out


def history_from_windows(windows: Sequence[Window], *, max_model_len: float) -> tuple[History | None, float]:
    """One key's windows -> (History of the non-empty ones or None, total requests), through
    :func:`class_histories`."""
    binned = class_histories({"": [dict(zip(b, c)) for _, b, c in windows]}, max_model_len={"": max_model_len})[""]
    return binned.history, binned.requests


def newest_window(windows: Sequence[Window], *, end: float) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """The window stamped ``end`` as ``(bounds, cumulative counts)`` (None when the key has none there)."""
    last = [w for w in windows if abs(w[0] - end) < 0.5]
    if not last:
        return None
    _, labels, counts = last[0]
    return tuple(float(b) for b in labels), tuple(float(c) for c in counts)


def newest_rate(windows: Sequence[Window], *, end: float, window_s: float, what: str) -> float:
    """Requests/s in the newest sub-window, ``(end - window_s, end]``: its ``+Inf`` count (a histogram's ``_count``
    is its ``+Inf`` bucket, so this reads the source's ``_count`` from the same answer) over ``window_s``.

    ``NoRateData`` when the key has no point at ``end`` (its series are gone: an empty result is unknown, not 0) or
    no ``+Inf`` bucket."""
    last = [w for w in windows if abs(w[0] - end) < 0.5]  # Prometheus keeps milliseconds
    if not last:
        raise PromError(C.NO_RATE_DATA, f"{what}: no count in the newest window (its series stopped); give "
                        "arrivalRate or arrivalRateQuery, or check the exporter")
    _, bounds, counts = last[0]
    inf = [c for b, c in zip(bounds, counts) if math.isinf(float(b))]
    if not inf:
        raise PromError(C.NO_RATE_DATA, f"{what}: the histogram has no +Inf bucket, so its request count is unknown; "
                        "give arrivalRate or arrivalRateQuery")
    rate = inf[0] / window_s
    if not math.isfinite(rate) or rate > MAX_RATE:
        raise PromError(C.INVALID_RATE, f"{what}: {rate:g} requests/s (must be finite and <= {MAX_RATE:g})")
    return rate


def rate_value(data: Mapping[str, Any], *, what: str = "arrivalRateQuery", at: float | None = None) -> float:
    """An instant query's value, requests/s: a scalar, or the sum of a vector's samples.

    An empty vector raises ``NoRateData``; NaN, +-Inf, negative or absurd values raise ``InvalidRate``; with ``at``
    (the time asked), a sample stamped elsewhere raises ``StaleSamples`` (:mod:`kvplan_operator.prom.answer_time`)."""
    result_type, result = data.get("resultType"), data.get("result")
    if result_type == "scalar" and isinstance(result, Sequence) and len(result) == 2:
        value = _number(result[1], what)
        if at is not None:
            check_instant_time(_number(result[0], what), at=at, what=what)
    elif result_type in ("vector", None) and isinstance(result, list):
        if not result:
            raise PromError(C.NO_RATE_DATA, f"{what} returned no sample (an empty result is not 0 requests/s)")
        value = 0.0
        for s in result:
            point = s.get("value") if isinstance(s, Mapping) else None
            if not isinstance(point, Sequence) or len(point) != 2:
                raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{what}: a sample is not [time, value]")
            value += _number(point[1], what)
            if at is not None:
                check_instant_time(_number(point[0], what), at=at, what=what)
    else:
        raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{what}: expected a scalar or vector, got "
                        f"{result_type_text(result_type)}")
    if not math.isfinite(value) or value < 0 or value > MAX_RATE:
        raise PromError(C.INVALID_RATE, f"{what} returned {value:g} requests/s (must be finite, >= 0 and "
                        f"<= {MAX_RATE:g})")
    return value
