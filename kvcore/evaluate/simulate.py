"""``kvcore evaluate --simulate``: replay the scored requests through the vLLM engine model
(:mod:`kvcore.sim.engine`) with kvplan's gate holding each plan's reservation, on the one evaluation fleet.

Until issue 21 this replayed through a separate reservation-admission simulator on its own fleet, load and SLO; it
now uses the engine comparison's (:mod:`kvcore.evaluate.engine`): the fleet is :class:`EngineFleet` (one group of
identical replicas of the roofline profile, 100,000 KV tokens each, vLLM 0.33's defaults), ``load`` is the arrival rate
over that fleet's saturation rate on the scored requests, measured in the engine model (:func:`~kvcore.evaluate.engine.capacity_rps`, trace timestamps
rescaled to it by the one workload builder, :func:`~kvcore.evaluate.engine.replay_workload`), and a request meets the SLO when it is good for
goodput (:func:`kvcore.sim.engine.meets_slo`: TTFT <= 2 s and mean time per output token <= 0.1 s). Requests are
the protocol's scored requests, with their input lengths and shifted, capped output lengths (rounded to whole
tokens, at least 1). Each plan of the protocol is one class, so a rolling replay switches reservation at every
re-plan.

Row fields: ``p99_latency_s`` (end-to-end P99), ``slo_violation_rate`` (finished requests that are not good, over
finished), ``preemptions`` (vLLM's, by recompute) and ``waste_token_slot_s``: reserved output slots not yet filled,
integrated over each finished request's decode (first token to last), its tokens taken as evenly spaced.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from kvcore.evaluate.engine import DEFAULT_LOADS, EngineFleet, capacity_rps, replay_workload
from kvcore.evaluate.protocols import Episode
from kvcore.history.traces import Trace

SIMULATE_LOAD = DEFAULT_LOADS[0]
"""The load ``--simulate`` replays at: the engine comparison's first (0.7)."""


def unfilled_slot_seconds(reserve: np.ndarray, output: np.ndarray, first_s: np.ndarray, last_s: np.ndarray,
                          ) -> np.ndarray:
    """Per request: the integral over ``[first_s, last_s]`` of ``(reserve - tokens so far)^+``, the tokens going
    from 1 at ``first_s`` to ``output`` at ``last_s`` evenly."""
    span = np.maximum(last_s - first_s, 0.0)
    y = reserve.astype(np.float64)
    xi = output.astype(np.float64)
    over = span * (y - (1.0 + xi) / 2.0)  # y >= xi: the reservation is never filled
    part = span * np.maximum(y - 1.0, 0.0) ** 2 / (2.0 * np.maximum(xi - 1.0, 1.0))  # filled part-way through
    waste: np.ndarray = np.where(y >= xi, np.maximum(over, 0.0), part)
    return waste


def simulate_episodes(trace: Trace, episodes: Sequence[Episode], reserves: Sequence[float], *, rho: float,
                      fleet: EngineFleet, seed: int, load: float = SIMULATE_LOAD) -> dict[str, float | int | None]:
    """Replay the scored requests with one reservation per episode; returns the row's simulated fields."""
    from kvcore.sim import SimPolicy
    from kvcore.sim.engine import EngineConfig, simulate_engine

    idx = np.concatenate([e.test_index for e in episodes])
    out = np.maximum(1.0, np.rint(np.concatenate([e.test_outputs for e in episodes])))
    cls = np.concatenate([np.full(e.test_index.size, j, dtype=np.int64) for j, e in enumerate(episodes)])
    inp = np.rint(np.asarray(trace.input_tokens, dtype=np.float64)[idx])
    group = fleet.group()
    rate = load * capacity_rps(group, inp, out)
    times = None if trace.arrival_s is None else np.asarray(trace.arrival_s, dtype=np.float64)[idx]
    workload = replay_workload(times, cls, inp, out, n_classes=len(episodes), rate_rps=rate, seed=seed)
    n = len(episodes)
    policy = SimPolicy.from_arrays(np.asarray(reserves, dtype=np.float64), np.ones((n, 1)),
                                   ttft_slo_s=fleet.ttft_slo_s, tpot_slo_s=fleet.tpot_slo_s,
                                   cp=np.full(n, rho), cw=np.ones(n))
    res = simulate_engine(workload, [group], policy, rng=np.random.default_rng(seed),
                          engine=EngineConfig(admission="gate"), keep_requests=True)
    o = res.outcomes
    assert o is not None
    done = o.finish_ns >= 0
    waste = unfilled_slot_seconds(policy.reserve_tokens[cls][done], workload.output_tokens[done],
                                  o.first_token_ns[done] * 1e-9, o.finish_ns[done] * 1e-9)
    p99 = res.e2e.p99
    return {
        "p99_latency_s": None if p99 is None or not math.isfinite(p99) else float(p99),
        "slo_violation_rate": res.slo_violations / res.finished if res.finished else None,
        "preemptions": int(res.preemptions),
        "waste_token_slot_s": float(waste.sum()),
    }
