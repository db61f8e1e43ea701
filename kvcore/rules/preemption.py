"""The price of a preemption in vLLM, from the engine model: what rho = c_p / c_w is when a class gives an SLO.

vLLM 0.33 preempts by recompute (``docs/model.md``, "The vLLM engine model"). One preemption of request j costs:

- **recompute work** ``R_j`` (tokens): the tokens scheduled again below the request's high-water mark, net of
  prefix-cache hits (``EngineOutcomes.recomputed``);
- **the stall** ``S_j`` (s): the request's longest gap between two tokens, which for a preempted request spans its
  wait in the queue and its recompute (``EngineOutcomes.max_gap_ns``). The profile's step-time model converts it to
  token slots: at the operating batch ``B_op`` one step lasts ``t_tok = t0 + t1 B_op`` seconds and gives the stream
  one token, so a stall of S seconds is ``S / t_tok`` token slots the stream did not get.

Price of the preemptions of request j, token slots: ``h_j = R_j + S_j / t_tok`` if it was preempted, else 0 (a
request preempted twice counts its recompute twice and its longest stall once: a lower bound).

**Per preemption** (:class:`PreemptionPrice`): ``C = sum_j h_j / N_p`` token slots, N_p the preemptions of the
replay. **Per overflow token**: with nothing reserved (y = 0), every generated token is past the reservation, so the
hazard ``h = N_p / sum_j xi_j`` (preemptions per generated token) turns C into the price of one token past the
reservation: ``c_p = C h`` (token slots per token). With ``c_w = 1`` (one reserved token slot left unused, the unit
of the reservation cost), the engine's rho is ``rho_e = c_p / c_w = C h`` (dimensionless).

rho_e is what one more reserved token saves on average when nothing is reserved: small at light load (preemptions
are rare) and growing with memory pressure. It does not use the SLO's mu, sigma and lambda: the SLO says a class
wants its latency protected, and the engine model says what a preemption costs it. ``kvcore.planner.slo`` (seed eq. 8)
stays available (:func:`kvcore.rules.reserve.class_rho`, ``slo_price="eq8"``); docs/model.md says which is the
default and why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

from kvcore.errors import InputError
from kvcore.sim.engine import EngineConfig, EngineOutcomes, EngineResult, group_timing
from kvcore.sim.types import SimGroup, Workload
from kvcore.planner.slo import RHO_MAX

NS = 1e-9


def operating_batch(group: SimGroup, engine: EngineConfig, context_tokens: float) -> float:
    """``B_op = min(max_num_seqs, usable tokens / context)`` requests: how many requests of mean context
    ``context_tokens`` (prompt + half the output, tokens) one replica's KV memory holds (at least 1)."""
    usable = (engine.blocks_for(group.kv_capacity_tokens) - 1) * engine.block_size
    return float(min(engine.max_num_seqs, max(1.0, usable / max(float(context_tokens), 1.0))))


def token_interval_s(group: SimGroup, engine: EngineConfig, context_tokens: float) -> float:
    """``t_tok = d(B_op)`` seconds: one decode step at the operating batch (the group's curve, or ``t0 + t1 B_op``),
    the time one stream waits per token."""
    return group_timing(group).decode_s(operating_batch(group, engine, context_tokens))


def context_tokens(prompts: NDArray[np.float64], outputs: NDArray[np.float64]) -> float:
    """Mean context a running request holds, ``E[P + xi / 2]`` tokens."""
    return float(np.mean(np.asarray(prompts, dtype=np.float64) + np.asarray(outputs, dtype=np.float64) / 2.0))


def harm_tokens(outcomes: EngineOutcomes, t_tok: float) -> NDArray[np.float64]:
    """Per request, the price of its preemptions ``h_j = R_j + S_j / t_tok`` token slots (0 if never preempted)."""
    if not (math.isfinite(t_tok) and t_tok > 0):
        raise InputError("t_tok", f"must be finite and > 0 seconds, got {t_tok}")
    pre = outcomes.preemptions > 0
    h = outcomes.recomputed.astype(np.float64) + outcomes.max_gap_ns.astype(np.float64) * NS / t_tok
    return np.where(pre, h, 0.0)


class PreemptionPrice(BaseModel):
    """What the preemptions of one replay cost (module docstring for the formulas)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    preemptions: int = Field(description="N_p, preemptions in the replay.")
    generated_tokens: float = Field(description="Output tokens of the finished requests, sum_j xi_j.")
    recompute_tokens: float = Field(description="Mean recompute per preemption, tokens.")
    stall_s: float = Field(description="Mean longest stall per preemption, seconds.")
    token_interval_s: float = Field(description="t_tok, seconds per token at the operating batch.")
    price_tokens: float = Field(description="C = (recompute + stall / t_tok) per preemption, token slots.")
    hazard_per_token: float = Field(description="h = N_p / sum_j xi_j, preemptions per generated token.")

    @property
    def rho(self) -> float:
        """``rho_e = C h`` (c_w = 1), capped at kvcore.planner.slo.RHO_MAX."""
        return min(RHO_MAX, self.price_tokens * self.hazard_per_token)


def price_preemptions(workload: Workload, result: EngineResult, t_tok: float,
                      mask: NDArray[np.bool_] | None = None) -> PreemptionPrice:
    """The price of the preemptions of ``result`` (a replay of ``workload`` with ``keep_requests=True``), over the
    requests in ``mask`` (default all). Requests that did not finish count no tokens."""
    o = result.outcomes
    if o is None:
        raise InputError("result", "needs per-request outcomes (simulate_engine(..., keep_requests=True))")
    m = np.ones(len(workload), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    h = harm_tokens(o, t_tok)[m]
    n_p = int(o.preemptions[m].sum())
    done = m & (o.finish_ns >= 0)
    gen = float(workload.output_tokens[done].sum())
    pre = m & (o.preemptions > 0)
    rec = float(o.recomputed[pre].sum())
    stall = float((o.max_gap_ns[pre] * NS).sum())
    return PreemptionPrice(preemptions=n_p, generated_tokens=gen, recompute_tokens=rec / n_p if n_p else 0.0,
                           stall_s=stall / n_p if n_p else 0.0, token_interval_s=t_tok,
                           price_tokens=float(h.sum()) / n_p if n_p else 0.0,
                           hazard_per_token=n_p / gen if gen > 0 else 0.0)


def class_prices(workload: Workload, result: EngineResult, t_tok: float,
                 classes: Sequence[str]) -> dict[str, PreemptionPrice]:
    """:func:`price_preemptions` per class (index = position in ``classes``)."""
    if len(classes) != workload.n_classes:
        raise InputError("classes", f"has {len(classes)} names, the workload has {workload.n_classes} classes")
    return {name: price_preemptions(workload, result, t_tok, workload.class_index == i)
            for i, name in enumerate(classes)}
