"""Shared output helpers for the CLI: ``--json`` objects, readable tables and a stderr progress bar."""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TextIO, TypeVar

T = TypeVar("T")


def _clean(value: Any) -> Any:
    """Make a value JSON-safe: non-finite floats become null, numpy scalars become Python ones."""
    if hasattr(value, "item") and callable(value.item) and not isinstance(value, (list, dict, str)):
        try:
            value = value.item()
        except (TypeError, ValueError):
            pass
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def print_json(obj: Any, stream: TextIO | None = None) -> None:
    """Print one JSON object on one line of ``stream`` (default: the current ``sys.stdout``)."""
    stream = stream if stream is not None else sys.stdout
    stream.write(json.dumps(_clean(obj), sort_keys=False) + "\n")


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A plain fixed-width table; floats are shown with 4 significant digits."""

    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    body = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in body]
    return "\n".join(lines)


def progress(items: Sequence[T], label: str, stream: TextIO | None = None, enabled: bool = True) -> Iterator[T]:
    """Yield ``items`` while drawing a progress bar with elapsed time and ETA on ``stream`` (default stderr)."""
    stream = stream if stream is not None else sys.stderr
    total = len(items)
    start = time.monotonic()
    width = 28
    for i, item in enumerate(items):
        if enabled:
            _draw(stream, label, i, total, start, width)
        yield item
    if enabled:
        _draw(stream, label, total, total, start, width)
        stream.write("\n")
        stream.flush()


def _draw(stream: TextIO, label: str, done: int, total: int, start: float, width: int) -> None:
    frac = done / total if total else 1.0
    elapsed = time.monotonic() - start
    eta = elapsed / done * (total - done) if done else float("nan")
    bar = "#" * int(frac * width) + "." * (width - int(frac * width))
    eta_s = f"{eta:5.0f}s" if math.isfinite(eta) else "    ?"
    stream.write(f"\r{label} [{bar}] {done}/{total} {elapsed:5.0f}s eta {eta_s}")
    stream.flush()
