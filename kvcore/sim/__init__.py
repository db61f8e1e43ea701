"""The simulator: one model, of vLLM 0.33's V1 engine (:mod:`kvcore.sim.engine`), with kvplan's reservation gate
as one of its admission settings.

``simulate_engine(workload, groups, policy, *, rng, engine=EngineConfig(...)) -> EngineResult`` replays vLLM's own
scheduling (paged blocks, optimistic admission, preemption by recompute, prefix caching, watermark, chunked prefill,
and with ``admission="gate"`` kvplan's gate, :mod:`kvcore.sim.gate`); ``reference=True`` runs the step-by-step
reference, which the fast model equals (``tests/unit/test_engine_equivalence.py``) and the parity tier holds to
vLLM itself. The reservation-admission simulator that stood beside it (``simulate``, ``simulate_reference``,
``SimResult``) is retired (issue 21): admission by reservation is ``EngineConfig(admission="gate")``.

Inputs (:mod:`kvcore.sim.types`): :class:`SimGroup` (replicas, KV capacity, step time), :class:`Workload` (arrival,
class, input and output tokens per request) and :class:`SimPolicy` (per-class reservation, routing, prefix fraction,
admission, SLOs, costs); :mod:`kvcore.sim.workload` builds workloads from trace columns. Randomness comes only from
the injected ``numpy.random.Generator`` (:mod:`kvcore.sim.prepare`); nothing is written to disk.
"""

from kvcore.sim.prepare import REJECT_ADMISSION, REJECT_OVERSIZE, SERVE
from kvcore.sim.types import SimGroup, SimPolicy, Workload
from kvcore.sim.workload import resample_trace, workload_from_trace
from kvcore.sim.engine import EngineConfig, EngineResult, LatencyStats, meets_slo, simulate_engine  # noqa: E402

__all__ = [
    "REJECT_ADMISSION",
    "REJECT_OVERSIZE",
    "SERVE",
    "EngineConfig",
    "EngineResult",
    "LatencyStats",
    "SimGroup",
    "SimPolicy",
    "Workload",
    "meets_slo",
    "resample_trace",
    "simulate_engine",
    "workload_from_trace",
]
