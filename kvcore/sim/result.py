"""What a simulation measured: :class:`SimResult`, built the same way from either simulator's raw outcomes.

Definitions (all times in seconds, all memory in tokens):

- **queueing delay**: first admission to a replica minus arrival; **TTFT**: end of the step that admitted it
  first (prefill + first token) minus arrival; **end-to-end**: the end of the step that produced its last token
  minus arrival. Percentiles are numpy's linear interpolation over finished requests.
- **SLO**: a finished request meets its class's SLO when ``ttft <= ttft_slo_s`` and ``e2e <= e2e_slo_s``.
  Rejected requests are counted as rejected, not as violations.
- **goodput**: finished requests that met their SLO per second of ``duration_s`` = last completion minus first
  arrival (0 when nothing finished).
- **preemptions**: recompute preemptions (a request loses its KV and re-queues); **recomputed_tokens**: the
  prefill work repeated on re-admission (input net of prefix plus the output tokens already generated).
- **wasted token-slot-seconds**: for every decode step and every running request, the output slots it holds
  that hold no token at the end of the step, times the step's duration. A request past its reservation holds
  exactly the slots it has filled, so it wastes nothing; over-reservation is what is wasted.
- **costs** (:class:`CostTerms`): ``reservation`` = sum over finished requests of
  ``cp (xi - y)^+ + cw (y - xi)^+`` (the planner's per-request term, with xi the true output); ``preemption`` =
  ``c_preempt x preemptions``; ``rejection`` = ``c_reject x rejected``; ``slo`` = ``c_slo x violations``.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kvcore.sim.prepare import REJECT_ADMISSION, REJECT_OVERSIZE, SERVE, Prepared
from kvcore.sim.types import FloatArray, IntArray, SimConfig, SimGroup, SimPolicy, Workload


@dataclass(frozen=True, slots=True)
class RequestOutcomes:
    """Raw per-request outcomes of one run (NaN where a time does not apply, e.g. rejected requests)."""

    status: IntArray
    group: IntArray
    replica: IntArray
    admit_s: FloatArray
    first_token_s: FloatArray
    finish_s: FloatArray
    preemptions: IntArray
    recomputed_tokens: IntArray
    prefix_hit: IntArray
    waste_by_group: FloatArray


class LatencyStats(BaseModel):
    """Summary of one latency over finished requests, seconds (None when no request finished)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    count: int
    mean: float | None
    p50: float | None
    p99: float | None
    max: float | None


class ClassStats(BaseModel):
    """Per-class counts and latencies."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    index: int
    arrived: int
    finished: int
    rejected_admission: int
    rejected_oversize: int
    preemptions: int
    slo_violations: int
    slo_violation_rate: float | None
    """Violations / finished (None when none finished)."""
    ttft: LatencyStats
    e2e: LatencyStats
    reservation_cost_mean: float | None
    """Mean ``cp (xi - y)^+ + cw (y - xi)^+`` over the class's finished requests."""


class GroupStats(BaseModel):
    """Per-group counts and waste."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    replicas: int
    routed: int
    finished: int
    preemptions: int
    wasted_token_slot_seconds: float


class CostTerms(BaseModel):
    """Cost terms in token-slot units (module docstring); ``total`` is their sum."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    reservation: float
    reservation_mean: float | None
    preemption: float
    rejection: float
    slo: float
    total: float


class SimResult(BaseModel):
    """The measures of one run. Frozen; ``to_json`` gives everything except the per-request arrays."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)
    simulator: Literal["fast", "reference"]
    requests: int
    finished: int
    rejected_admission: int
    rejected_oversize: int
    preemptions: int
    recomputed_tokens: int
    wasted_token_slot_seconds: float
    queueing_delay: LatencyStats
    ttft: LatencyStats
    e2e: LatencyStats
    duration_s: float
    goodput_rps: float
    slo_violations: int
    slo_violation_rate: float | None
    classes: tuple[ClassStats, ...]
    groups: tuple[GroupStats, ...]
    costs: CostTerms
    outcomes: RequestOutcomes | None = Field(default=None, exclude=True)
    """Per-request arrays when ``SimConfig.keep_requests`` is set; never serialised."""

    @property
    def rejected(self) -> int:
        return self.rejected_admission + self.rejected_oversize

    def to_json(self, *, indent: int | None = None) -> str:
        return self.model_dump_json(indent=indent)


def _stats(values: FloatArray) -> LatencyStats:
    if values.size == 0:
        return LatencyStats(count=0, mean=None, p50=None, p99=None, max=None)
    p50, p99 = np.percentile(values, [50.0, 99.0])
    return LatencyStats(
        count=int(values.size), mean=float(values.mean()), p50=float(p50), p99=float(p99), max=float(values.max())
    )


def build_result(
    simulator: Literal["fast", "reference"],
    workload: Workload,
    groups: tuple[SimGroup, ...],
    policy: SimPolicy,
    config: SimConfig,
    prep: Prepared,
    out: RequestOutcomes,
) -> SimResult:
    """Summarise raw outcomes; raises RuntimeError if a served request did not finish (conservation)."""
    serve = out.status == SERVE
    unfinished = np.flatnonzero(serve & ~np.isfinite(out.finish_s))
    if unfinished.size:
        raise RuntimeError(f"conservation violated: request {unfinished[0]} was routed but never finished")
    arrival = workload.arrival_s
    cls = workload.class_index
    xi = workload.output_tokens
    y = prep.reserve
    ttft = out.first_token_s - arrival
    e2e = out.finish_s - arrival
    qdelay = out.admit_s - arrival
    ok = (ttft <= policy.ttft_slo_s[cls]) & (e2e <= policy.e2e_slo_s[cls])
    viol = serve & ~ok
    good = serve & ok
    res_cost = policy.cp[cls] * np.maximum(xi - y, 0) + policy.cw[cls] * np.maximum(y - xi, 0)
    res_cost = np.where(serve, res_cost, 0.0)
    rej_adm = out.status == REJECT_ADMISSION
    rej_big = out.status == REJECT_OVERSIZE
    finished = int(serve.sum())
    duration = float(np.max(out.finish_s[serve]) - arrival[0]) if finished else 0.0

    classes = []
    for c in range(workload.n_classes):
        m = cls == c
        ms = m & serve
        nf = int(ms.sum())
        classes.append(
            ClassStats(
                index=c,
                arrived=int(m.sum()),
                finished=nf,
                rejected_admission=int((m & rej_adm).sum()),
                rejected_oversize=int((m & rej_big).sum()),
                preemptions=int(out.preemptions[m].sum()),
                slo_violations=int((m & viol).sum()),
                slo_violation_rate=float((m & viol).sum() / nf) if nf else None,
                ttft=_stats(ttft[ms]),
                e2e=_stats(e2e[ms]),
                reservation_cost_mean=float(res_cost[ms].mean()) if nf else None,
            )
        )
    group_stats = []
    for k, g in enumerate(groups):
        m = serve & (out.group == k)
        group_stats.append(
            GroupStats(
                name=g.name,
                replicas=g.replicas,
                routed=int(m.sum()),
                finished=int(m.sum()),
                preemptions=int(out.preemptions[out.group == k].sum()),
                wasted_token_slot_seconds=float(out.waste_by_group[k]),
            )
        )
    preemptions = int(out.preemptions.sum())
    n_viol = int(viol.sum())
    n_rej = int(rej_adm.sum() + rej_big.sum())
    reservation = float(res_cost.sum())
    terms = {
        "reservation": reservation,
        "preemption": config.c_preempt * preemptions,
        "rejection": config.c_reject * n_rej,
        "slo": config.c_slo * n_viol,
    }
    costs = CostTerms(
        reservation_mean=reservation / finished if finished else None, total=float(sum(terms.values())), **terms
    )
    return SimResult(
        simulator=simulator,
        requests=len(workload),
        finished=finished,
        rejected_admission=int(rej_adm.sum()),
        rejected_oversize=int(rej_big.sum()),
        preemptions=preemptions,
        recomputed_tokens=int(out.recomputed_tokens.sum()),
        wasted_token_slot_seconds=float(out.waste_by_group.sum()),
        queueing_delay=_stats(qdelay[serve]),
        ttft=_stats(ttft[serve]),
        e2e=_stats(e2e[serve]),
        duration_s=duration,
        goodput_rps=float(good.sum() / duration) if duration > 0 else 0.0,
        slo_violations=n_viol,
        slo_violation_rate=n_viol / finished if finished else None,
        classes=tuple(classes),
        groups=tuple(group_stats),
        costs=costs,
        outcomes=out if config.keep_requests else None,
    )


def write_json(result: SimResult, path: str | Path) -> Path:
    """Write ``result.to_json`` (indented) to ``path``; returns the path. The only way a result reaches disk."""
    target = Path(path)
    target.write_text(json.dumps(json.loads(result.to_json()), indent=2) + "\n", encoding="utf-8")
    return target


CLASS_COLUMNS = (
    "class", "arrived", "finished", "rejected_admission", "rejected_oversize", "preemptions",
    "slo_violations", "slo_violation_rate", "ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s",
    "reservation_cost_mean",
)  # fmt: skip


def write_class_csv(result: SimResult, path: str | Path) -> Path:
    """Write one row per class (columns :data:`CLASS_COLUMNS`) to ``path``; returns the path."""
    target = Path(path)
    with target.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(CLASS_COLUMNS)
        for c in result.classes:
            writer.writerow(
                [
                    c.index, c.arrived, c.finished, c.rejected_admission, c.rejected_oversize, c.preemptions,
                    c.slo_violations, c.slo_violation_rate, c.ttft.p50, c.ttft.p99, c.e2e.p50, c.e2e.p99,
                    c.reservation_cost_mean,
                ]
            )  # fmt: skip
    return target


REQUEST_COLUMNS = (
    "request", "status", "group", "replica", "admit_s", "first_token_s", "finish_s", "preemptions",
    "recomputed_tokens", "prefix_hit",
)  # fmt: skip


def write_requests_csv(result: SimResult, path: str | Path) -> Path:
    """Write one row per request (columns :data:`REQUEST_COLUMNS`; empty where a time does not apply).

    Needs a result run with ``SimConfig(keep_requests=True)``; raises ValueError otherwise.
    """
    out = result.outcomes
    if out is None:
        raise ValueError("result has no per-request outcomes: run with SimConfig(keep_requests=True)")
    target = Path(path)
    cols = [out.status, out.group, out.replica, out.admit_s, out.first_token_s, out.finish_s, out.preemptions,
            out.recomputed_tokens, out.prefix_hit]  # fmt: skip
    with target.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(REQUEST_COLUMNS)
        for j, row in enumerate(zip(*(c.tolist() for c in cols))):
            writer.writerow([j, *("" if isinstance(v, float) and v != v else v for v in row)])
    return target
