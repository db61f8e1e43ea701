"""Histogram buckets: parsing Prometheus' cumulative ``le`` counts, and binning raw lengths the way an exporter does.

A Prometheus histogram of output lengths reports, per upper bound ``le`` (tokens), how many requests had an output
of at most ``le`` tokens, plus ``+Inf`` (every request). :func:`buckets_from_cumulative` validates that and turns it
into :class:`Buckets`: per-bucket request counts on explicit edges ``(lower, upper]`` in tokens, with the ``+Inf``
bucket closed at ``max_model_len`` (no output is longer). :func:`bin_lengths` does what an exporter does to raw
lengths, so the evaluation can train a policy on exactly what the operator would see.

What to place inside each bucket is the job of :mod:`kvcore.history.bucket_model`.

Bad input is an :class:`~kvcore.errors.InputError` naming the field; nothing is repaired except scrape
skew (see :data:`SKEW_REQUESTS`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvcore.errors import InputError
from kvcore.history.samples import FloatArray, as_float_array

SKEW_REQUESTS = 1.0
"""A cumulative count may sit this many requests below a lower bucket's ...

Prometheus' ``increase()`` handles counter resets per series: when a pod restarts between two scrapes, a bucket
whose new value happens to exceed its old one shows no reset and is under-counted, while a lower bucket that fell
is counted in full, so after ``sum by (le)`` a higher bucket can come out a little below a lower one. Such a dip
(at most :data:`SKEW_REQUESTS` requests plus :data:`SKEW_FRACTION` of the window's requests) is skew, repaired by
a running max. A larger decrease means the counts and the bounds do not belong together (e.g. counts listed in
the reverse order of their bounds) and is refused: a running max would pile every request into the lowest bucket
(an operator reservation once fell from 2,048 to 10 tokens that way). The operator's histogram check
(``kvplan_operator.observe.history``) uses the same two numbers."""

SKEW_FRACTION = 0.01
"""... plus this fraction of the window's requests (its largest cumulative count); dimensionless. See
:data:`SKEW_REQUESTS`."""


@dataclass(frozen=True, eq=False)
class Buckets:
    """Request counts of one histogram window, one entry per bucket ``(lower, upper]`` (tokens).

    Attributes:
        lower: exclusive lower edge of each bucket, tokens; 0 for the first (output lengths are >= 0, and a
            0-token output is placed with the first bucket's), increasing.
        upper: inclusive upper edge, tokens; ``max_model_len`` for the ``+Inf`` bucket, and bounds above
            ``max_model_len`` are lowered to it (a bucket entirely above it becomes the point ``max_model_len``).
        counts: requests per bucket (>= 0; fractional for ``increase()`` values).
        open_top: the last bucket is the ``+Inf`` one (its upper edge is ``max_model_len``, not a bound).
        max_model_len: the longest possible output, tokens.
    """

    lower: FloatArray
    upper: FloatArray
    counts: FloatArray
    open_top: bool
    max_model_len: float

    @property
    def total(self) -> float:
        """Requests counted (all buckets)."""
        return float(self.counts.sum())

    @property
    def widths(self) -> FloatArray:
        """``upper - lower`` per bucket, tokens."""
        return np.asarray(self.upper - self.lower, dtype=np.float64)


def check_max_model_len(max_model_len: float) -> float:
    """``max_model_len`` as a float; :class:`InputError` unless a positive finite number of tokens."""
    try:
        value = float(max_model_len)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise InputError("max_model_len", f"must be a positive number of tokens, got {max_model_len}")
    return value


def _parse_bounds(bounds: Sequence[float | str]) -> FloatArray:
    b = np.empty(len(bounds))
    for i, raw in enumerate(bounds):
        try:
            b[i] = float(raw)
        except (TypeError, ValueError):
            raise InputError(f"bounds[{i}]", f"le bound {raw!r} is not a number") from None
    return b


def buckets_from_cumulative(
    bounds: Sequence[float | str], cumulative_counts: Sequence[float] | npt.ArrayLike, *, max_model_len: float
) -> Buckets:
    """Validated :class:`Buckets` from cumulative counts.

    Args:
        bounds: the ``le`` bounds, in any order (each paired with the count at the same position), as numbers or
            strings (``"+Inf"`` included or not).
        cumulative_counts: requests at or below each bound (e.g. ``increase(..._bucket[w])`` per ``le``).
        max_model_len: the longest possible output, tokens; closes the ``+Inf`` bucket and caps larger bounds.

    Steps: sort the (bound, count) pairs by bound; check that the counts do not decrease (beyond the scrape skew
    :data:`SKEW_REQUESTS` + :data:`SKEW_FRACTION` of the total, which a running max repairs), then difference them
    into per-bucket counts. Without a ``+Inf`` bucket, requests
    above the largest bound are unknown and not counted.

    Raises:
        InputError: ``max_model_len`` not a positive number; a bound that is not a number, NaN, negative or given
            twice; counts of another length, NaN, infinite or negative; a cumulative count below a lower bound's
            (``+Inf`` below the last finite bucket included); every bucket empty.
    """
    mml = check_max_model_len(max_model_len)
    b = _parse_bounds(bounds)
    c = np.asarray(cumulative_counts, dtype=np.float64)
    if c.shape != b.shape:
        raise InputError("cumulative_counts", f"has {c.size} entries for {b.size} bounds")
    if b.size == 0:
        raise InputError("bounds", "no buckets")
    if np.isnan(b).any() or (b < 0).any():
        raise InputError("bounds", "le bounds must be >= 0 and not NaN")
    if not np.isfinite(c).all() or (c < 0).any():
        i = int(np.argmax(~np.isfinite(c) | (c < 0)))
        raise InputError(f"cumulative_counts[{i}]", f"count must be finite and >= 0, got {c[i]}")
    if np.isinf(b).any() and b[np.isinf(b)].size > 1:
        raise InputError("bounds", "duplicate le bound +Inf")
    order = np.argsort(b, kind="stable")
    b, c = b[order], c[order]
    dup = np.flatnonzero(np.diff(b) == 0)
    if dup.size:
        raise InputError("bounds", f"duplicate le bound {b[dup[0]]:g}")
    tol = SKEW_REQUESTS + SKEW_FRACTION * float(c.max())
    drop = np.flatnonzero(np.maximum.accumulate(c)[:-1] - c[1:] > tol)
    if drop.size:
        j = int(drop[0]) + 1
        k = int(np.argmax(c[:j]))
        what = "the +Inf bucket" if math.isinf(b[j]) else f"le={b[j]:g}"
        raise InputError(
            f"cumulative_counts[{int(order[j])}]",
            f"cumulative count decreases: {what} has {c[j]:g} requests but le={b[k]:g} has {c[k]:g} (more than the "
            f"{tol:g} requests scrape skew explains)",
            hint="a bucket counts every request at or below its bound, so counts never fall as le grows; "
            "are the counts listed in the same order as their bounds?",
        )
    c = np.maximum.accumulate(c)  # only scrape skew is left to repair (tolerance above)
    counts = np.diff(c, prepend=0.0)
    open_top = bool(math.isinf(b[-1]))
    upper = np.minimum(b, mml)
    lower = np.concatenate(([0.0], upper[:-1]))
    if not (counts > 0).any():
        raise InputError("cumulative_counts", "all buckets are empty (no requests observed)")
    for arr in (lower, upper, counts):
        arr.setflags(write=False)
    return Buckets(lower=lower, upper=upper, counts=counts, open_top=open_top, max_model_len=mml)


def cumulative_from_lengths(lengths: FloatArray | Sequence[float], bounds: Sequence[float]) -> FloatArray:
    """What an exporter reports for these output lengths: per bound ``le`` (increasing, ``inf`` allowed), the number
    of lengths ``<= le``."""
    v = np.sort(as_float_array(lengths, "lengths"))
    le = as_float_array(list(bounds), "bounds")
    if le.size and (np.diff(le) <= 0).any():
        raise InputError("bounds", "must be increasing")
    return np.searchsorted(v, le, side="right").astype(np.float64)


def bin_lengths(lengths: FloatArray | Sequence[float], layout: Sequence[float], *, max_model_len: float) -> Buckets:
    """Raw output lengths (tokens) as an exporter with finite bounds ``layout`` (plus ``+Inf``) would count them."""
    bounds = [*map(float, layout), math.inf]
    return buckets_from_cumulative(bounds, cumulative_from_lengths(lengths, bounds), max_model_len=max_model_len)
