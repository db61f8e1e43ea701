"""The serving methods the SLO-capacity comparison runs, each replayed at a given arrival rate.

Every method serves the same replay (the second half of the trace, :class:`~kvcore.evaluate.engine.EngineSetup`)
on the same fleet; a rule that needs a history sees only the first half, at the rate it is asked to serve:

- ``vllm-default``: vLLM 0.33's defaults.
- ``vllm-tuned``: the best stock knobs at this rate, chosen **on the replay itself** among
  :data:`TUNED_WATERMARKS` x :data:`TUNED_SEQS` x :data:`TUNED_PRIORITIES` (the setting with the highest
  attainment; ties to the earlier in that order). No rule that sees only history can beat it on its grid: an upper
  bound on stock knob rules. (The engine model has no ``max_num_active_seqs``; there is nothing more to tune.)
- ``kvplan-knobs``: :func:`kvcore.rules.knobs.choose_knobs` on the history at this rate.
- ``kvplan-plugin+knobs``: what the operator deploys with the plugin on and ``knobs: Auto``: the knob rule's
  settings and the reservations that pay on top of them (:meth:`EngineSetup.rule` with ``base`` = those knobs).
- ``clairvoyant``: the reservation gate (vLLM's defaults otherwise) holding for each request exactly its true
  output length, capped like any reservation at what the request can ever hold: the limit of any reservation
  rule, since no reservation knows more.

Attainment is the share of the replay's requests (rejected ones included, as misses) within the fleet's SLO
(:func:`kvcore.sim.engine.meets_slo`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvcore.evaluate.engine import CLASSES, EngineSetup, run_variant
from kvcore.rules.knobs import choose_knobs
from kvcore.sim import SimPolicy, Workload
from kvcore.sim.engine import EngineConfig, EngineResult, build_jobs, run_fast
from kvcore.sim.engine.result import build_engine_result

SLO_METHODS = ("vllm-default", "vllm-tuned", "kvplan-knobs", "kvplan-plugin+knobs", "clairvoyant")
"""Methods of ``kvcore evaluate --engine vllm --slo-capacity``, in report order (the first is the baseline)."""
TUNED_WATERMARKS = (0.0, 0.01, 0.05, 0.1)
"""``--watermark`` values of vllm-tuned's grid (vLLM's default 0 first)."""
TUNED_SEQS = (256, 64)
"""``--max-num-seqs`` values of vllm-tuned's grid (vLLM's default 256 first)."""
TUNED_PRIORITIES: tuple[tuple[int, int] | None, ...] = (None, (0, 1), (1, 0))
"""Scheduling of vllm-tuned's grid: fcfs, then priority with short prompts first, then long prompts first."""


@dataclass(frozen=True)
class MethodRun:
    """One method's replay at one rate."""

    workload: Workload
    result: EngineResult
    attainment: float
    knobs: str


def tuned_grid(base: EngineConfig) -> list[EngineConfig]:
    """vllm-tuned's candidate settings, default first."""
    out = []
    for prio in TUNED_PRIORITIES:
        for s in TUNED_SEQS:
            for w in TUNED_WATERMARKS:
                out.append(base.model_copy(update={"watermark": w, "max_num_seqs": s,
                                                   "policy": "fcfs" if prio is None else "priority",
                                                   "class_priority": prio}))
    return out


def describe(engine: EngineConfig) -> str:
    text = f"watermark={engine.watermark:g} max_num_seqs={engine.max_num_seqs} policy={engine.policy}"
    if engine.class_priority:
        text += " priorities=" + ",".join(f"{c}:{p}" for c, p in zip(CLASSES, engine.class_priority))
    return text + (" gate" if engine.admission == "gate" else "")


class MethodRunner:
    """Runs any of :data:`SLO_METHODS` on one setup's replay at a given rate (deterministic given ``seed``)."""

    def __init__(self, setup: EngineSetup, *, rho: float, seed: int) -> None:
        self.setup = setup
        self.rho = rho
        self.seed = seed
        self.base = EngineConfig()

    def attainment(self, workload: Workload, result: EngineResult) -> float:
        assert result.outcomes is not None
        good = self.setup.fleet.good(workload, result.outcomes)
        return float(good.sum()) / max(int(workload.output_tokens.size), 1)

    def _run(self, workload: Workload, reserves: Sequence[float], engine: EngineConfig) -> MethodRun:
        _, res = run_variant(self.setup, workload, reserves, self.rho, engine, self.seed)
        text = describe(engine) + (f" y={reserves[0]:.0f},{reserves[1]:.0f}" if engine.admission == "gate" else "")
        return MethodRun(workload, res, self.attainment(workload, res), text)

    def run(self, method: str, rate_rps: float) -> MethodRun:
        """``method`` serving the replay at ``rate_rps`` requests/s."""
        setup = self.setup
        workload = setup.workload(rate_rps / setup.capacity_rps, self.seed)
        if method == "vllm-default":
            return self._run(workload, [0.0, 0.0], self.base)
        if method == "vllm-tuned":
            best: MethodRun | None = None
            for engine in tuned_grid(self.base):
                run = self._run(workload, [0.0, 0.0], engine)
                if best is None or run.attainment > best.attainment:
                    best = run
            assert best is not None
            return best
        if method == "clairvoyant":
            return self.clairvoyant(workload)
        load = rate_rps / setup.capacity_rps
        reserves = setup.reserves(self.rho)
        history_t = None if setup.arrival_all is None else setup.arrival_all[: setup.half]
        choice = choose_knobs(setup.group, setup.knob_classes(load, reserves, self.rho), base=self.base,
                              requests=setup.replay_requests, seed=self.seed, arrivals_s=history_t,
                              ttft_slo_s=setup.fleet.ttft_slo_s, tpot_slo_s=setup.fleet.tpot_slo_s)
        knobs = choice.engine_config(self.base, CLASSES)
        if method == "kvplan-knobs":
            return self._run(workload, [0.0, 0.0], knobs)
        if method == "kvplan-plugin+knobs":
            rule = setup.rule(load, self.rho, self.seed, base=knobs)
            return self._run(workload, [float(rule.reserves[c]) for c in CLASSES],
                             knobs.model_copy(update={"admission": "gate"}))
        raise ValueError(f"unknown method {method!r}; known: {', '.join(SLO_METHODS)}")

    def clairvoyant(self, workload: Workload) -> MethodRun:
        """The gate with each request's true output as its reservation (capped at what it can ever hold)."""
        engine = self.base.model_copy(update={"admission": "gate"})
        top = float(workload.output_tokens.max())
        policy = SimPolicy.from_arrays([top, top], np.ones((2, 1)), cp=self.rho, cw=1.0)
        jobs, status = build_jobs(workload, [self.setup.group], policy, engine, rng=np.random.default_rng(self.seed))
        # With every class reserving the longest output, jobs.reserve is each request's cap; the truth fits under it.
        exact = [min(int(o), int(cap)) for o, cap in zip(jobs.output, jobs.reserve)]
        res = build_engine_result("engine-fast", workload, policy, status, run_fast(dataclasses.replace(jobs,
                                  reserve=exact)), keep_requests=True)
        return MethodRun(workload, res, self.attainment(workload, res), describe(engine) + " y=true output")
