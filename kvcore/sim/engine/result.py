"""What a replay through the vLLM engine model measured: :class:`EngineResult`.

Definitions (times in seconds, token counts in tokens), over requests that finished unless said:

- **TTFT**: end of the step that sampled the first token minus arrival; **e2e**: end of the step that sampled the
  last one minus arrival; **queueing**: start of the first step that scheduled the request minus arrival.
- **stall**: a request's longest gap between two consecutive output tokens (0 with one token). A preempted request's
  stall includes its wait in the queue and its recompute. ``stalled_frac``: share of finished requests whose stall
  exceeds ``stall_threshold_s`` (1 s).
- **preemptions**: preemptions by recompute; **recomputed_tokens**: tokens scheduled again below a request's
  high-water mark of computed tokens, i.e. the recompute vLLM actually did after prefix-cache hits.
- **goodput** (:func:`meets_slo`, the project's one definition, used by evaluate, the rules and the benchmarks):
  finished requests with ``ttft <= ttft_slo_s``, mean time per output token after the first
  ``(e2e - ttft) / (output - 1) <= tpot_slo_s`` and ``e2e <= e2e_slo_s`` (the policy's per-class thresholds, inf
  where unset), per second of ``duration_s`` (last completion minus first arrival); ``slo_violations``: finished
  requests that miss it.
- **reservation cost**: sum over finished requests of ``cp (xi - y)^+ + cw (y - xi)^+`` with the policy's y (the
  planner's per-request term, token-slot units).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from numpy.typing import ArrayLike

from kvcore.sim.engine.jobs import EngineOutcomes
from kvcore.sim.prepare import REJECT_ADMISSION, REJECT_OVERSIZE, SERVE
from kvcore.sim.types import FloatArray, IntArray, SimPolicy, Workload

NS = 1e-9
STALL_THRESHOLD_S = 1.0
"""A gap between two tokens longer than this counts as a stall (``stalled_frac`` is the share of requests with such a gap)."""


class LatencyStats(BaseModel):
    """Summary of one latency over finished requests, seconds (None when no request finished)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    count: int
    mean: float | None
    p50: float | None
    p99: float | None
    max: float | None


def _stats(values: FloatArray) -> LatencyStats:
    if values.size == 0:
        return LatencyStats(count=0, mean=None, p50=None, p99=None, max=None)
    p50, p99 = np.percentile(values, [50.0, 99.0])
    return LatencyStats(
        count=int(values.size), mean=float(values.mean()), p50=float(p50), p99=float(p99), max=float(values.max())
    )


def meets_slo(workload: Workload, out: EngineOutcomes, *, ttft_slo_s: ArrayLike, tpot_slo_s: ArrayLike = np.inf,
              e2e_slo_s: ArrayLike = np.inf) -> np.ndarray:
    """Per request: finished, within ``ttft_slo_s`` to its first token, ``tpot_slo_s`` per output token after the
    first (mean), and ``e2e_slo_s`` end to end (each one value or one per request; inf: no limit). The one
    definition of a good request (module docstring)."""
    xi = workload.output_tokens
    ttft = out.first_token_ns * NS - workload.arrival_s
    e2e = out.finish_ns * NS - workload.arrival_s
    tpot = np.where(xi > 1, (e2e - ttft) / np.maximum(xi - 1, 1), 0.0)
    ok: np.ndarray = ((out.finish_ns >= 0) & (ttft <= np.asarray(ttft_slo_s)) & (tpot <= np.asarray(tpot_slo_s))
                      & (e2e <= np.asarray(e2e_slo_s)))
    return ok


class EngineClassStats(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    index: int
    arrived: int
    finished: int
    rejected: int
    preemptions: int
    recomputed_tokens: int
    stalled_frac: float | None
    ttft: LatencyStats
    e2e: LatencyStats
    stall: LatencyStats


class EngineResult(BaseModel):
    """The measures of one replay through the vLLM engine model. Frozen."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)
    simulator: Literal["engine-fast", "engine-reference"]
    requests: int
    finished: int
    rejected_admission: int
    rejected_oversize: int
    preemptions: int
    preempted_requests: int
    recomputed_tokens: int
    cached_prompt_tokens: int
    steps: int
    queueing: LatencyStats
    ttft: LatencyStats
    e2e: LatencyStats
    stall: LatencyStats
    stalled_frac: float | None
    duration_s: float
    goodput_rps: float
    slo_violations: int
    reservation_cost: float
    classes: tuple[EngineClassStats, ...]
    status: IntArray | None = Field(default=None, exclude=True)
    outcomes: EngineOutcomes | None = Field(default=None, exclude=True)
    """Per-request arrays (``keep_requests``); never serialised."""

    def to_json(self, *, indent: int | None = None) -> str:
        return self.model_dump_json(indent=indent)


def build_engine_result(simulator: Literal["engine-fast", "engine-reference"], workload: Workload,
                        policy: SimPolicy, status: IntArray, out: EngineOutcomes, *,
                        keep_requests: bool) -> EngineResult:
    """Summarise per-request outcomes; raises RuntimeError if a served request did not finish (conservation)."""
    serve = status == SERVE
    lost = np.flatnonzero(serve & (out.finish_ns < 0))
    if lost.size:
        raise RuntimeError(f"conservation violated: request {lost[0]} was served but never finished")
    arrival = workload.arrival_s
    cls = workload.class_index
    ttft = out.first_token_ns * NS - arrival
    e2e = out.finish_ns * NS - arrival
    queue = out.admit_ns * NS - arrival
    stall = out.max_gap_ns * NS
    ok = meets_slo(workload, out, ttft_slo_s=policy.ttft_slo_s[cls], tpot_slo_s=policy.tpot_slo_s[cls],
                   e2e_slo_s=policy.e2e_slo_s[cls])
    good = serve & ok
    xi, y = workload.output_tokens, policy.reserve_tokens[cls]
    res_cost = np.where(serve, policy.cp[cls] * np.maximum(xi - y, 0) + policy.cw[cls] * np.maximum(y - xi, 0), 0.0)
    finished = int(serve.sum())
    duration = float(out.finish_ns[serve].max() * NS - arrival[0]) if finished else 0.0
    stalled = serve & (stall > STALL_THRESHOLD_S)
    classes = []
    for c in range(workload.n_classes):
        m = cls == c
        ms = m & serve
        nf = int(ms.sum())
        classes.append(EngineClassStats(
            index=c, arrived=int(m.sum()), finished=nf, rejected=int((m & ~serve).sum()),
            preemptions=int(out.preemptions[m].sum()), recomputed_tokens=int(out.recomputed[m].sum()),
            stalled_frac=float((m & stalled).sum() / nf) if nf else None,
            ttft=_stats(ttft[ms]), e2e=_stats(e2e[ms]), stall=_stats(stall[ms]),
        ))
    return EngineResult(
        simulator=simulator,
        requests=len(workload),
        finished=finished,
        rejected_admission=int((status == REJECT_ADMISSION).sum()),
        rejected_oversize=int((status == REJECT_OVERSIZE).sum()),
        preemptions=int(out.preemptions.sum()),
        preempted_requests=int((out.preemptions > 0).sum()),
        recomputed_tokens=int(out.recomputed.sum()),
        cached_prompt_tokens=int(out.cached.sum()),
        steps=int(out.steps.sum()),
        queueing=_stats(queue[serve]),
        ttft=_stats(ttft[serve]),
        e2e=_stats(e2e[serve]),
        stall=_stats(stall[serve]),
        stalled_frac=float(stalled.sum() / finished) if finished else None,
        duration_s=duration,
        goodput_rps=float(good.sum() / duration) if duration > 0 else 0.0,
        slo_violations=int((serve & ~ok).sum()),
        reservation_cost=float(res_cost.sum()),
        classes=tuple(classes),
        status=status if keep_requests else None,
        outcomes=out if keep_requests else None,
    )
