"""Building a :class:`Workload` from trace columns: as-is, or resampled to any length and rate.

Parsing trace files (and their errors by line) belongs to the evaluation harness; these helpers take arrays.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from kvcore.errors import InputError
from kvcore.sim.types import Workload


def poisson_arrivals(n: int, rate_rps: float, *, rng: np.random.Generator) -> np.ndarray:
    """``n`` arrival times (s) of a Poisson process of ``rate_rps`` starting at 0 (exponential gaps, uncapped)."""
    if not (rate_rps > 0 and np.isfinite(rate_rps)):
        raise InputError("rate_rps", f"must be finite and > 0, got {rate_rps}")
    gaps = rng.exponential(1.0 / rate_rps, size=n)
    if n:
        gaps[0] = 0.0
    return np.cumsum(gaps)


def workload_from_trace(
    input_tokens: ArrayLike,
    output_tokens: ArrayLike,
    *,
    arrival_s: ArrayLike | None = None,
    class_index: ArrayLike | None = None,
    n_classes: int | None = None,
    rate_rps: float | None = None,
    rng: np.random.Generator | None = None,
) -> Workload:
    """A workload from trace columns. Without ``arrival_s`` (e.g. ShareGPT), arrivals are Poisson at
    ``rate_rps`` drawn from ``rng`` (both required then). ``class_index`` defaults to one class."""
    inp = np.asarray(input_tokens)
    if arrival_s is None:
        if rate_rps is None or rng is None:
            raise InputError("arrival_s", "the trace has no arrival times: pass rate_rps and rng to draw them")
        arrival = poisson_arrivals(inp.size, rate_rps, rng=rng)
    else:
        arrival = np.asarray(arrival_s, dtype=np.float64)
    cls = np.zeros(inp.size, dtype=np.int64) if class_index is None else class_index
    return Workload.from_arrays(arrival, cls, inp, output_tokens, n_classes=n_classes)


def resample_trace(
    input_tokens: ArrayLike,
    output_tokens: ArrayLike,
    n: int,
    *,
    rng: np.random.Generator,
    arrival_s: ArrayLike | None = None,
    rate_rps: float | None = None,
    class_index: ArrayLike | None = None,
    n_classes: int | None = None,
) -> Workload:
    """``n`` requests drawn with replacement from the trace rows (input, output and class kept together).

    Arrivals: with ``arrival_s``, inter-arrival gaps are resampled from the trace's own gaps (keeping its
    burstiness) and scaled so the mean rate is ``rate_rps`` when given; without, they are Poisson at
    ``rate_rps`` (then required). The draws, in order: rows, then gaps.
    """
    if n < 1:
        raise InputError("n", f"must be >= 1, got {n}")
    inp = np.asarray(input_tokens)
    outp = np.asarray(output_tokens)
    if inp.ndim != 1 or inp.size == 0:
        raise InputError("input_tokens", f"must be a non-empty 1-D array, got shape {inp.shape}")
    rows = rng.integers(0, inp.size, size=n)
    cls = None if class_index is None else np.asarray(class_index)[rows]
    if arrival_s is None:
        if rate_rps is None:
            raise InputError("rate_rps", "needed when the trace has no arrival times")
        arrival = poisson_arrivals(n, rate_rps, rng=rng)
    else:
        src = np.asarray(arrival_s, dtype=np.float64)
        if src.shape != inp.shape:
            raise InputError("arrival_s", f"has {src.size} entries, input_tokens has {inp.size}")
        gaps = np.diff(src)
        if gaps.size == 0 or np.any(gaps < 0) or gaps.sum() <= 0:
            raise InputError("arrival_s", "needs at least two non-decreasing, distinct arrival times to resample")
        drawn = gaps[rng.integers(0, gaps.size, size=n)]
        drawn[0] = 0.0
        if rate_rps is not None:
            if not (rate_rps > 0 and np.isfinite(rate_rps)):
                raise InputError("rate_rps", f"must be finite and > 0, got {rate_rps}")
            drawn *= (1.0 / rate_rps) / gaps.mean()
        arrival = np.cumsum(drawn)
    if cls is None:
        cls = np.zeros(n, dtype=np.int64)
    return Workload.from_arrays(arrival, cls, inp[rows], outp[rows], n_classes=n_classes)
