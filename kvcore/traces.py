"""Output-length inputs: the shared trace CSVs, one-column sample files and Prometheus histogram buckets.

- :func:`load_trace` reads ``arrival_s,input_tokens,output_tokens`` (``arrival_s`` may be empty on every line, as
  in ShareGPT, which has no timestamps) into a frozen :class:`Trace` of numpy arrays.
- :func:`load_lengths` reads one column of lengths for the CLI: a trace CSV (column by name) or a file with one
  number per line (an optional non-numeric header line is skipped).
- :func:`histogram_to_samples` turns cumulative histogram buckets (``le`` bounds and counts, e.g. ``increase()``
  of ``vllm:request_generation_tokens_bucket`` per ``le``) into weighted :class:`~kvcore.samples.Samples`.

Every error is an :class:`~kvcore.errors.InputError` whose field names the file and line (and column).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kvcore.binned import buckets_from_cumulative
from kvcore.binned_model import DEFAULT_MODEL, bucket_samples, check_model
from kvcore.errors import InputError
from kvcore.samples import FloatArray, Samples
from kvcore.series import vllm_buckets

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


def _number(text: str, where: str, *, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(where, f"{what} {text.strip()!r} is not a number") from None
    if not math.isfinite(value):
        raise InputError(where, f"{what} is not finite ({text.strip()})")
    if value < 0:
        raise InputError(where, f"{what} is negative ({value:g})")
    return value


def _read_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    text = path.read_text(encoding="utf-8")
    rows = [r for r in csv.reader(text.splitlines())]
    if not rows or not any(cell.strip() for cell in rows[0]):
        raise InputError(path.name, "empty file (no header, no samples)")
    return [h.strip() for h in rows[0]], rows[1:]


def load_trace(path: str | Path) -> Trace:
    """Load a trace CSV with header ``arrival_s,input_tokens,output_tokens`` (any extra columns are ignored)."""
    p = Path(path)
    header, rows = _read_rows(p)
    missing = [c for c in TRACE_COLUMNS if c not in header]
    if missing:
        raise InputError(f"{p.name} line 1", f"missing column(s) {', '.join(missing)}; header is {','.join(header)}")
    idx = {c: header.index(c) for c in TRACE_COLUMNS}
    arrivals: list[float | None] = []
    inputs: list[float] = []
    outputs: list[float] = []
    for lineno, row in enumerate(rows, start=2):
        if not row or not any(cell.strip() for cell in row):
            continue
        if len(row) < len(header):
            raise InputError(f"{p.name} line {lineno}", f"has {len(row)} fields, the header has {len(header)}")
        where = f"{p.name} line {lineno}"
        a = row[idx["arrival_s"]].strip()
        arrivals.append(None if a == "" else _number(a, f"{where} arrival_s", what="arrival time"))
        inputs.append(_number(row[idx["input_tokens"]], f"{where} input_tokens", what="input length"))
        outputs.append(_number(row[idx["output_tokens"]], f"{where} output_tokens", what="output length"))
    if not outputs:
        raise InputError(p.name, "empty file (a header but no requests)")
    arrival: FloatArray | None = None
    present = [a is not None for a in arrivals]
    if all(present):
        arrival = np.array(arrivals, dtype=np.float64)
        back = np.flatnonzero(np.diff(arrival) < 0)
        if back.size:
            i = int(back[0]) + 1
            raise InputError(
                f"{p.name} line {_line_of(rows, i)} arrival_s",
                f"timestamps go backwards ({arrival[i]:g} s after {arrival[i - 1]:g} s); the trace must be time-ordered",
            )
    elif any(present):
        i = present.index(False) if present[0] else present.index(True)
        raise InputError(
            f"{p.name} line {_line_of(rows, i)} arrival_s",
            "arrival_s is given on some lines and empty on others; give it everywhere or nowhere",
        )
    inp = np.array(inputs, dtype=np.float64)
    out = np.array(outputs, dtype=np.float64)
    for arr in (inp, out) + ((arrival,) if arrival is not None else ()):
        arr.setflags(write=False)
    return Trace(arrival_s=arrival, input_tokens=inp, output_tokens=out, source=p.name)


def _line_of(rows: list[list[str]], k: int) -> int:
    """File line number (1-based, header = 1) of the k-th non-blank data row."""
    seen = -1
    for lineno, row in enumerate(rows, start=2):
        if row and any(cell.strip() for cell in row):
            seen += 1
            if seen == k:
                return lineno
    return len(rows) + 1


def load_lengths(path: str | Path, column: str = "output_tokens", *, what: str = "length") -> FloatArray:
    """Non-negative numbers from a trace CSV (``column`` by header name) or a one-number-per-line file (header
    optional). ``what`` names the quantity in error messages (e.g. "length", "weight")."""
    p = Path(path)
    header, rows = _read_rows(p)
    if len(header) > 1:
        if column not in header:
            raise InputError(f"{p.name} line 1", f"missing column {column!r}; header is {','.join(header)}",
                             hint="choose one with --column")
        col = header.index(column)
        data = rows
        first_line = 2
        name = column
    else:
        try:
            float(header[0])
            data, first_line = [header] + rows, 1
        except ValueError:
            data, first_line = rows, 2
        col, name = 0, header[0] if first_line == 2 else "value"
    values: list[float] = []
    for lineno, row in enumerate(data, start=first_line):
        if not row or not any(cell.strip() for cell in row):
            continue
        if col >= len(row):
            raise InputError(f"{p.name} line {lineno}", f"has no {name} field")
        values.append(_number(row[col], f"{p.name} line {lineno} {name}", what=what))
    if not values:
        raise InputError(p.name, "empty file (no samples)")
    return np.array(values, dtype=np.float64)


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
        model: the within-bucket model (:data:`kvcore.binned_model.MODELS`); default ``log-spline``.

    Steps (:func:`kvcore.binned.buckets_from_cumulative`): sort the (bound, count) pairs by bound; refuse counts
    that decrease as ``le`` grows (beyond floating-point noise: counts listed in another order than their bounds
    would otherwise pile every request into one bucket), then difference them into per-bucket counts. Without a
    ``+Inf`` bucket, requests above the largest bound are unknown and not counted.

    Placement (:mod:`kvcore.binned_model`): each bucket's requests are spread inside it by the model, a monotone
    spline of the cumulative counts in log(1 + length) by default, chosen by measurement (docs/model.md,
    "Histogram buckets"); each bucket keeps its count exactly. (Until issue 14 each bucket became one sample at
    its upper bound, which cost 1.3x the raw-sample reserve through vLLM's 1-2-5 buckets.)

    The result carries ``observations`` = the number of requests counted, so the radius rule's sampling error
    scales with the requests seen, not with the samples, and ``binning``, the largest 1-Wasserstein distance
    between the samples and any requests with these counts (:mod:`kvcore.binned_bound`).
    """
    buckets = buckets_from_cumulative(bounds, cumulative_counts, max_model_len=max_model_len)
    return bucket_samples(buckets, check_model(model))


#: vLLM's 1-2-5 layout for token histograms; the one definition is :func:`kvcore.series.vllm_buckets`.
build_1_2_5_buckets = vllm_buckets
