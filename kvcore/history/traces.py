"""Output-length inputs: the shared trace CSVs, one-column sample files and Prometheus histogram buckets.

- :func:`load_trace` reads ``arrival_s,input_tokens,output_tokens`` (``arrival_s`` may be empty on every line, as
  in ShareGPT, which has no timestamps) into a frozen :class:`Trace` of numpy arrays.
- :func:`load_lengths` reads one column of lengths for the CLI: a trace CSV (column by name) or a file with one
  number per line (an optional non-numeric header line is skipped).
- :func:`histogram_to_samples` turns cumulative histogram buckets (``le`` bounds and counts, e.g. ``increase()``
  of ``vllm:request_generation_tokens_bucket`` per ``le``) into weighted :class:`~kvcore.history.samples.Samples`.

Every error is an :class:`~kvcore.errors.InputError` whose field names the file and line (and column).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kvcore.bounds import MAX_SECONDS, MAX_TOKENS
from kvcore.history.csvstream import CHUNK, FloatColumn, csv_rows
from kvcore.history.buckets import buckets_from_cumulative
from kvcore.history.bucket_model import DEFAULT_MODEL, bucket_samples, check_model
from kvcore.errors import InputError
from kvcore.history.samples import FloatArray, Samples
from kvcore.history.series import vllm_buckets

TRACE_COLUMNS: tuple[str, ...] = ("arrival_s", "input_tokens", "output_tokens")


@dataclass(frozen=True, eq=False)
class Trace:
    """A request trace. ``arrival_s``: seconds from the first request, nondecreasing, or None when the trace has
    no timestamps; ``input_tokens`` / ``output_tokens``: tokens per request (float64, finite, >= 0)."""

    arrival_s: FloatArray | None
    input_tokens: FloatArray
    output_tokens: FloatArray
    source: str = ""

    @property
    def has_timestamps(self) -> bool:
        return self.arrival_s is not None

    def __len__(self) -> int:
        return int(self.output_tokens.size)

    def output_samples(self) -> Samples:
        """The output lengths as uniformly weighted samples."""
        return Samples.from_arrays(self.output_tokens, field=f"{self.source}.output_tokens")


def _number(text: str, where: str, *, what: str, top: float = MAX_TOKENS) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(where, f"{what} {text.strip()!r} is not a number") from None
    if not math.isfinite(value):
        raise InputError(where, f"{what} is not finite ({text.strip()})")
    if value < 0:
        raise InputError(where, f"{what} is negative ({value:g})")
    if value > top:
        raise InputError(where, f"{what} {value:g} is above {top:g}, the largest accepted (kvcore.bounds)")
    return value


def _cell(text: str, name: str, lineno: int, column: str, what: str, top: float = MAX_TOKENS) -> float:
    """:func:`_number` for one CSV cell; the field (``file line N column``) is built only for an error."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if 0 <= value <= top:
        return value
    return _number(text, f"{name} line {lineno} {column}", what=what, top=top)


def _blank(row: list[str]) -> bool:
    return not row or not "".join(row).strip()


def _header(rows: Iterator[tuple[int, list[str]]], name: str) -> list[str]:
    """The first row of ``rows`` (stripped), or an error when the file is empty or starts with a blank line."""
    first = next(rows, None)
    if first is None or not any(cell.strip() for cell in first[1]):
        raise InputError(name, "empty file (no header, no samples)")
    header = [h.strip() for h in first[1]]
    seen: set[str] = set()
    for column in header:
        if column in seen:
            raise InputError(f"{name} line 1", f"column {column!r} appears twice in the header; which one is meant "
                                               "is ambiguous")
        seen.add(column)
    return header


def _width(row: list[str], width: int, name: str, lineno: int) -> None:
    """A row must have as many fields as the header: fewer means a cut line, more a stray delimiter or a shifted
    row (either way the columns would be read from the wrong place)."""
    if len(row) != width:
        raise InputError(f"{name} line {lineno}", f"has {len(row)} fields, the header has {width}")


def load_trace(path: str | Path) -> Trace:
    """Load a trace CSV with header ``arrival_s,input_tokens,output_tokens`` (any extra columns are ignored).

    Streams the file (:mod:`kvcore.history.csvstream`): memory is the three float64 arrays kept, not the file's text."""
    p = Path(path)
    rows = csv_rows(p)
    header = _header(rows, p.name)
    missing = [c for c in TRACE_COLUMNS if c not in header]
    if missing:
        raise InputError(f"{p.name} line 1", f"missing column(s) {', '.join(missing)}; header is {','.join(header)}")
    ia, ii, io = (header.index(c) for c in TRACE_COLUMNS)
    name, width = p.name, len(header)
    arrivals, inputs, outputs = FloatColumn(), FloatColumn(), FloatColumn()
    stamped: bool | None = None  # whether the first request has arrival_s; every other one must agree
    mixed_line: int | None = None
    backwards: tuple[int, float, float] | None = None  # (line, arrival, previous arrival), the first time it falls
    previous = -math.inf
    for lineno, row in rows:
        if _blank(row):
            continue
        if len(row) != width:
            _width(row, width, name, lineno)
        a = row[ia].strip()
        arrival = None if a == "" else _cell(a, name, lineno, "arrival_s", "arrival time", MAX_SECONDS)
        inputs.append(_cell(row[ii], name, lineno, "input_tokens", "input length"))
        outputs.append(_cell(row[io], name, lineno, "output_tokens", "output length"))
        if stamped is None:
            stamped = arrival is not None
        if (arrival is not None) != stamped:
            mixed_line = lineno if mixed_line is None else mixed_line
        elif arrival is not None and mixed_line is None:
            arrivals.append(arrival)
            if arrival < previous and backwards is None:
                backwards = (lineno, arrival, previous)
            previous = arrival
        if len(outputs.pending) >= CHUNK:
            for column in (arrivals, inputs, outputs):
                column.flush()
    if not len(outputs):
        raise InputError(p.name, "empty file (a header but no requests)")
    if mixed_line is not None:
        raise InputError(f"{p.name} line {mixed_line} arrival_s",
                         "arrival_s is given on some lines and empty on others; give it everywhere or nowhere")
    if backwards is not None:
        line, now, before = backwards
        raise InputError(f"{p.name} line {line} arrival_s",
                         f"timestamps go backwards ({now:g} s after {before:g} s); the trace must be time-ordered")
    arrival_s = arrivals.array() if stamped else None
    inp, out = inputs.array(), outputs.array()
    for arr in (inp, out) + ((arrival_s,) if arrival_s is not None else ()):
        arr.setflags(write=False)
    return Trace(arrival_s=arrival_s, input_tokens=inp, output_tokens=out, source=p.name)


def load_lengths(path: str | Path, column: str = "output_tokens", *, what: str = "length",
                 top: float = MAX_TOKENS) -> FloatArray:
    """Non-negative numbers from a trace CSV (``column`` by header name) or a one-number-per-line file (header
    optional), each at most ``top`` (default :data:`kvcore.bounds.MAX_TOKENS`). ``what`` names the quantity in
    error messages (e.g. "length", "weight"). Streams the file: memory is the array returned, not the file's text."""
    p = Path(path)
    rows = csv_rows(p)
    header = _header(rows, p.name)
    values = FloatColumn()
    if len(header) > 1:
        if column not in header:
            raise InputError(f"{p.name} line 1", f"missing column {column!r}; header is {','.join(header)}",
                             hint="choose one with --column")
        col, name = header.index(column), column
    else:
        col = 0
        try:
            float(header[0])
        except ValueError:
            name = header[0]
        else:
            name = "value"
            values.append(_number(header[0], f"{p.name} line 1 {name}", what=what, top=top))
    width = len(header)
    for lineno, row in rows:
        if _blank(row):
            continue
        if col >= len(row):
            raise InputError(f"{p.name} line {lineno}", f"has no {name} field")
        if len(row) != width:
            _width(row, width, p.name, lineno)
        values.append(_cell(row[col], p.name, lineno, name, what, top))
        if len(values.pending) >= CHUNK:
            values.flush()
    if not len(values):
        raise InputError(p.name, "empty file (no samples)")
    return values.array()


def histogram_to_samples(
    bounds: Sequence[float | str], cumulative_counts: Sequence[float] | npt.ArrayLike, *, max_model_len: float,
    model: str = DEFAULT_MODEL,
) -> Samples:
    """Weighted samples from cumulative histogram buckets.

    Args:
        bounds: the ``le`` bounds, in any order (each paired with the count at the same position), as numbers or
            strings (``"+Inf"`` included or not).
        cumulative_counts: the count at or below each bound (e.g. ``increase(..._bucket[w])`` per ``le``), same
            order as ``bounds``.
        max_model_len: the longest possible output, tokens; closes the ``+Inf`` bucket and caps larger bounds.
        model: the within-bucket model (:data:`kvcore.history.bucket_model.MODELS`); default ``log-spline``.

    Steps (:func:`kvcore.history.buckets.buckets_from_cumulative`): sort the (bound, count) pairs by bound; refuse counts
    that decrease as ``le`` grows (beyond floating-point noise: counts listed in another order than their bounds
    would otherwise pile every request into one bucket), then difference them into per-bucket counts. Without a
    ``+Inf`` bucket, requests above the largest bound are unknown and not counted.

    Placement (:mod:`kvcore.history.bucket_model`): each bucket's requests are spread inside it by the model, a monotone
    spline of the cumulative counts in log(1 + length) by default, chosen by measurement (docs/model.md,
    "Histogram buckets"); each bucket keeps its count exactly. (Before, each bucket became one sample at
    its upper bound, which cost 1.3x the raw-sample reserve through vLLM's 1-2-5 buckets.)

    The result carries ``observations`` = the number of requests counted, so the radius rule's sampling error
    scales with the requests seen, not with the samples, and ``binning``, the largest 1-Wasserstein distance
    between the samples and any requests with these counts (:mod:`kvcore.history.bucket_bound`).
    """
    buckets = buckets_from_cumulative(bounds, cumulative_counts, max_model_len=max_model_len)
    return bucket_samples(buckets, check_model(model))


#: vLLM's 1-2-5 layout for token histograms; the one definition is :func:`kvcore.history.series.vllm_buckets`.
build_1_2_5_buckets = vllm_buckets
