"""``kvcore evaluate --engine vllm --slo-capacity``: the highest arrival rate each method serves within an SLO.

Users compare serving systems by goodput at an SLO, not by latency at a load past saturation. For each method of
:data:`~kvcore.evaluate.slo_methods.SLO_METHODS`, on the same fleet and replay (split protocol, as
:mod:`kvcore.evaluate.engine`), this finds the highest arrival rate at which at least ``share`` of the requests meet
TTFT <= ``ttft_slo_s`` and mean time per output token <= ``tpot_slo_s`` (:func:`kvcore.sim.engine.meets_slo`, the one
definition of a good request; goodput is good requests per second), for each share of ``shares`` (0.99, and 0.9 for
reading).

**Rate.** The replay's own arrival times compressed or stretched to the rate (burstiness kept); a trace without
timestamps gets Poisson arrivals from ``seed`` at the rate (:func:`kvcore.evaluate.engine.replay_workload`: one
stream of unit gaps scaled by 1/rate, so every rate sees the same sequence, only faster or slower).

**Search** (:mod:`kvcore.evaluate.slo_search`): bracket from half the saturation rate, then bisect to 1%;
every replay is seeded, so the answer is deterministic. It assumes attainment does not rise with the rate and never
reports a rate it did not measure to meet the share.

**Load** is the rate over the saturation rate measured in the engine model, prefill included
(:mod:`kvcore.evaluate.saturation`, the evaluation's one definition: ``setup.capacity_rps``). A finite replay can
meet a 90% share above it (the queue has not grown long enough yet), so load can exceed 1 at the lower share.

**Rows** per (method, share): ``slo_rate_rps``, ``ratio_vs_default`` (over vllm-default's at the same share), and at
that rate preemptions, recomputed tokens, stalled share, P99 of the longest token gap, TTFT P99, P99 of the
per-request mean time per output token, and the GPUs. A method that cannot run (bad settings for this fleet, or no
rate meeting the share) gets a row with ``reason`` and no rate, never an exception.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kvcore.errors import InputError
from kvcore.evaluate.engine import EngineFleet, EngineSetup
from kvcore.evaluate.slo_methods import SLO_METHODS, MethodRun, MethodRunner
from kvcore.evaluate.slo_search import AttainmentCurve, SloRate, find_slo_rate
from kvcore.history.traces import Trace
from kvcore.sim import SimGroup, Workload
from kvcore.sim.engine import EngineOutcomes, group_timing
from kvcore.sim.engine.config import NS_PER_S


DEFAULT_SHARES = (0.99, 0.9)
MIN_REPLAYED = 100
"""Fewest replayed requests: at a 99% share one request is then 1% of them, the search's own resolution."""
MIN_REQUESTS = 2 * MIN_REPLAYED
"""Fewest requests in the trace (the split protocol replays its second half)."""


class SloRow(BaseModel):
    """One (trace, method, share) answer; the measures are at ``slo_rate_rps`` (None without a rate)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    trace: str
    method: str
    share: float
    slo_rate_rps: float | None
    ratio_vs_default: float | None
    load: float | None = Field(description="slo_rate_rps over the measured saturation rate (saturation_rps).")
    attainment: float | None
    goodput_rps: float | None = Field(description="Requests within the SLO per second of the replay at the rate.")
    preemptions: int | None
    recomputed_tokens: int | None
    stalled_frac: float | None
    stall_p99_s: float | None
    ttft_p99_s: float | None
    tpot_p99_s: float | None
    gpus: int
    knobs: str = ""
    evaluations: int = 0
    reason: str = ""


class SloEvaluation(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    trace: str
    requests: int
    gpus: int
    arrivals: str = Field(description="How the replay's arrivals are scaled to a rate.")
    saturation_rps: float = Field(description="Requests/s vLLM's defaults finish on the replay with a queue that never "
                                  "empties: load 1 (kvcore.evaluate.saturation).")
    ttft_slo_s: float
    tpot_slo_s: float
    rows: list[SloRow]
    curves: dict[str, list[tuple[float, float]]] = Field(
        default_factory=dict, description="Per method, every (rate in requests/s, attainment) its searches measured, "
                                          "by rate: the attainment curve the SLO rates were read from.")


def check_targets(group: SimGroup, inputs: np.ndarray, *, ttft_slo_s: float, tpot_slo_s: float) -> None:
    """Refuse SLO targets no rate can meet: TTFT below one prefill of the shortest prompt alone, or a time per
    output token below one decode step of a batch of one."""
    for flag, v in (("--ttft-slo", ttft_slo_s), ("--tpot-slo", tpot_slo_s)):
        if not (math.isfinite(v) and v > 0):
            raise InputError(flag, f"must be finite and > 0 seconds, got {v}")
    step = group_timing(group).decode_s(1)
    shortest = max(float(np.min(inputs)), 1.0)
    prefill = step + (shortest - 1.0) / group.prefill_tokens_per_s
    if ttft_slo_s < prefill:
        raise InputError("--ttft-slo", f"{ttft_slo_s:g} s is below the prefill of the shortest prompt alone "
                         f"({shortest:.0f} tokens: {prefill:.4g} s); no rate can meet it")
    if tpot_slo_s < step:
        raise InputError("--tpot-slo", f"{tpot_slo_s:g} s is below one decode step of a batch of one "
                         f"({step:.4g} s); no rate can meet it")


def tpot_per_request(workload: Workload, out: EngineOutcomes) -> np.ndarray:
    """Mean time per output token after the first, finished requests with more than one token, seconds."""
    ok = (out.finish_ns >= 0) & (workload.output_tokens > 1)
    span = (out.finish_ns[ok] - out.first_token_ns[ok]) / NS_PER_S
    return np.asarray(span / (workload.output_tokens[ok] - 1), dtype=np.float64)


def _p99(values: np.ndarray) -> float | None:
    return float(np.quantile(values, 0.99)) if values.size else None


def _row(name: str, method: str, found: SloRate, run: MethodRun | None, saturation: float, gpus: int,
         default_rate: float | None) -> SloRow:
    rate = found.rate_rps
    if rate is None or run is None:
        return SloRow(trace=name, method=method, share=found.share, slo_rate_rps=None, ratio_vs_default=None,
                      load=None, attainment=None, goodput_rps=None, preemptions=None, recomputed_tokens=None,
                      stalled_frac=None, stall_p99_s=None, ttft_p99_s=None, tpot_p99_s=None, gpus=gpus,
                      evaluations=found.evaluations, reason=found.reason)
    res, o = run.result, run.result.outcomes
    assert o is not None
    good = float(run.attainment * run.workload.output_tokens.size)
    return SloRow(trace=name, method=method, share=found.share, slo_rate_rps=rate,
                  ratio_vs_default=rate / default_rate if default_rate else None, load=rate / saturation,
                  attainment=run.attainment, goodput_rps=good / res.duration_s if res.duration_s > 0 else 0.0,
                  preemptions=res.preemptions, recomputed_tokens=res.recomputed_tokens,
                  stalled_frac=res.stalled_frac, stall_p99_s=res.stall.p99, ttft_p99_s=res.ttft.p99,
                  tpot_p99_s=_p99(tpot_per_request(run.workload, o)), gpus=gpus, knobs=run.knobs,
                  evaluations=found.evaluations, reason=found.reason)


def _failed(name: str, method: str, share: float, gpus: int, reason: str) -> SloRow:
    return _row(name, method, SloRate(share=share, rate_rps=None, fail_rps=None, evaluations=0, reason=reason),
                None, 1.0, gpus, None)


def evaluate_slo_capacity(trace: Trace, *, fleet: EngineFleet | None = None, shares: Sequence[float] = DEFAULT_SHARES,
                          methods: Sequence[str] = SLO_METHODS, rho: float = 10.0, seed: int = 0,
                          replay_requests: int = 500,
                          wrap: Callable[[Sequence[str]], Iterable[str]] | None = None) -> SloEvaluation:
    """Every method's SLO capacity at every share (module docstring); rows in (method, share) order, vllm-default
    first (it is the ratio's baseline). ``replay_requests``: requests per history replay of the kvplan rules."""
    fleet = fleet if fleet is not None else EngineFleet()
    n = len(trace)
    if n < MIN_REQUESTS:
        raise InputError("--trace", f"has {n} requests; SLO capacity needs at least {MIN_REQUESTS} ({MIN_REPLAYED} "
                         "replayed, the second half) for a 1% share to be a whole request")
    for s in shares:
        if not (0.0 < s <= 1.0):
            raise InputError("--slo-share", f"must be in (0, 1], got {s}")
    unknown = [m for m in methods if m not in SLO_METHODS]
    if unknown:
        raise InputError("--method", f"unknown {', '.join(unknown)}; known: {', '.join(SLO_METHODS)}")
    setup = EngineSetup(trace, fleet, replay_requests)
    check_targets(setup.group, setup.inp[setup.half:], ttft_slo_s=fleet.ttft_slo_s, tpot_slo_s=fleet.tpot_slo_s)
    name = trace.source or "trace"
    gpus = fleet.replicas * fleet.tp * fleet.pp
    saturation = setup.capacity_rps
    runner = MethodRunner(setup, rho=rho, seed=seed)
    ordered = ["vllm-default", *[m for m in methods if m != "vllm-default"]]
    default_rate: dict[float, float | None] = {}
    rows: list[SloRow] = []
    curves: dict[str, list[tuple[float, float]]] = {}
    for method in (wrap(ordered) if wrap is not None else ordered):
        runs: dict[float, MethodRun] = {}

        def attain(rate: float, method: str = method, runs: dict[float, MethodRun] = runs) -> float:
            runs[rate] = runner.run(method, rate)
            return runs[rate].attainment

        curve = AttainmentCurve(attain)
        for share in shares:
            try:
                found = find_slo_rate(curve, share=share, start_rps=0.5 * saturation)
            except (InputError, ValueError) as exc:
                rows.append(_failed(name, method, share, gpus, f"cannot run on this fleet: {exc}"))
                continue
            if method == "vllm-default":
                default_rate[share] = found.rate_rps
            run = runs.get(found.rate_rps) if found.rate_rps is not None else None
            rows.append(_row(name, method, found, run, saturation, gpus, default_rate.get(share)))
        curves[method] = sorted(curve.points.items())
    keep = set(methods)
    rows = [r for r in rows if r.method in keep]
    timed = setup.arrival is not None and float(setup.arrival[-1] - setup.arrival[0]) > 0
    arrivals = ("the trace's own arrival times, compressed or stretched to the rate" if timed
                else f"Poisson arrivals (seed {seed}) at the rate")
    return SloEvaluation(trace=name, requests=n - setup.half, gpus=gpus, arrivals=arrivals, saturation_rps=saturation,
                         ttft_slo_s=fleet.ttft_slo_s, tpot_slo_s=fleet.tpot_slo_s, rows=rows,
                         curves={m: c for m, c in curves.items() if m in keep})
