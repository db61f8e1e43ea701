"""A model of vLLM 0.33's V1 engine: paged KV blocks, optimistic admission, on-demand growth and preemption by
recompute, with kvplan's reservation gate as an optional admission policy.

``simulate_engine(workload, groups, policy, *, rng, engine=EngineConfig(...))`` replays a workload the way vLLM's
``Scheduler`` would (:mod:`kvcore.sim.engine.reference` states the rules; the parity tier holds them to vLLM 0.33
itself); ``reference=True`` runs the slow step-by-step mirror instead of the fast model, which skips runs of
decode-only steps and gives the same result.
The reservation-admission simulator that stood beside it (``kvcore.sim.simulate``) is retired (issue 21): what it
modelled, admission by reservation, is ``EngineConfig(admission="gate")`` here.
"""

from kvcore.sim.engine.config import EngineConfig, StepTiming
from kvcore.sim.engine.fast import run_fast
from kvcore.sim.engine.jobs import EngineOutcomes, GroupEngine, Jobs
from kvcore.sim.engine.reference import run_reference
from kvcore.sim.engine.result import STALL_THRESHOLD_S, EngineClassStats, EngineResult, LatencyStats, meets_slo
from kvcore.sim.engine.simulate import build_jobs, engine_groups, group_timing, simulate_engine

__all__ = [
    "STALL_THRESHOLD_S",
    "EngineClassStats",
    "EngineConfig",
    "EngineOutcomes",
    "EngineResult",
    "GroupEngine",
    "Jobs",
    "LatencyStats",
    "StepTiming",
    "build_jobs",
    "engine_groups",
    "group_timing",
    "meets_slo",
    "run_fast",
    "run_reference",
    "simulate_engine",
]
