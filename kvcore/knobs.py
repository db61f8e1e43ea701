"""Knobs that stock vLLM obeys, chosen per group so it comes as close as it can to the plan's reservations.

A reservation protects running requests from preemption; stock vLLM has three knobs that do part of that job:
``--watermark`` (free blocks held back at admission), ``--max-num-seqs`` (a cap on concurrency) and
``--scheduling-policy priority`` with a priority per request (which class is served first and preempted last).
No formula maps reservations to them faithfully, so the rule *measures*: it replays the group's recent history
(the classes' paired prompt/output samples at their planned arrival rates, :func:`replay`) through the vLLM engine
model (:mod:`kvcore.sim.engine`) under every candidate and keeps the one the plan prices best.

**Candidates** (all combinations):

- watermark W in ``{0, 0.01, 0.02, 0.05, 0.1}`` (only for vLLM >= 0.33, which has the flag; older engines keep 0);
- max_num_seqs S in ``{S_0} ∪ {S_plan / 2, S_plan, 2 S_plan}`` clipped to ``[8, S_0]``, where S_0 is the current
  (vLLM default 256) and ``S_plan = usable tokens / mean(prompt + y)``: how many requests the plan's reservations
  let one replica hold, the concurrency the reservation model admits;
- ``fcfs``, and ``priority`` when the classes' cost ratios differ by at least ``PRIORITY_RATIO`` (2x): priorities by
  decreasing rho (the class whose overflow costs most is admitted first and preempted last).

**Choice.** A candidate is eligible when its P99 end-to-end latency is at most ``(1 + tolerance)`` times stock
vLLM's and its goodput at least ``(1 - tolerance)`` times (tolerance 1%, half the 2% the knobs may cost). Among
eligible ones the rule minimises the plan's price of what a reservation prevents, ``sum_j rho_j x recomputed
tokens_j`` per request (token-slot units; rho = c_p / c_w of the request's class), then the share of stalled
requests; ties keep the smaller change. If nothing beats stock vLLM, the knobs stay at stock values. The table of
every candidate's measures is returned, so the operator can show why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from pydantic import BaseModel, ConfigDict, Field

from kvcore.errors import InputError
from kvcore.instance import Instance
from kvcore.planmodel import Plan
from kvcore.sim.engine import EngineConfig, EngineResult, simulate_engine
from kvcore.sim.types import SimGroup, SimPolicy, Workload

WATERMARKS = (0.0, 0.01, 0.02, 0.05, 0.1)
"""Watermark candidates: vLLM's default 0 and fractions of the KV blocks up to 10%."""
PRIORITY_RATIO = 2.0
"""Classes' cost ratios must differ by this factor (max rho / min rho) before priorities are tried."""
MIN_SEQS = 8
"""Smallest max_num_seqs tried: below it a replica idles its GPU between long requests."""
WATERMARK_MIN_VERSION = (0, 33, 0)
"""``--watermark`` exists in vLLM from 0.33 on."""


@dataclass(frozen=True)
class KnobClass:
    """One class as the rule sees it on one group: its planned arrival rate there and recent history."""

    name: str
    rate_rps: float
    """Requests/s of this class routed to the group (all its replicas)."""
    inputs: NDArray[np.float64]
    """Prompt tokens of recent requests (paired with ``outputs``)."""
    outputs: NDArray[np.float64]
    """Output tokens of the same requests."""
    reserve_tokens: float
    """The plan's y for the class (tokens)."""
    rho: float
    """c_p / c_w of the class (dimensionless)."""
    weights: NDArray[np.float64] | None = None
    """Probability of each (prompt, output) row (histogram histories); None: equally likely."""

    @classmethod
    def build(cls, name: str, rate_rps: float, inputs: ArrayLike, outputs: ArrayLike, reserve_tokens: float,
              rho: float, weights: ArrayLike | None = None) -> KnobClass:
        i = np.asarray(inputs, dtype=np.float64).ravel()
        o = np.asarray(outputs, dtype=np.float64).ravel()
        if i.size == 0 or i.size != o.size:
            raise InputError(f"knobs.classes[{name}].inputs", f"needs paired samples, got {i.size} and {o.size}")
        if not (np.isfinite(i).all() and np.isfinite(o).all()):
            raise InputError(f"knobs.classes[{name}].outputs", "samples must be finite")
        if not (math.isfinite(rate_rps) and rate_rps >= 0):
            raise InputError(f"knobs.classes[{name}].rate_rps", f"must be finite and >= 0, got {rate_rps}")
        if not (math.isfinite(rho) and rho > 0):
            raise InputError(f"knobs.classes[{name}].rho", f"must be finite and > 0, got {rho}")
        w = None
        if weights is not None:
            w = np.asarray(weights, dtype=np.float64).ravel()
            if w.size != o.size or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
                raise InputError(f"knobs.classes[{name}].weights", "must be finite, >= 0, one per sample, sum > 0")
            w = w / w.sum()
        return cls(name, float(rate_rps), np.maximum(np.rint(i), 0.0), np.maximum(np.rint(o), 1.0),
                   float(reserve_tokens), float(rho), w)


class KnobMeasure(BaseModel):
    """One candidate's measures on the replay."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    watermark: float
    max_num_seqs: int
    policy: str
    eligible: bool
    priced_recompute: float = Field(description="sum_j rho_j * recomputed_j / requests, token slots per request.")
    stalled_frac: float
    preemptions: int
    e2e_p99_s: float
    goodput_rps: float


class KnobChoice(BaseModel):
    """The knobs for one group, with the evidence."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    group: str
    max_num_seqs: int
    watermark: float | None = Field(description="None when the engine is older than 0.33 (no --watermark).")
    scheduling_policy: str
    class_priority: dict[str, int] = Field(default_factory=dict, description="Per class; empty under fcfs.")
    reason: str
    candidates: tuple[KnobMeasure, ...] = ()

    def engine_config(self, base: EngineConfig, classes: Sequence[str]) -> EngineConfig:
        """``base`` with these knobs (class priorities in ``classes`` order)."""
        prio = tuple(self.class_priority.get(c, 0) for c in classes) if self.class_priority else None
        return base.model_copy(update={"max_num_seqs": self.max_num_seqs, "watermark": self.watermark or 0.0,
                                       "policy": self.scheduling_policy, "class_priority": prio})


def version_tuple(version: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in version.split("+")[0].split(".")[:3])
    except ValueError:
        raise InputError("engine_version", f"{version!r} is not a version like 0.33.0") from None


def replay(group: SimGroup, classes: Sequence[KnobClass], *, requests: int, rng: np.random.Generator,
           ) -> tuple[Workload, SimPolicy]:
    """``requests`` requests of the classes on ``group``: Poisson arrivals at the summed rates, classes in
    proportion to their rates, (prompt, output) rows resampled from each class's history."""
    rates = np.array([c.rate_rps for c in classes])
    total = float(rates.sum())
    if total <= 0:
        raise InputError("knobs.classes", "no traffic on this group (every rate is 0)")
    cls = rng.choice(len(classes), size=requests, p=rates / total)
    inp = np.empty(requests)
    out = np.empty(requests)
    for i, c in enumerate(classes):
        idx = np.flatnonzero(cls == i)
        rows = (rng.integers(0, c.inputs.size, size=idx.size) if c.weights is None
                else rng.choice(c.inputs.size, size=idx.size, p=c.weights))
        inp[idx], out[idx] = c.inputs[rows], c.outputs[rows]
    gaps = rng.exponential(1.0 / total, size=requests)
    gaps[0] = 0.0
    workload = Workload.from_arrays(np.cumsum(gaps), cls, inp, out, n_classes=len(classes))
    policy = SimPolicy.from_arrays([c.reserve_tokens for c in classes], np.ones((len(classes), 1)),
                                   cp=[c.rho for c in classes], cw=1.0)
    return workload, policy


def _measure(result: EngineResult, outcomes_recomputed: NDArray[np.int64], rho: NDArray[np.float64], n: int,
             ) -> tuple[float, float, int, float, float]:
    priced = float((rho * outcomes_recomputed).sum() / n)
    return (priced, result.stalled_frac or 0.0, result.preemptions, result.e2e.p99 or 0.0, result.goodput_rps)


def choose_knobs(group: SimGroup, classes: Sequence[KnobClass], *, base: EngineConfig | None = None,
                 engine_version: str = "0.33.0", requests: int = 2000, tolerance: float = 0.01,
                 seed: int = 0) -> KnobChoice:
    """The knobs for one group (module docstring). Pure: seeded, no I/O."""
    base = base if base is not None else EngineConfig()
    if not classes:
        raise InputError("knobs.classes", "at least one class is needed")
    rng = np.random.default_rng(seed)
    workload, policy = replay(group, classes, requests=requests, rng=rng)
    has_watermark = version_tuple(engine_version) >= WATERMARK_MIN_VERSION
    usable = (base.blocks_for(group.kv_capacity_tokens) - 1) * base.block_size
    rates = np.array([c.rate_rps for c in classes])
    footprint = float(sum(r * (c.inputs.mean() + c.reserve_tokens) for r, c in zip(rates, classes)) / rates.sum())
    s_plan = max(1, int(usable // max(footprint, 1.0)))
    seqs = sorted({base.max_num_seqs} | {min(base.max_num_seqs, max(MIN_SEQS, s)) for s in
                                         (s_plan // 2, s_plan, 2 * s_plan)}, reverse=True)
    rhos = [c.rho for c in classes]
    policies: list[tuple[str, tuple[int, ...] | None]] = [("fcfs", None)]
    if len(classes) > 1 and max(rhos) / min(rhos) >= PRIORITY_RATIO:
        order = sorted(range(len(classes)), key=lambda i: -rhos[i])
        ranks = [0] * len(classes)
        for rank, i in enumerate(order):
            ranks[i] = rank
        policies.append(("priority", tuple(ranks)))
    rho_of = np.array(rhos)[workload.class_index]
    rows: list[tuple[tuple[float, int, str], tuple[float, float, int, float, float], tuple[int, ...] | None]] = []
    for w in WATERMARKS if has_watermark else (0.0,):
        for s in seqs:
            for name, prio in policies:
                cfg = base.model_copy(update={"watermark": w, "max_num_seqs": s, "policy": name,
                                              "class_priority": prio,
                                              "max_num_batched_tokens": max(base.max_num_batched_tokens, s)})
                res = simulate_engine(workload, [group], policy, rng=np.random.default_rng(seed), engine=cfg,
                                      keep_requests=True)
                assert res.outcomes is not None
                rows.append(((w, s, name), _measure(res, res.outcomes.recomputed, rho_of, requests), prio))
    stock = next(m for key, m, _ in rows if key == (0.0, base.max_num_seqs, "fcfs"))
    measures = []
    best: tuple[tuple[float, float, float, int, int], tuple[float, int, str], tuple[int, ...] | None] | None = None
    for (w, s, name), (priced, stalled, pre, p99, good), prio in rows:
        eligible = p99 <= (1 + tolerance) * stock[3] and good >= (1 - tolerance) * stock[4]
        measures.append(KnobMeasure(watermark=w, max_num_seqs=s, policy=name, eligible=eligible,
                                    priced_recompute=priced, stalled_frac=stalled, preemptions=pre, e2e_p99_s=p99,
                                    goodput_rps=good))
        if eligible:
            change = int(w > 0) + int(s != base.max_num_seqs) + int(name != "fcfs")
            key = (priced, stalled, change, -s, 0 if name == "fcfs" else 1)
            if best is None or key < best[0]:
                best = (key, (w, s, name), prio)
    assert best is not None  # stock vLLM itself is always eligible
    (w, s, name), prio = best[1], best[2]
    names = [c.name for c in classes]
    if (w, s, name) == (0.0, base.max_num_seqs, "fcfs"):
        reason = (f"stock vLLM is best on the replay ({requests} requests): no candidate lowered rho-priced "
                  f"recompute ({stock[0]:.1f} token slots/request) within {tolerance:.0%} of its P99 e2e and goodput")
    else:
        reason = (f"rho-priced recompute {stock[0]:.1f} -> {best[0][0]:.1f} token slots/request, stalled "
                  f"{stock[1]:.3f} -> {best[0][1]:.3f}, within {tolerance:.0%} of stock P99 e2e and goodput on the "
                  f"replay ({requests} requests)")
    if not has_watermark:
        reason += f"; watermark not used: vLLM {engine_version} has no --watermark (needs >= 0.33)"
    return KnobChoice(group=group.name, max_num_seqs=s, watermark=w if has_watermark else None,
                      scheduling_policy=name, class_priority=dict(zip(names, prio)) if prio else {},
                      reason=reason, candidates=tuple(measures))


def knobs_for_plan(plan: Plan, instance: Instance, *, engine_version: str = "0.33.0", base: EngineConfig | None = None,
                   requests: int = 2000, seed: int = 0) -> dict[str, KnobChoice]:
    """The operator's entry: knobs per group of a plan, from the instance's histories (pooled windows), the classes'
    planned rates on each group (lambda_i pi_ik), their reservations and cost ratios. Groups without traffic or
    without a feasible layout get no entry."""
    from kvcore.profiles import resolve

    by_name = {c.name: c for c in instance.classes}
    specs = {g.name: g for g in instance.groups}
    out: dict[str, KnobChoice] = {}
    for gp in plan.groups:
        if gp.replicas <= 0 or gp.tp <= 0:
            continue
        gs = specs[gp.name]
        prof = resolve(gs.gpu_type, gs.model, gp.tp, gp.pp, instance.profiles)
        group = SimGroup.from_profile(gp.name, gp.replicas, prof)
        group = group.model_copy(update={"kv_capacity_tokens": max(1, math.floor(gp.kv_capacity_tokens))})
        classes = []
        for cp in plan.classes:
            share = cp.routing.get(gp.name, 0.0) if cp.admitted else 0.0
            spec = by_name[cp.name]
            if share <= 0 or spec.arrival_rate <= 0:
                continue
            samples = spec.samples()
            c_p, c_w = spec.costs()
            classes.append(KnobClass.build(cp.name, spec.arrival_rate * share,
                                           np.full(samples.values.size, spec.input_tokens), samples.values,
                                           cp.reserve_tokens, c_p / c_w if c_w > 0 else 1e6, samples.weights))
        if classes:
            out[gp.name] = choose_knobs(group, classes, base=base, engine_version=engine_version, requests=requests,
                                        seed=seed)
    return out
