"""Weighted output-length samples and their time-ordered history.

:class:`Samples` is what every reservation solver consumes: output lengths in tokens (finite, >= 0) with weights
(>= 0, normalised to sum 1). Weights are uniform for raw traces and proportional to bucket counts when the samples
come from a Prometheus histogram (:func:`kvcore.history.traces.histogram_to_samples`).

:class:`History` is a time-ordered tuple of :class:`Samples` windows, oldest first. SAA and DRO fit the pooled
union; the data-driven radius measures drift between the windows.

The weighted statistics here (:func:`weighted_quantile`, :func:`weighted_mean`, :func:`weighted_std`) are the ones
the solvers and baselines use, so "P90" means the same thing everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from kvcore.bounds import MAX_TOKENS, MAX_WEIGHT
from kvcore.errors import InputError

FloatArray = npt.NDArray[np.float64]

# Cumulative-weight comparisons tolerate this much round-off, so that e.g. the 0.5 quantile of [1, 2] with
# weights [0.5, 0.5] is 1 (the lower end of the flat optimal interval), not 2.
_QUANTILE_TOL = 1e-12
_UNIFORM_SLACK = 1e-9


def as_float_array(data: Any, field_name: str) -> FloatArray:
    """``data`` as a 1-D float64 array; :class:`InputError` naming ``field_name`` otherwise."""
    try:
        arr = np.asarray(data, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: an integer past float64's range
        raise InputError(field_name, f"not numeric ({exc})") from None
    if arr.ndim != 1:
        raise InputError(field_name, f"must be one-dimensional, got shape {arr.shape}")
    return arr


def check_finite_nonnegative(a: FloatArray, field: str, what: str) -> None:
    """Raise :class:`InputError` naming the first entry of ``a`` that is not finite or is negative."""
    bad = ~np.isfinite(a)
    if bad.any():
        i = int(np.argmax(bad))
        raise InputError(f"{field}[{i}]", f"{what} is not finite ({a[i]})")
    neg = a < 0
    if neg.any():
        i = int(np.argmax(neg))
        raise InputError(f"{field}[{i}]", f"{what} is negative ({a[i]:g})")


def check_at_most(a: FloatArray, top: float, field: str, what: str, bound: str) -> None:
    """Raise :class:`InputError` naming the first entry of ``a`` above ``top`` (the :mod:`kvcore.bounds` constant
    ``bound``)."""
    over = a > top
    if over.any():
        i = int(np.argmax(over))
        raise InputError(f"{field}[{i}]", f"{what} {a[i]:g} is above {top:g} (kvcore.bounds.{bound})")
@dataclass(frozen=True)
class BinningBound:
    """How far (1-Wasserstein, tokens) samples read from histogram buckets can be from the requests they stand for:
    the largest distance over every placement of each bucket's requests inside its bucket (computed and proved in
    :mod:`kvcore.history.bucket_bound`).

    Attributes:
        up: the largest ``integral (F_samples - F_requests)^+ dx``: requests sitting higher than the samples.
        down: the largest ``integral (F_requests - F_samples)^+ dx``: requests sitting lower.
        both: the largest full W1 (``<= up + down``, ``>= max(up, down)``).
        open_up, open_down, open_both: the same, for the open ``+Inf`` bucket alone (whose requests may sit anywhere
            up to max_model_len); 0 when there is none or it is empty.
    """

    up: float = 0.0
    down: float = 0.0
    both: float = 0.0
    open_up: float = 0.0
    open_down: float = 0.0
    open_both: float = 0.0

    def term(self, side: Literal["up", "down", "both"], scope: Literal["all", "open"]) -> float:
        """The bound on ``side`` over every bucket (``all``) or the open bucket alone (``open``), tokens."""
        if scope == "open":
            return {"up": self.open_up, "down": self.open_down, "both": self.open_both}[side]
        return {"up": self.up, "down": self.down, "both": self.both}[side]

    @staticmethod
    def mixture(parts: list[BinningBound | None]) -> BinningBound:
        """The bound for an equal-share mixture of windows (a window without one, raw samples, contributes 0).
        W1 and its one-sided parts are jointly convex, so the mixture's distance is at most the mean of the
        windows' distances."""
        k = len(parts)
        fields = ("up", "down", "both", "open_up", "open_down", "open_both")
        return BinningBound(**{f: sum(getattr(p, f) for p in parts if p is not None) / k for f in fields})


@dataclass(frozen=True, eq=False)
class Samples:
    """Output lengths (tokens) with normalised weights. Build with :meth:`from_arrays`, which validates.

    Attributes:
        values: output tokens per sample, finite and >= 0 (float64, read-only).
        weights: probability weight per sample, >= 0, summing to 1 (float64, read-only).
        observations: how many independent requests the samples stand for, when that is not one per sample:
            histogram buckets are a handful of samples whose weights are the frequencies of thousands of requests.
            None: one request per sample. See :meth:`effective_size`.
        binning: when the samples were read from histogram buckets, how far they can be from the requests counted
            (:class:`BinningBound`); None for raw samples.
    """

    values: FloatArray
    weights: FloatArray
    _sorted: tuple[FloatArray, FloatArray] | None = field(default=None, repr=False, compare=False)
    observations: float | None = None
    binning: BinningBound | None = None

    @classmethod
    def from_arrays(cls, values: Any, weights: Any = None, *, field: str = "samples",
                    observations: float | None = None, binning: BinningBound | None = None) -> Samples:
        """Validate and normalise. Errors are :class:`InputError` naming ``field`` (or ``field.weights``,
        ``field.observations``)."""
        v = as_float_array(values, field)
        if v.size == 0:
            raise InputError(field, "no samples (empty)")
        check_finite_nonnegative(v, field, "output length")
        check_at_most(v, MAX_TOKENS, field, "output length", "MAX_TOKENS")
        wfield = f"{field}.weights"
        if weights is None:
            w = np.full(v.size, 1.0 / v.size)
        else:
            w = as_float_array(weights, wfield)
            if w.size != v.size:
                raise InputError(wfield, f"has {w.size} entries but there are {v.size} samples")
            check_finite_nonnegative(w, wfield, "weight")
            check_at_most(w, MAX_WEIGHT, wfield, "weight", "MAX_WEIGHT")
            total = float(w.sum())
            if total <= 0:
                raise InputError(wfield, "all weights are zero", hint="at least one sample needs positive weight")
            w = w / total
        if observations is not None and not (math.isfinite(observations) and observations > 0):
            raise InputError(f"{field}.observations", f"must be a finite number > 0, got {observations}")
        v = v.copy()
        v.setflags(write=False)
        w = np.ascontiguousarray(w, dtype=np.float64)
        w.setflags(write=False)
        return cls(values=v, weights=w, observations=None if observations is None else float(observations),
                   binning=binning)

    def __len__(self) -> int:
        return int(self.values.size)

    def effective_size(self) -> float:
        """How many independent requests the samples are worth (dimensionless): :attr:`observations` when set,
        else Kish's ``1 / sum(w^2)`` (N for equal weights). Sets the scale of sampling error in the radius rule."""
        if self.observations is not None:
            return self.observations
        return float(1.0 / np.dot(self.weights, self.weights))

    @property
    def uniform(self) -> bool:
        """True when every weight is equal (raw trace samples)."""
        return bool(np.all(self.weights == self.weights[0]))

    def sorted(self) -> tuple[FloatArray, FloatArray]:
        """Values sorted ascending and their weights (cached; read-only arrays)."""
        if self._sorted is None:
            order = np.argsort(self.values, kind="stable")
            sv, sw = self.values[order], self.weights[order]
            sv.setflags(write=False)
            sw.setflags(write=False)
            object.__setattr__(self, "_sorted", (sv, sw))
        assert self._sorted is not None
        return self._sorted

    def max(self) -> float:
        """Largest sample with positive weight (tokens)."""
        return float(self.values[self.weights > 0].max())

    def mean(self) -> float:
        """Weighted mean (tokens)."""
        return weighted_mean(self.values, self.weights)

    def std(self) -> float:
        """Weighted population standard deviation (tokens)."""
        return weighted_std(self.values, self.weights)

    def quantile(self, q: float) -> float:
        """Weighted lower ``q``-quantile (tokens); see :func:`weighted_quantile`. O(N) selection when the weights
        are uniform, one (cached) sort otherwise."""
        _check_q(q)
        if self.uniform:
            return _uniform_quantile(self.values, q)
        sv, sw = self.sorted()
        return sorted_weighted_quantile(sv, sw, q)


@dataclass(frozen=True)
class History:
    """Time-ordered windows of samples, oldest first. One window is fine."""

    windows: tuple[Samples, ...]

    def __post_init__(self) -> None:
        if not self.windows:
            raise InputError("history", "no windows")

    @classmethod
    def of(cls, windows: Samples | Iterable[Samples]) -> History:
        """A history from one :class:`Samples` or an iterable of them (oldest first)."""
        if isinstance(windows, Samples):
            return cls((windows,))
        return cls(tuple(windows))

    def pooled(self) -> Samples:
        """All windows as one :class:`Samples`; each window keeps its share of the total weight equal.

        When a window carries :attr:`Samples.observations`, the pool's is the effective size of that equal-share
        mixture, ``1 / sum_k ((1/K)^2 / n_k)`` with n_k each window's effective size; for raw samples this is
        exactly Kish's formula on the pooled weights, so the two kinds mix consistently. The pool's
        :attr:`Samples.binning` is :meth:`BinningBound.mixture` of the windows' (None when no window has one)."""
        if len(self.windows) == 1:
            return self.windows[0]
        k = len(self.windows)
        values = np.concatenate([s.values for s in self.windows])
        weights = np.concatenate([s.weights / k for s in self.windows])
        observations = None
        if any(s.observations is not None for s in self.windows):
            observations = 1.0 / sum(1.0 / (k * k * s.effective_size()) for s in self.windows)
        binning = None
        if any(s.binning is not None for s in self.windows):
            binning = BinningBound.mixture([s.binning for s in self.windows])
        return Samples.from_arrays(values, weights, field="history", observations=observations, binning=binning)


def as_history(data: History | Samples) -> History:
    """Accept either a :class:`History` or a single :class:`Samples` window."""
    return data if isinstance(data, History) else History.of(data)


def weighted_quantile(values: FloatArray, weights: FloatArray, q: float) -> float:
    """The lower weighted ``q``-quantile: the smallest value v with P(X <= v) >= q (ties resolved downward).

    ``q`` in [0, 1]; ``q = 0`` gives the smallest positive-weight value. For ``q = cp / (cp + cw)`` this is the
    minimiser of E[Q(y, X)] (the newsvendor critical fractile); any value up to the upper quantile is also optimal,
    and the lower one reserves less memory.
    """
    _check_q(q)
    if np.all(weights == weights[0]):
        return _uniform_quantile(values, q)
    order = np.argsort(values, kind="stable")
    sv, sw = values[order], weights[order]
    return sorted_weighted_quantile(sv, sw, q)


def _check_q(q: float) -> None:
    if not 0.0 <= q <= 1.0:
        raise InputError("q", f"quantile level must be in [0, 1], got {q}")


def uniform_quantile_index(n: int, q: float) -> int:
    """Equal weights: the sorted index k of the lower ``q``-quantile, the smallest k with (k + 1) / n >= q.
    The slack absorbs round-off in q * n so exact fractions (q = 0.9, n = 10) land on the lower value."""
    return min(max(0, math.ceil(q * n - _UNIFORM_SLACK) - 1), n - 1)


def _uniform_quantile(values: FloatArray, q: float) -> float:
    """Equal weights: the lower ``q``-quantile by O(N) selection."""
    k = uniform_quantile_index(int(values.size), q)
    return float(np.partition(values, k)[k])


def sorted_weighted_quantile(sorted_values: FloatArray, sorted_weights: FloatArray, q: float) -> float:
    """:func:`weighted_quantile` on values already sorted ascending (weights normalised to sum 1)."""
    return float(sorted_values[sorted_quantile_index(sorted_weights, q)])


def sorted_quantile_index(sorted_weights: FloatArray, q: float) -> int:
    """Index (into the sorted order) of the lower weighted ``q``-quantile."""
    cum = np.cumsum(sorted_weights)
    total = float(cum[-1])
    target = q * total - _QUANTILE_TOL * total
    k = int(np.searchsorted(cum, target, side="left"))
    k = min(k, sorted_weights.size - 1)
    # Skip zero-weight entries so the quantile is always a value that carries probability.
    while k < sorted_weights.size - 1 and sorted_weights[k] <= 0:
        k += 1
    return k


def weighted_mean(values: FloatArray, weights: FloatArray) -> float:
    """Weighted mean; weights need not be normalised."""
    return float(np.dot(values, weights) / weights.sum())


def weighted_std(values: FloatArray, weights: FloatArray) -> float:
    """Weighted population standard deviation (ddof = 0, as numpy's default)."""
    mu = weighted_mean(values, weights)
    var = float(np.dot(weights, (values - mu) ** 2) / weights.sum())
    return float(np.sqrt(max(var, 0.0)))
