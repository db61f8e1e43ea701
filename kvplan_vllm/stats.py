"""kvplan's vLLM stat-logger plugin: per-class output-length histograms and request/preemption counters on vLLM's
own ``/metrics``.

vLLM loads it from the entry-point group ``vllm.stat_logger_plugins`` (declared in ``pyproject.toml``) in the
API-server process (``AsyncLLM``); nothing needs to be passed on the command line. Series (names from
:mod:`kvcore.history.series`; labels ``kvplan_class``, ``model_name``):

- ``kvplan_request_output_tokens`` histogram: output tokens of each finished request, buckets
  :func:`kvcore.history.series.kvplan_buckets` up to ``max_model_len`` (at most 10 % relative width);
- ``kvplan_requests_total`` counter: finished requests;
- ``kvplan_request_preemptions_total`` counter: preemptions, summed over finished requests.

vLLM's finished-request stats carry the request id and token counts only (no header, priority, extra args or LoRA
adapter), so here a request's class is the reservation file's prompt-length rules, else the fleet default
(:func:`kvplan_vllm.classify.class_in_api_server`). The names avoid ``vllm:``, which vLLM unregisters.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter, Histogram
from vllm.config import VllmConfig
from vllm.v1.metrics.loggers import StatLoggerBase
from vllm.v1.metrics.stats import IterationStats, SchedulerStats

from kvcore import series
from kvplan_vllm.classify import class_in_api_server
from kvplan_vllm.source import ReservationSource, logger

_LABELS = (series.KVPLAN_CLASS_LABEL, "model_name")


@dataclass(frozen=True)
class _Metrics:
    output_tokens: Histogram
    requests: Counter
    preemptions: Counter
    buckets: tuple[int, ...]


_LOCK = threading.Lock()
_SHARED: dict[str, Any] = {}


def _metrics(max_model_len: int) -> _Metrics:
    """The process's metric objects, registered once (vLLM makes one logger per engine; they share these)."""
    with _LOCK:
        if "metrics" not in _SHARED:
            buckets = tuple(series.kvplan_buckets(max_model_len))
            _SHARED["metrics"] = _Metrics(
                output_tokens=Histogram(
                    series.KVPLAN_OUTPUT_TOKENS, "Output tokens per finished request, per kvplan class.",
                    _LABELS, buckets=[float(b) for b in buckets]),
                requests=Counter(series.KVPLAN_REQUESTS, "Finished requests, per kvplan class.", _LABELS),
                preemptions=Counter(series.KVPLAN_PREEMPTIONS,
                                    "Preemptions of finished requests, per kvplan class.", _LABELS),
                buckets=buckets,
            )
        return _SHARED["metrics"]  # type: ignore[no-any-return]


def _source() -> ReservationSource:
    """The process's reservation-file reader (shared by every engine's logger)."""
    with _LOCK:
        if "source" not in _SHARED:
            source = ReservationSource()
            source.check()  # at start-up; later checks run on the source's reader thread
            source.start()
            _SHARED["source"] = source
        return _SHARED["source"]  # type: ignore[no-any-return]


class KVPlanStatLogger(StatLoggerBase):
    """Per-class series from vLLM's finished-request stats (one instance per engine, all feeding one set of
    metrics)."""

    def __init__(self, vllm_config: VllmConfig, engine_index: int = 0) -> None:
        self.engine_index = engine_index
        self.model_name = str(vllm_config.model_config.served_model_name)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        self.metrics = _metrics(self.max_model_len)
        self.source = _source()
        self._failed = False

    def record(self, scheduler_stats: SchedulerStats | None, iteration_stats: IterationStats | None,
               mm_cache_stats: Any = None, engine_idx: int = 0) -> None:
        try:
            self.source.tick()  # no file access (kvplan_vllm.source)
        except Exception:  # noqa: BLE001 - never break vLLM's output loop; keep the values in force, say so once
            if not self._failed:
                self._failed = True
                logger.exception("kvplan: stat logger error reading the reservation source")
        if iteration_stats is None or not iteration_stats.finished_requests:
            return
        res = self.source.current
        for done in iteration_stats.finished_requests:
            try:
                klass, _ = class_in_api_server(res, int(done.num_prompt_tokens))
                labels = (klass, self.model_name)
                self.metrics.output_tokens.labels(*labels).observe(int(done.num_generation_tokens))
                self.metrics.requests.labels(*labels).inc()
                self.metrics.preemptions.labels(*labels).inc(max(0, int(done.num_preemptions)))
            except Exception:  # noqa: BLE001 - a stat logger must never break vLLM's output loop; say so once
                if not self._failed:
                    self._failed = True
                    logger.exception("kvplan: stat logger error on request %r; skipping such requests",
                                     done.request_id)

    def log_engine_initialized(self) -> None:
        if self.engine_index == 0:
            logger.info("kvplan: stat logger on for model %s: %s (%d buckets up to %d tokens), %s, %s; %s",
                        self.model_name, series.KVPLAN_OUTPUT_TOKENS, len(self.metrics.buckets),
                        self.metrics.buckets[-1], series.KVPLAN_REQUESTS, series.KVPLAN_PREEMPTIONS,
                        self.source.current.describe())
