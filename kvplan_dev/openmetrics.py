"""Trace CSV -> vLLM-style cumulative histogram samples, written as OpenMetrics text for ``promtool`` backfill.

Pure functions, no I/O except :func:`read_trace` and :func:`write_openmetrics`. The model of what vLLM exports:

- metric ``vllm:request_generation_tokens`` (a histogram), labels ``model_name`` (and ``engine`` in vLLM v1);
- buckets ``build_1_2_5_buckets(max_model_len)`` = 1, 2, 5, 10, 20, 50, ... <= max_model_len, then ``+Inf``;
- an observation ``v`` counts in every bucket with ``v <= le``; ``_count`` counts all, ``_sum`` adds ``v``;
- the counters are cumulative since process start and drop to 0 when the server restarts (a counter reset).

Time mapping: trace time ``arrival_s`` (seconds from the first request) is divided by ``compression`` and placed
on a window that ends at ``end_unix_s``; a scrape happens every ``step_s`` seconds from ``end - duration`` to
``end``. A scrape at wall time ``t`` reports the requests that arrived in ``(last_reset, t]`` (or ``[start, t]``
before any reset). Arrivals that fall outside the window are dropped and counted in ``SeriesStats.dropped``.
"""

from __future__ import annotations

import csv
import math
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence, TextIO

from kvcore import build_1_2_5_buckets  # re-exported: the layout lives in kvcore

VLLM_COLON = "vllm:request_generation_tokens"
"""The metric name vLLM registers (``prometheus_client`` < 0.23 exposes it unchanged)."""
VLLM_UNDERSCORE = "vllm_request_generation_tokens"
"""The escaped variant: newer ``prometheus_client`` / UTF-8 escaping may store ``vllm:`` as ``vllm_``."""


def format_le(bound: float) -> str:
    """The ``le`` label value as ``prometheus_client`` writes it: ``1.0``, ``5000.0``, ``+Inf``."""
    if math.isinf(bound):
        return "+Inf"
    return repr(float(bound))


@dataclass(frozen=True)
class TraceRow:
    """One request of a trace: arrival (seconds from the first request) and token counts."""

    arrival_s: float
    input_tokens: int
    output_tokens: int


def read_trace(path: Path) -> list[TraceRow]:
    """Read a ``arrival_s,input_tokens,output_tokens`` CSV; an error names the file, row and field."""
    rows: list[TraceRow] = []
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = {"arrival_s", "input_tokens", "output_tokens"} - set(reader.fieldnames or [])
        if missing:
            raise ValueError(f"{path}: header lacks {sorted(missing)}")
        for number, raw in enumerate(reader, start=2):
            try:
                rows.append(TraceRow(float(raw["arrival_s"]), int(raw["input_tokens"]), int(raw["output_tokens"])))
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: arrival_s/input_tokens/output_tokens: {exc}") from exc
    return rows


@dataclass(frozen=True)
class Window:
    """Where the history lies on the wall clock. All times are Unix seconds."""

    end_unix_s: float
    """Last scrape time; keep it a minute or more before "now" so Prometheus serves it without look-ahead."""
    duration_s: float
    """Length of the history (6 h = 21600 s for the tests)."""
    step_s: float = 15.0
    """Scrape interval in seconds; 15 s is Prometheus' usual default and well inside its 5 min lookback."""

    def __post_init__(self) -> None:
        if not self.duration_s > 0:
            raise ValueError(f"duration_s: must be > 0, got {self.duration_s}")
        if not self.step_s > 0:
            raise ValueError(f"step_s: must be > 0, got {self.step_s}")

    @property
    def start_unix_s(self) -> float:
        """First scrape time (Unix seconds)."""
        return self.end_unix_s - self.duration_s

    def scrape_times(self) -> list[float]:
        """Every scrape time from start to end inclusive (Unix seconds, millisecond-rounded)."""
        count = int(math.floor(self.duration_s / self.step_s + 1e-9))
        return [round(self.start_unix_s + k * self.step_s, 3) for k in range(count + 1)]


@dataclass(frozen=True)
class HistogramSeries:
    """One labelled histogram series built from a trace."""

    labels: dict[str, str]
    """Series labels, e.g. ``{"model_name": "llama", "engine": "0"}``; ``le`` is added per bucket."""
    output_tokens: Sequence[int]
    """Observed values (generated tokens per request), one per arrival."""
    arrival_s: Sequence[float]
    """Trace arrival times in seconds from the first request, same length as ``output_tokens``."""
    compression: float = 1.0
    """Trace seconds per wall second: 6.0 squeezes 6 h of trace into 1 h; 1/6 stretches 1 h over 6 h."""
    offset_s: float = 0.0
    """Wall seconds after the window start at which trace time 0 lands."""
    reset_at_s: tuple[float, ...] = ()
    """Wall offsets (seconds after the window start) at which the server restarts and counters drop to 0."""
    buckets: tuple[float, ...] = tuple(build_1_2_5_buckets(8192))
    """Finite bucket bounds in tokens; ``+Inf`` is always added. Default: vLLM's for max_model_len 8192."""
    metric: str = VLLM_COLON
    """Histogram family name, without ``_bucket``/``_count``/``_sum``."""

    def __post_init__(self) -> None:
        if len(self.output_tokens) != len(self.arrival_s):
            raise ValueError(
                f"output_tokens/arrival_s: lengths differ ({len(self.output_tokens)} vs {len(self.arrival_s)})"
            )
        if not self.compression > 0:
            raise ValueError(f"compression: must be > 0, got {self.compression}")
        if list(self.buckets) != sorted(set(self.buckets)) or any(math.isinf(b) for b in self.buckets):
            raise ValueError(f"buckets: must be finite, strictly increasing, got {self.buckets}")
        if "le" in self.labels:
            raise ValueError("labels.le: reserved for the bucket bound")


@dataclass
class SeriesStats:
    """What a series turned into: kept and dropped observations, samples written."""

    kept: int = 0
    dropped: int = 0
    samples: int = 0
    last_values: dict[str, float] = field(default_factory=dict)
    """Final ``le`` -> cumulative bucket count, plus ``_count`` and ``_sum``, at the last scrape."""


def _events(series: HistogramSeries, window: Window) -> tuple[list[float], list[int], int]:
    """Wall-clock arrival times (sorted) inside the window, their values, and how many fell outside."""
    pairs: list[tuple[float, int]] = []
    dropped = 0
    for arrival, value in zip(series.arrival_s, series.output_tokens):
        wall = window.start_unix_s + series.offset_s + float(arrival) / series.compression
        if window.start_unix_s <= wall <= window.end_unix_s:
            pairs.append((wall, int(value)))
        else:
            dropped += 1
    pairs.sort()
    return [p[0] for p in pairs], [p[1] for p in pairs], dropped


def histogram_lines(series: HistogramSeries, window: Window, stats: SeriesStats | None = None) -> Iterable[str]:
    """OpenMetrics sample lines (no ``# TYPE``) of one series, scrape by scrape, in increasing time."""
    times, values, dropped = _events(series, window)
    bounds = [*series.buckets, math.inf]
    resets = sorted(window.start_unix_s + r for r in series.reset_at_s)
    label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(series.labels.items()))
    sep = "," if label_text else ""
    counts = [0] * len(bounds)
    total = 0.0
    seen = 0
    next_reset = 0
    written = 0
    for t in window.scrape_times():
        while next_reset < len(resets) and resets[next_reset] <= t:
            # The restart happens at resets[next_reset]: requests up to it were counted by the old process
            # (lost with it), the new process starts at zero.
            cutoff = bisect_right(times, resets[next_reset])
            seen = max(seen, cutoff)
            counts = [0] * len(bounds)
            total = 0.0
            next_reset += 1
        upto = bisect_right(times, t)
        for value in values[seen:upto]:
            for i, bound in enumerate(bounds):
                if value <= bound:
                    counts[i] += 1
            total += value
        seen = max(seen, upto)
        ts = f"{t:.3f}"
        for bound, count in zip(bounds, counts):
            yield f'{series.metric}_bucket{{{label_text}{sep}le="{format_le(bound)}"}} {count} {ts}'
        yield f"{series.metric}_count{{{label_text}}} {counts[-1]} {ts}"
        yield f"{series.metric}_sum{{{label_text}}} {total:.1f} {ts}"
        written += len(bounds) + 2
    if stats is not None:
        stats.kept = len(times)
        stats.dropped = dropped
        stats.samples = written
        stats.last_values = {format_le(b): float(c) for b, c in zip(bounds, counts)}
        stats.last_values["_count"] = float(counts[-1])
        stats.last_values["_sum"] = total


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@dataclass(frozen=True)
class ScalarSeries:
    """A gauge (``value`` at every scrape) or a counter (``value + rate_per_s x seconds since the window start``;
    the sample is written as ``<metric>_total``), e.g. ``vllm:cache_config_info`` (a gauge at 1 whose labels carry
    the configuration) or ``vllm:num_preemptions``."""

    metric: str
    labels: dict[str, str]
    kind: str = "gauge"
    value: float = 1.0
    rate_per_s: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("gauge", "counter"):
            raise ValueError(f"kind: must be gauge or counter, got {self.kind!r}")
        if self.kind == "gauge" and self.rate_per_s:
            raise ValueError("rate_per_s: only for a counter")


def scalar_lines(series: ScalarSeries, window: Window, stats: SeriesStats | None = None) -> Iterable[str]:
    """OpenMetrics sample lines of one gauge or counter, scrape by scrape."""
    label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(series.labels.items()))
    name = series.metric + ("_total" if series.kind == "counter" else "")
    written = 0
    value = series.value
    for t in window.scrape_times():
        value = series.value + series.rate_per_s * (t - window.start_unix_s)
        yield f"{name}{{{label_text}}} {value:.6g} {t:.3f}"
        written += 1
    if stats is not None:
        stats.samples = written
        stats.last_values = {name: value}


@dataclass(frozen=True)
class CountedHistogramSeries:
    """A histogram series given by its counts at each scrape of the window instead of one value per request:
    ``counts[k]`` holds the cumulative count of every finite bucket and then ``+Inf`` at scrape ``k``
    (:meth:`Window.scrape_times`), ``sums[k]`` the running ``_sum``. For fleets whose traffic is millions of
    requests per window (:mod:`kvplan_dev.fleet` draws the counts from rates); the lines are those of
    :class:`HistogramSeries`."""

    labels: dict[str, str]
    buckets: tuple[float, ...]
    counts: Sequence[Sequence[int]]
    sums: Sequence[float]
    metric: str = VLLM_COLON

    def __post_init__(self) -> None:
        if len(self.counts) != len(self.sums):
            raise ValueError(f"counts/sums: lengths differ ({len(self.counts)} vs {len(self.sums)})")
        if any(len(row) != len(self.buckets) + 1 for row in self.counts):
            raise ValueError(f"counts: every row needs {len(self.buckets) + 1} values (the buckets and +Inf)")
        if "le" in self.labels:
            raise ValueError("labels.le: reserved for the bucket bound")


def counted_lines(series: CountedHistogramSeries, window: Window, stats: SeriesStats | None = None
                  ) -> Iterable[str]:
    """OpenMetrics sample lines of a :class:`CountedHistogramSeries`, scrape by scrape."""
    times = window.scrape_times()
    if len(times) != len(series.counts):
        raise ValueError(f"counts: {len(series.counts)} rows for {len(times)} scrapes of the window")
    label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(series.labels.items()))
    sep = "," if label_text else ""
    heads = [f'{series.metric}_bucket{{{label_text}{sep}le="{format_le(b)}"}} '
             for b in [*series.buckets, math.inf]]
    count_head, sum_head = f"{series.metric}_count{{{label_text}}} ", f"{series.metric}_sum{{{label_text}}} "
    for t, row, total in zip(times, series.counts, series.sums):
        ts = f" {t:.3f}"
        for head, count in zip(heads, row):
            yield f"{head}{int(count)}{ts}"
        yield f"{count_head}{int(row[-1])}{ts}"
        yield f"{sum_head}{total:.1f}{ts}"
    if stats is not None:
        stats.kept = int(series.counts[-1][-1]) if series.counts else 0
        stats.samples = len(times) * (len(heads) + 2)


AnySeries = HistogramSeries | ScalarSeries | CountedHistogramSeries


def write_openmetrics(out: TextIO, series: Sequence[AnySeries], window: Window) -> list[SeriesStats]:
    """Write every series as OpenMetrics (one ``# TYPE`` per family, ``# EOF`` last); return per-series stats."""
    stats = [SeriesStats() for _ in series]
    families: dict[str, list[int]] = {}
    for index, item in enumerate(series):
        families.setdefault(item.metric, []).append(index)
    for metric, indexes in families.items():
        first = series[indexes[0]]
        kind = first.kind if isinstance(first, ScalarSeries) else "histogram"
        if any((s.kind if isinstance(s, ScalarSeries) else "histogram") != kind for s in (series[i] for i in indexes)):
            raise ValueError(f"{metric}: one family cannot mix histogram, gauge and counter series")
        out.write(f"# HELP {metric} Backfilled by kvplan_dev (see kvplan_dev.openmetrics).\n")
        out.write(f"# TYPE {metric} {kind}\n")
        for index in indexes:
            item = series[index]
            lines = (scalar_lines(item, window, stats[index]) if isinstance(item, ScalarSeries)
                     else counted_lines(item, window, stats[index]) if isinstance(item, CountedHistogramSeries)
                     else histogram_lines(item, window, stats[index]))
            for line in lines:
                out.write(line + "\n")
    out.write("# EOF\n")
    return stats
