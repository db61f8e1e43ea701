"""Per-class histories from one Prometheus range query over a histogram (pure: the query's JSON in, Histories out).

A history source issues one range query per re-plan, for every class at once:

    sum by (le, <class label>) (increase(<metric>_bucket{<selector>}[W]))   with step W over the lookback

Its ``result`` (``resultType: matrix``) is one series per (le, class) with one value per window.
:func:`windows_from_matrix` regroups it as ``{class: [{le: cumulative count}, ...]}`` (windows oldest first), and
:func:`class_histories` turns that into one :class:`ClassHistory` per class: a :class:`~kvcore.history.samples.History` of
the windows that counted requests, read with a within-bucket model (:mod:`kvcore.history.bucket_model`), each window
carrying its binning bound (:mod:`kvcore.history.bucket_bound`) for the radius rule.

A class whose data are wrong (counts that fall as ``le`` grows, NaN, a ``+Inf`` bucket below the last finite one,
a window missing a bucket the others have) gets its :class:`~kvcore.errors.InputError` in
:attr:`ClassHistory.error`, naming the class, the window and the bucket; the other classes are unaffected, so the
caller can keep that class's last good plan and say why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvcore.history.buckets import buckets_from_cumulative
from kvcore.history.bucket_model import DEFAULT_MODEL, bucket_samples, check_model
from kvcore.errors import InputError
from kvcore.history.samples import History, Samples

Windows = dict[str, list[dict[str, float]]]
"""``{class: [{le: cumulative count}, ...]}``, windows oldest first."""

DEFAULT_MAX_CLASSES = 256
"""Most classes one query may yield. A class label that takes more values than this (a request id, a user) is
refused with a named error instead of turned into thousands of plans: 256 is the planner's tested scale."""


@dataclass(frozen=True)
class ClassHistory:
    """One class's history from a range query.

    Attributes:
        name: the class label's value.
        history: the windows that counted requests, oldest first; None when none did or on ``error``.
        requests: requests counted over every window (sum of the ``+Inf`` or largest bucket), >= 0.
        windows: windows that counted requests.
        empty_windows: windows with no request (skipped: nothing to learn from an idle window).
        error: why this class's data were refused, naming the field; None when they were fine.
    """

    name: str
    history: History | None
    requests: float
    windows: int
    empty_windows: int
    error: InputError | None = None


def _value(raw: Any, where: str) -> float:
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise InputError(where, f"value {raw!r} is not a number") from None


def windows_from_matrix(result: Sequence[Mapping[str, Any]], class_label: str, *,
                        max_classes: int = DEFAULT_MAX_CLASSES) -> Windows:
    """Regroup a range query's matrix ``result`` (series ``{"metric": {"le": ..., class_label: ...}, "values":
    [[t, "v"], ...]}``) into ``{class: [{le: count}, ...]}``, one entry per timestamp (oldest first) at which the
    class has any series. A series without ``le`` or without the class label is refused (the query was not a
    ``sum by (le, <class label>)`` over a histogram's buckets); so is a label with more than ``max_classes``
    values."""
    if not isinstance(result, Sequence) or isinstance(result, (str, bytes)):
        raise InputError("result", "must be a list of series (resultType matrix)")
    by_class: dict[str, dict[float, dict[str, float]]] = {}
    for i, series in enumerate(result):
        metric = series.get("metric") if isinstance(series, Mapping) else None
        if not isinstance(metric, Mapping):
            raise InputError(f"result[{i}].metric", "missing (each series needs its labels)")
        if "le" not in metric:
            raise InputError(f"result[{i}].metric", f"has no 'le' label ({dict(metric)}); query the _bucket series "
                             f"with sum by (le, {class_label})")
        if class_label not in metric:
            raise InputError(f"result[{i}].metric", f"has no {class_label!r} label ({dict(metric)}); query with "
                             f"sum by (le, {class_label})")
        cls, le = str(metric[class_label]), str(metric["le"])
        values = series.get("values")
        if not isinstance(values, Sequence):
            raise InputError(f"result[{i}].values", "missing (a range query gives values per step)")
        per_time = by_class.setdefault(cls, {})
        for j, point in enumerate(values):
            if not isinstance(point, Sequence) or len(point) != 2:
                raise InputError(f"result[{i}].values[{j}]", f"must be [time, value], got {point!r}")
            t = _value(point[0], f"result[{i}].values[{j}][0]")
            per_time.setdefault(t, {})[le] = _value(point[1], f"result[{i}].values[{j}][1]")
        if len(by_class) > max_classes:
            raise InputError(class_label, f"the class label takes more than {max_classes} values (series seen: "
                             f"{i + 1})", hint="choose a label with one value per request class, or narrow the "
                             "selector")
    return {cls: [per_time[t] for t in sorted(per_time)] for cls, per_time in sorted(by_class.items())}


def _limit(max_model_len: float | Mapping[str, float], cls: str) -> float:
    if isinstance(max_model_len, Mapping):
        if cls not in max_model_len:
            raise InputError(f"max_model_len[{cls}]", "no max_model_len for this class")
        return float(max_model_len[cls])
    return float(max_model_len)


def _window_field(where: str, field: str, les: Sequence[str]) -> str:
    """``cumulative_counts[i]`` of a window as the bucket it names (``chat.windows[3].le=+Inf``)."""
    if field.startswith("cumulative_counts[") and field.endswith("]"):
        return f"{where}.le={les[int(field[len('cumulative_counts['):-1])]}"
    return f"{where}.{field}"


def _class_history(cls: str, windows: Sequence[Mapping[str, float]], limit: float, model: str) -> ClassHistory:
    les = sorted({le for w in windows for le in w}, key=lambda s: _value(s, f"{cls}.le"))
    samples: list[Samples] = []
    requests = 0.0
    empty = 0
    for k, window in enumerate(windows):
        where = f"{cls}.windows[{k}]"
        missing = [le for le in les if le not in window]
        if missing:
            raise InputError(f"{where}.le", f"bucket le={missing[0]} is missing from this window but present in "
                             "others; a window needs every bucket")
        counts = [float(window[le]) for le in les]
        if all(c == 0.0 for c in counts):
            empty += 1
            continue
        try:
            buckets = buckets_from_cumulative(les, counts, max_model_len=limit)
        except InputError as exc:
            raise InputError(_window_field(where, exc.field, les), exc.message, hint=exc.hint) from None
        samples.append(bucket_samples(buckets, check_model(model), field=where))
        requests += buckets.total
    history = History(tuple(samples)) if samples else None
    return ClassHistory(name=cls, history=history, requests=requests, windows=len(samples), empty_windows=empty)


def class_histories(windows_by_class: Mapping[str, Sequence[Mapping[str, float]]], *,
                    max_model_len: float | Mapping[str, float], model: str = DEFAULT_MODEL) -> dict[str, ClassHistory]:
    """One :class:`ClassHistory` per class of ``windows_by_class`` (``{class: [{le: cumulative count}, ...]}``,
    windows oldest first; ``le`` strings as Prometheus writes them, ``+Inf`` included). ``max_model_len``
    (tokens): one for every class or one per class. A class's bad data become its ``error``
    (module docstring); a bad ``max_model_len`` or ``model`` is raised."""
    check_model(model)
    out: dict[str, ClassHistory] = {}
    for cls, windows in windows_by_class.items():
        try:
            limit = _limit(max_model_len, cls)
            if not math.isfinite(limit) or limit <= 0:
                raise InputError(f"max_model_len[{cls}]", f"must be a positive number of tokens, got {limit}")
            out[cls] = _class_history(cls, windows, limit, model)
        except InputError as exc:
            out[cls] = ClassHistory(name=cls, history=None, requests=0.0, windows=0, empty_windows=0, error=exc)
    return out
