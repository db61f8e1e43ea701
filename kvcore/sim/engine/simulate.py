"""``simulate_engine``: replay a workload through the vLLM engine model (fast, or the step-by-step reference).

Inputs are :class:`~kvcore.sim.Workload`, :class:`~kvcore.sim.SimGroup` and :class:`~kvcore.sim.SimPolicy` plus
one :class:`EngineConfig` per group (or one for all). The random draws are :func:`kvcore.sim.prepare.prepare`'s
(admission, routing, prefix), seeded by the caller's generator. How the policy is read:

- ``routing[i, k]``: the probability that a class-i request goes to group k; ``admission[i]``: that it is admitted
  at all (otherwise rejected, counted per class). Within a group requests go to replicas as the engine model says.
- ``prefix_fraction[i, k]``: the probability that a class-i request on group k *carries* the class's shared prompt
  prefix of ``prefix_tokens[i]`` tokens. Whether it is *cached* is the engine's business (vLLM's block-hash prefix
  cache with LRU eviction), not a draw; nothing is pinned.
- ``reserve_tokens[i]``: y_i, used only by ``admission="gate"`` (kvplan's scheduler plugin): this is how the
  retired reservation-admission simulator lives on, as a configuration of the engine model.
- ``ttft_slo_s``, ``tpot_slo_s``, ``e2e_slo_s``, ``cp``, ``cw``: read only by the result (goodput, reservation cost).
- Step times: the group's decode curve (its ``decode_step_knots_s``, the measured model's) or else its line
  ``t0 + t1 * B`` (the profile's ``step_t0_s``/``step_t1_s``), plus ``1 / prefill_tokens_per_s`` per token beyond
  one per request (prefill, chunks, recompute): :func:`group_timing`.

A prompt has at least one token (vLLM refuses empty prompts; a 0-token input is replayed as 1). Under the gate a
request's reservation is capped at what it can ever hold, ``min(max_model_len, (num_blocks - 1) * block_size) -
prompt`` tokens (never below 0), as kvplan's scheduler plugin caps it. A request is rejected as oversize when one
replica could never hold it alone: ``ceil((prompt + output - 1) / block_size) > num_blocks - 1``, or, with
``max_model_len`` set, ``prompt + output > max_model_len``; vLLM would refuse it at start-up or hang.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kvcore.errors import InputError
from kvcore.sim.engine.config import NS_PER_S, EngineConfig, StepTiming
from kvcore.sim.engine.fast import run_fast
from kvcore.sim.engine.jobs import GroupEngine, Jobs
from kvcore.sim.engine.reference import run_reference
from kvcore.sim.engine.result import EngineResult, build_engine_result
from kvcore.sim.gate import capped_reserve
from kvcore.sim.prepare import REJECT_OVERSIZE, SERVE, prepare
from kvcore.sim.types import SimGroup, SimPolicy, Workload


def engine_groups(groups: Sequence[SimGroup], engine: EngineConfig | Sequence[EngineConfig]) -> tuple[GroupEngine, ...]:
    """Each group's replicas, block count, engine settings and step timing."""
    engines = [engine] * len(groups) if isinstance(engine, EngineConfig) else list(engine)
    if len(engines) != len(groups):
        raise InputError("engine", f"has {len(engines)} entries, there are {len(groups)} groups")
    out = []
    for g, e in zip(groups, engines):
        out.append(GroupEngine(g.replicas, e.blocks_for(g.kv_capacity_tokens), e, group_timing(g)))
    return tuple(out)


def group_timing(g: SimGroup) -> StepTiming:
    """The group's step timing: its decode curve (or line), its prefill rate and its context term."""
    return StepTiming(g.step_time_base_s, g.step_time_per_seq_s, 1.0 / g.prefill_tokens_per_s,
                      tuple(g.decode_step_knots_s), g.step_time_per_context_token_s)


def build_jobs(workload: Workload, groups: Sequence[SimGroup], policy: SimPolicy,
               engine: EngineConfig | Sequence[EngineConfig], *, rng: np.random.Generator) -> tuple[Jobs, np.ndarray]:
    """The engine models' input and each request's status (SERVE / REJECT_ADMISSION / REJECT_OVERSIZE)."""
    grp = tuple(groups)
    prep = prepare(workload, grp, policy, rng=rng)
    geng = engine_groups(grp, engine)
    cls = workload.class_index
    prompt = np.maximum(workload.input_tokens, 1)
    prefix = np.where(prep.prefix_hit == 1, policy.prefix_tokens[cls], 0)
    status = prep.status.copy()
    group = np.where(status == SERVE, prep.group, -1)
    safe = np.maximum(group, 0)
    bs = np.array([g.engine.block_size for g in geng])[safe]
    usable = np.array([g.num_blocks - 1 for g in geng])[safe]
    max_len = np.array([g.engine.max_model_len or np.iinfo(np.int64).max for g in geng], dtype=np.int64)[safe]
    capacity = np.minimum(max_len, usable * bs)
    y = np.array([capped_reserve(int(v), int(p), int(c)) for v, p, c in
                  zip(policy.reserve_tokens[cls].tolist(), prompt.tolist(), capacity.tolist())], dtype=np.int64)
    oversize = (group >= 0) & ((-(-(prompt + workload.output_tokens - 1) // bs) > usable)
                               | (prompt + workload.output_tokens > max_len))
    status[oversize] = REJECT_OVERSIZE
    group[oversize] = -1
    priority = [geng[g].engine.priority_of(int(c)) if g >= 0 else 0 for g, c in zip(group.tolist(), cls.tolist())]
    jobs = Jobs(
        arrival_ns=np.rint(workload.arrival_s * NS_PER_S).astype(np.int64).tolist(),
        prompt=prompt.tolist(), output=workload.output_tokens.tolist(), cls=cls.tolist(), priority=priority,
        prefix=prefix.tolist(), reserve=y.tolist(), group=group.tolist(), groups=geng,
    )
    return jobs, status


def simulate_engine(
    workload: Workload,
    groups: Sequence[SimGroup],
    policy: SimPolicy,
    *,
    rng: np.random.Generator,
    engine: EngineConfig | Sequence[EngineConfig] | None = None,
    reference: bool = False,
    keep_requests: bool = False,
) -> EngineResult:
    """Replay ``workload`` through vLLM 0.33's scheduling on ``groups`` (model in :mod:`kvcore.sim.engine`).

    ``engine``: one :class:`EngineConfig` for every group or one per group (default: vLLM's defaults).
    ``reference=True`` runs the step-by-step reference instead of the fast model (same result, much slower).
    Nothing is written anywhere.
    """
    jobs, status = build_jobs(workload, groups, policy, engine if engine is not None else EngineConfig(), rng=rng)
    if reference:
        return build_engine_result("engine-reference", workload, policy, status, run_reference(jobs),
                                   keep_requests=keep_requests)
    return build_engine_result("engine-fast", workload, policy, status, run_fast(jobs), keep_requests=keep_requests)
