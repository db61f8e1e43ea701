"""Within-bucket models: where inside each histogram bucket its requests are placed, and the samples that result.

A histogram tells how many requests fell in each bucket ``(lower, upper]`` (:class:`~kvcore.history.buckets.Buckets`), not
where inside it. A model fills that in with a *shape*: a nondecreasing function G of the length x (tokens), used
inside bucket b only through ``(G(x) - G(lower_b)) / (G(upper_b) - G(lower_b))``, the fraction of the bucket's
requests at or below x. Every model therefore keeps each bucket's count exactly; they differ only inside buckets.

- ``upper``: every request at its bucket's upper bound (kvplan's first rule; conservative, 1.3x the cost);
- ``linear``: uniform inside each bucket (G(x) = x);
- ``log-linear``: uniform in log(1 + x) inside each bucket (density ~ 1 / (1 + x));
- ``spline``: a monotone cubic (PCHIP, Fritsch-Carlson) through the cumulative counts at the bucket edges, in x;
- ``log-spline`` (the default): the same spline in log(1 + x).

The default was chosen by measurement on the shared traces (docs/results.md, section 6; docs/model.md, "Histogram
buckets"), for a reason that holds beyond them: bucket layouts in use (vLLM's 1-2-5, powers of 4, kvplan's fine
layout) are geometric, so edges are evenly spaced in log(1 + x), where a smooth interpolant of the cumulative counts
is least distorted; PCHIP stays monotone (so it is a CDF), reproduces every cumulative count, is flat across empty
buckets and lets the density inside a bucket follow its neighbours' trend instead of assuming it flat.

Samples: each bucket is cut into at most :data:`MAX_SLICES` slices whose edges are whole tokens when the bucket's
edges are (output lengths are whole tokens, so a bucket up to MAX_SLICES tokens wide is represented token by
token, exactly), and each slice's share of the bucket goes to one sample at the slice's upper edge. The open
``+Inf`` bucket is closed at ``max_model_len`` (:mod:`kvcore.history.buckets`) and gets the same treatment: the spline
continues the trend of the last finite buckets towards ``max_model_len``; :mod:`kvcore.history.bucket_bound` bounds what
that may hide.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Literal, get_args

import numpy as np
from scipy.interpolate import PchipInterpolator

from kvcore.history.buckets import Buckets
from kvcore.history.bucket_bound import binning_bound
from kvcore.errors import InputError
from kvcore.history.samples import FloatArray, Samples

Model = Literal["log-spline", "spline", "log-linear", "linear", "upper"]
MODELS: tuple[Model, ...] = get_args(Model)
DEFAULT_MODEL: Model = "log-spline"
"""The within-bucket model histogram buckets are read with unless told otherwise (module docstring)."""

MAX_SLICES = 128
"""Most samples one bucket becomes. A slice's sample sits at its upper edge, so quantiles of the samples are at most
one slice (a bucket's width / 128; under 0.8 % of it) above the model's; buckets up to 128 tokens wide are exact."""

Shape = Callable[[FloatArray], FloatArray]
"""A nondecreasing function of the length (tokens); only its increments inside each bucket matter."""


def _log1p(x: FloatArray) -> FloatArray:
    return np.asarray(np.log1p(x), dtype=np.float64)


def _identity(x: FloatArray) -> FloatArray:
    return np.asarray(x, dtype=np.float64)


def check_model(model: str, field: str = "model") -> Model:
    """``model`` if it names a within-bucket model; :class:`InputError` listing them otherwise."""
    for known in MODELS:
        if model == known:
            return known
    raise InputError(field, f"unknown within-bucket model {model!r}", hint="one of " + ", ".join(MODELS))


def shape(buckets: Buckets, model: Model) -> Shape:
    """The model's shape function for these buckets (module docstring). ``upper`` has none (a step at each upper
    edge is applied by :func:`slice_weights` directly)."""
    if model == "linear":
        return _identity
    if model == "log-linear":
        return _log1p
    if model in ("spline", "log-spline"):
        transform = _log1p if model == "log-spline" else _identity
        wide = buckets.widths > 0
        if not wide.any():
            return _identity
        knots = np.concatenate(([buckets.lower[wide][0]], buckets.upper[wide]))
        cum = np.concatenate(([0.0], np.cumsum(buckets.counts[wide])))
        spline = PchipInterpolator(transform(knots), cum, extrapolate=True)

        def g(x: FloatArray) -> FloatArray:
            return np.asarray(spline(transform(np.clip(x, knots[0], knots[-1]))), dtype=np.float64)

        return g
    raise InputError("model", f"no shape for within-bucket model {model!r}")


def slice_edges(lower: float, upper: float, max_slices: int = MAX_SLICES) -> FloatArray:
    """Edges of the slices one bucket ``(lower, upper]`` is cut into (tokens): every whole token when the edges are
    whole tokens and the bucket is at most ``max_slices`` wide, else ``max_slices`` equal slices (edges rounded to
    whole tokens when the bucket's are)."""
    whole = float(lower).is_integer() and float(upper).is_integer()
    if whole and upper - lower <= max_slices:
        return np.arange(lower, upper + 1.0)
    edges = np.linspace(lower, upper, max_slices + 1)
    return np.unique(np.round(edges)) if whole else edges


@lru_cache(maxsize=4096)
def _edges(lower: float, upper: float, max_slices: int) -> FloatArray:
    """:func:`slice_edges`, kept (read-only): every window of a layout has the same buckets."""
    out = slice_edges(lower, upper, max_slices)
    out.setflags(write=False)
    return out


def slice_weights(buckets: Buckets, model: Model = DEFAULT_MODEL, *, max_slices: int = MAX_SLICES,
                  shape_fn: Shape | None = None) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The model's samples: ``(values, weights, bucket)`` with values in tokens (each slice's upper edge), weights
    summing to 1 and ``bucket`` the index of the bucket each sample came from. Empty buckets give no samples; a
    bucket of zero width (a bound at or above ``max_model_len``) gives one sample at its edge. ``shape_fn``, when
    given, replaces the model's shape (e.g. a fitted distribution's CDF, as benchmarks/binning.py compares); a shape
    is pointwise, so it is evaluated once on every bucket's slice edges together (one call per window, not one per
    bucket: the operator reads 256 classes x 6 windows x 87 buckets per re-plan)."""
    model = check_model(model)
    total = buckets.total
    g = shape_fn if shape_fn is not None else (None if model == "upper" else shape(buckets, model))
    live = np.flatnonzero(buckets.counts > 0)
    share = buckets.counts[live] / total
    point = np.ones(live.size, dtype=bool) if g is None else buckets.upper[live] <= buckets.lower[live]
    edges = [_edges(float(buckets.lower[j]), float(buckets.upper[j]), max_slices) for j in live[~point]]
    values = [buckets.upper[live[point]].astype(np.float64)]
    weights = [share[point]]
    index = [live[point].astype(np.float64)]
    if edges:
        assert g is not None
        sizes = np.array([e.size for e in edges])
        starts = np.cumsum(sizes) - sizes
        cat = np.concatenate(edges)
        inner = np.ones(cat.size - 1, dtype=bool)
        inner[starts[1:] - 1] = False  # a difference across two buckets' edges
        inc = np.maximum(np.diff(g(cat))[inner], 0.0)
        seg = np.repeat(np.arange(len(edges)), sizes - 1)
        # each bucket's mass summed on its own (as numpy sums one array: the weights stay bit for bit)
        mass = np.array([part.sum() for part in np.split(inc, (starts - np.arange(len(edges)))[1:])])
        sliced = share[~point]
        spread = np.where(mass > 0, sliced / np.where(mass > 0, mass, 1.0), sliced / (sizes - 1))
        values.append(np.delete(cat, starts))
        weights.append(np.where((mass > 0)[seg], inc * spread[seg], spread[seg]))
        index.append(live[~point][seg].astype(np.float64))
    v, p, b = np.concatenate(values), np.concatenate(weights), np.concatenate(index)
    order = np.argsort(b, kind="stable")  # bucket order (each bucket is all points or all slices)
    keep = p[order] > 0
    return v[order][keep], p[order][keep], b[order][keep]


def bucket_samples(buckets: Buckets, model: Model = DEFAULT_MODEL, *, field: str = "histogram",
                   max_slices: int = MAX_SLICES, shape_fn: Shape | None = None) -> Samples:
    """Weighted samples for these buckets under ``model`` (or ``shape_fn``, see :func:`slice_weights`), carrying the number of requests counted
    (:attr:`Samples.observations`, so the radius rule's sampling error scales with requests, not samples) and the
    worst-case distance from them to those requests (:attr:`Samples.binning`, :mod:`kvcore.history.bucket_bound`)."""
    values, weights, index = slice_weights(buckets, model, max_slices=max_slices, shape_fn=shape_fn)
    bound = binning_bound(buckets, values, weights, index)
    return Samples.from_arrays(values, weights, field=field, observations=buckets.total, binning=bound)
