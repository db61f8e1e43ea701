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

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_BY_MODULE: dict[str, tuple[str, ...]] = {
    "kvcore.sim.prepare": ("REJECT_ADMISSION", "REJECT_OVERSIZE", "SERVE"),
    "kvcore.sim.types": ("SimGroup", "SimPolicy", "Workload"),
    "kvcore.sim.workload": ("resample_trace", "workload_from_trace"),
    "kvcore.sim.engine": ("EngineConfig", "EngineResult", "LatencyStats", "meets_slo", "simulate_engine"),
}
"""Module -> the names read from it on first use. Loading them lazily keeps ``import kvcore.sim.gate`` (the
admission rule, read by kvplan's vLLM scheduler) from importing the simulator and numpy: the plugin's
distribution ships this file and :mod:`kvcore.sim.gate` only."""

_EXPORTS: dict[str, str] = {name: module for module, names in _BY_MODULE.items() for name in names}

__all__ = [
    "EngineConfig", "EngineResult", "LatencyStats", "meets_slo", "REJECT_ADMISSION", "REJECT_OVERSIZE",
    "resample_trace", "SERVE", "SimGroup", "SimPolicy", "simulate_engine", "Workload", "workload_from_trace",
]

if TYPE_CHECKING:
    from kvcore.sim.engine import EngineConfig, EngineResult, LatencyStats, meets_slo, simulate_engine
    from kvcore.sim.prepare import REJECT_ADMISSION, REJECT_OVERSIZE, SERVE
    from kvcore.sim.types import SimGroup, SimPolicy, Workload
    from kvcore.sim.workload import resample_trace, workload_from_trace


def __getattr__(name: str) -> Any:
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'kvcore.sim' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
