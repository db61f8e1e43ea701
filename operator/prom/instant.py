"""The checks every instant-vector answer gets before its samples are read: a vector, at most ``max_series``
series, each sample ``{metric, value}``, and (with ``at``, the time asked) stamped at that time
(:mod:`.answer_time`). A failed check is a :class:`~kvplan_operator.prom.PromError` naming the query."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .. import conditions as C
from . import PromError
from .answer_time import check_instant_time
from .response_text import result_type_text


def stamp(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def instant_samples(data: Mapping[str, Any], what: str, *, max_series: int, at: float | None = None,
                    too_many_hint: str = "") -> Iterator[tuple[Mapping[str, Any], Any]]:
    """(labels, raw value) of each sample of ``data`` (the API's ``data`` object), checked as the module says."""
    result = data.get("result")
    if data.get("resultType") not in (None, "vector") or not isinstance(result, list):
        raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{what}: expected a vector, got "
                        f"{result_type_text(data.get('resultType'))}")
    if len(result) > max_series:
        raise PromError(C.TOO_MANY_SERIES, f"{what}: {len(result)} series (more than {max_series}){too_many_hint}")
    for s in result:
        labels = s.get("metric") if isinstance(s, Mapping) else None
        point = s.get("value") if isinstance(s, Mapping) else None
        if not isinstance(labels, Mapping) or not isinstance(point, Sequence) or len(point) != 2:
            raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{what}: a sample is not {{metric, value}}")
        if at is not None:
            check_instant_time(stamp(point[0]), at=at, what=what)
        yield labels, point[1]


__all__ = ["instant_samples"]
