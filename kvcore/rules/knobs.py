"""Knobs that stock vLLM obeys, chosen per group so it comes as close as it can to the plan's reservations.

A reservation protects running requests from preemption; stock vLLM has three knobs that do part of that job:
``--watermark`` (free blocks held back at admission), ``--max-num-seqs`` (a cap on concurrency) and
``--scheduling-policy priority`` with a priority per request (which class is served first and preempted last).
No formula maps reservations to them faithfully, so the rule *measures*: it replays the group's recent history
(the classes' paired prompt/output samples at their planned arrival rates, with the history's own arrival pattern
when it has timestamps, :func:`replay`) through the vLLM engine
model (:mod:`kvcore.sim.engine`) under the candidates and keeps the one the plan prices best.

**Candidates** (all combinations):

- watermark W in ``{0, 0.01, 0.02, 0.05, 0.1}`` (only for vLLM >= 0.33, which has the flag; older engines keep 0);
- max_num_seqs S in ``{S_0} ∪ {S_plan / 2, S_plan, 2 S_plan}`` clipped to ``[8, S_0]``, where S_0 is the current
  (vLLM default 256) and ``S_plan = usable tokens / mean(prompt + y)``: how many requests the plan's reservations
  let one replica hold, the concurrency the reservation model admits;
- ``fcfs``, and ``priority`` when the classes' cost ratios differ by at least ``PRIORITY_RATIO`` (2x): priorities by
  decreasing rho (the class whose overflow costs most is admitted first and preempted last).

**Choice.** Each candidate runs on ``replays`` (2) independent replays. It is eligible when, on every replay, its
P99 end-to-end latency is at most ``(1 + tolerance)`` times stock vLLM's and its goodput at least
``(1 - tolerance)`` times (tolerance 1%, half the 2% the knobs may cost), and it leaves no more requests outside the
latency targets (TTFT <= ``ttft_slo_s``, 2 s, and mean time per output token <= ``tpot_slo_s``, 0.1 s) than stock
vLLM does. The last condition is what keeps the knobs from costing SLO capacity: a fleet sized so that 99% of
requests meet their targets has a 1% margin, and a 1% goodput tolerance alone would let the knobs spend all of it
(a watermark that holds blocks back queues requests, and their TTFT is what fails first). The plan prices what a
reservation prevents as ``sum_j rho_j x recomputed tokens_j`` per request (token-slot units; rho = c_p / c_w of the
request's class), averaged over the replays. Among eligible candidates whose price is within 10% of the best
reduction (the knee: a knob pushed to its extreme on the replay risks more latency on real traffic than the replay
shows), the rule takes the least intrusive (:func:`intrusiveness`: 10 x watermark + halvings of max_num_seqs + 1
for priorities), then the cheapest. If nothing beats stock vLLM, the knobs stay at stock values. The measures of the candidates measured are returned, so
the operator can show why.

**Search.** The choice is defined on the full table (every candidate on every replay), but it is reached by
measuring only what it depends on (:mod:`kvcore.rules.knob_search`: candidates dropped at their first replay out of
tolerance, bounds on the floor instead of the floor, measurements reused where a max_num_seqs cap never bound):
the same choice, checked against the full table by ``tests/unit/kvcore/rules/test_knob_search.py`` and
``benchmarks/rule_agreement.py``; ``search="full"`` measures everything. The replays are shared with the
reservation rule (:mod:`kvcore.rules.replays`), and each answer says the work it took (requests simulated).

**Knobs in force.** A caller that already runs some knobs passes them as ``current`` (watermark, max_num_seqs,
policy). They are measured on the same replays as one more candidate, and kept when they are eligible and inside
that knee: changing them would restart the engines for less than a tenth of the best reduction. (Without this, the
``S_plan`` candidates move with every fresh history window and the choice would wobble from one re-plan to the
next.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from pydantic import BaseModel, ConfigDict, Field

from kvcore.errors import InputError
from kvcore.planner.instance import Instance
from kvcore.rules.knob_search import Cand, decide, full_table, knob_replays
from kvcore.rules.knob_search import search as search_knobs
from kvcore.planner.planmodel import Plan
from kvcore.rules.classes import KnobClass
from kvcore.rules.replays import REQUESTS, GroupReplays, ReplayStore
from kvcore.sim.engine import EngineConfig
from kvcore.sim.types import SimGroup, SimPolicy, Workload

WATERMARKS = (0.0, 0.01, 0.02, 0.05, 0.1)
"""Watermark candidates: vLLM's default 0 and fractions of the KV blocks up to 10%."""
PRIORITY_RATIO = 2.0
"""Classes' cost ratios must differ by this factor (max rho / min rho) before priorities are tried."""
MIN_SEQS = 8
"""Smallest max_num_seqs tried: below it a replica idles its GPU between long requests."""
WATERMARK_MIN_VERSION = (0, 33, 0)
"""``--watermark`` exists in vLLM from 0.33 on."""
Knobs = tuple[float, int, str]
"""(watermark, max_num_seqs, policy) of an engine, as ``current`` knobs are passed."""


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
    slo_violations: int = Field(default=0, description="Requests outside the latency targets, summed over the "
                                "replays measured.")


class KnobChoice(BaseModel):
    """The knobs for one group, with the evidence."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    group: str
    max_num_seqs: int
    watermark: float | None = Field(description="None when the engine is older than 0.33 (no --watermark).")
    scheduling_policy: str
    class_priority: dict[str, int] = Field(default_factory=dict, description="Per class; empty under fcfs.")
    reason: str
    candidates: tuple[KnobMeasure, ...] = Field(default=(), description="The candidates measured (all of them "
                                                "with search='full'), each averaged over the replays it ran on.")
    work: int = Field(default=0, description="Requests simulated through the engine model to choose.")

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


def intrusiveness(watermark: float, max_num_seqs: int, policy: str, stock_seqs: int) -> float:
    """How far a candidate moves from stock vLLM (dimensionless): 10 per unit of watermark (0.1 of the blocks
    counts 1), 1 per halving of max_num_seqs, 1 for priorities."""
    return 10.0 * watermark + math.log2(stock_seqs / max_num_seqs) + (1.0 if policy != "fcfs" else 0.0)


def _candidates(group: SimGroup, classes: Sequence[KnobClass], base: EngineConfig, has_watermark: bool,
                current: Knobs | None = None) -> list[tuple[float, int, str, tuple[int, ...] | None]]:
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
    out = [(w, s, name, prio) for w in (WATERMARKS if has_watermark else (0.0,)) for s in seqs
           for name, prio in policies]
    tried = dict(policies)
    if current is not None and current[2] in tried and current[1] >= 1 and (current[0] == 0.0 or has_watermark):
        key = (float(current[0]), int(current[1]), current[2], tried[current[2]])
        if key not in out:
            out.append(key)
    return out


def choose_knobs(group: SimGroup, classes: Sequence[KnobClass], *, base: EngineConfig | None = None,
                 engine_version: str = "0.33.0", requests: int = REQUESTS, replays: int = 2, tolerance: float = 0.01,
                 seed: int = 0, arrivals_s: ArrayLike | None = None, current: Knobs | None = None,
                 search: str = "fast", shared: GroupReplays | None = None, ttft_slo_s: float = 2.0,
                 tpot_slo_s: float = 0.1) -> KnobChoice:
    """The knobs for one group (module docstring). ``replays`` independent replays of ``requests`` requests each
    (the most recent stretches of ``arrivals_s``, the history's arrival times in seconds, when known, so bursts are
    kept; else Poisson); a candidate must be eligible on every one. ``current``: the knobs in force, kept while they
    are inside the knee (module docstring). ``search``: ``fast`` measures only what the choice depends on
    (:mod:`kvcore.rules.knob_search`: the same choice), ``full`` every candidate on every replay. ``shared``: the group's
    replays built already (:mod:`kvcore.rules.replays`, with these classes and settings; ``requests``, ``replays``,
    ``seed`` and ``arrivals_s`` are then theirs). ``ttft_slo_s``, ``tpot_slo_s``: the latency targets (s) a request
    is judged by. Pure: seeded, no I/O."""
    base = base if base is not None else EngineConfig()
    if not classes:
        raise InputError("knobs.classes", "at least one class is needed")
    if replays < 1:
        raise InputError("knobs.replays", f"must be >= 1, got {replays}")
    if search not in ("fast", "full"):
        raise InputError("knobs.search", f"must be 'fast' or 'full', got {search!r}")
    for name, value in (("ttft_slo_s", ttft_slo_s), ("tpot_slo_s", tpot_slo_s)):
        if not value > 0:
            raise InputError(f"knobs.{name}", f"must be > 0 seconds, got {value}")
    has_watermark = version_tuple(engine_version) >= WATERMARK_MIN_VERSION
    times = None if arrivals_s is None else np.asarray(arrivals_s, dtype=np.float64).ravel()
    gr = shared if shared is not None else GroupReplays(group, classes, requests=requests, replays=replays,
                                                        seed=seed, arrivals_s=times, base=base)
    cands = _candidates(group, classes, base, has_watermark, current)
    stock_key = (0.0, base.max_num_seqs, "fcfs", None)
    now = next((c for c in cands if current is not None and c[:3] == current), None)
    work0 = gr.work
    rp = knob_replays(gr, (float(ttft_slo_s), float(tpot_slo_s)))

    def intr(c: Cand) -> float:
        return intrusiveness(c[0], c[1], c[2], base.max_num_seqs)

    if search == "full":
        table = full_table(rp, cands, stock_key, tolerance)
        found = decide(table, cands, stock_key, now, intr)
        assert found is not None  # a complete table always decides
    else:
        table, found = search_knobs(rp, cands, stock_key, now, tolerance, intr)
    measures = []
    for c, per_run in table.runs.items():
        mean = [float(np.mean([m[i] for m in per_run])) for i in range(5)]
        measures.append(KnobMeasure(watermark=c[0], max_num_seqs=c[1], policy=c[2], eligible=table.eligible[c],
                                    priced_recompute=mean[0], stalled_frac=mean[1],
                                    preemptions=int(sum(m[2] for m in per_run)), e2e_p99_s=mean[3],
                                    goodput_rps=mean[4], slo_violations=int(sum(m[5] for m in per_run))))
    stock_priced = table.priced(stock_key)
    w, s, name, prio = found.choice
    best = table.priced(found.choice)
    names = [c.name for c in classes]
    # Kept short: the operator records one reason per group in the KVPlan's status, at fleet scale too.
    targets = f"its SLO misses (TTFT {ttft_slo_s:g} s, TPOT {tpot_slo_s:g} s)"
    where = (f"{rp.count} replays x {gr.requests} requests, {len(table.runs)} of {len(cands)} candidates measured"
             + ("" if table.complete else " (enough to decide)"))
    if found.kept and found.choice != stock_key:
        gentlest = found.gentlest
        other = ("" if gentlest == found.choice else f"; the gentlest such candidate measured would be watermark "
                 f"{gentlest[0]:g}, max_num_seqs {gentlest[1]}, {gentlest[2]}")
        reason = (f"knobs in force kept (watermark {w:g}, max_num_seqs {s}, {name}): rho-priced recompute "
                  f"{best:.1f} token slots/request is within the knee of the best reduction ({stock_priced:.1f} "
                  f"stock -> {found.floor:.1f}){other}; {where}")
    elif found.choice == stock_key:
        reason = (f"stock vLLM kept: no candidate cut rho-priced recompute ({stock_priced:.1f} token slots/request) "
                  f"within {tolerance:.0%} of its P99 and goodput and {targets}; {where}")
    else:
        stalled = (float(np.mean([m[1] for m in table.runs[stock_key]])),
                   float(np.mean([m[1] for m in table.runs[found.choice]])))
        reason = (f"rho-priced recompute {stock_priced:.1f} -> {best:.1f} token slots/request, stalled "
                  f"{stalled[0]:.4f} -> {stalled[1]:.4f}, within {tolerance:.0%} of stock P99 and goodput and "
                  f"{targets}; {where}")
    if not has_watermark:
        reason += f"; watermark not used: vLLM {engine_version} has no --watermark (needs >= 0.33)"
    return KnobChoice(group=group.name, max_num_seqs=s, watermark=w if has_watermark else None,
                      scheduling_policy=name, class_priority=dict(zip(names, prio)) if prio else {},
                      reason=reason, candidates=tuple(measures), work=gr.work - work0)


def plan_groups(plan: Plan, instance: Instance) -> list[tuple[SimGroup, list[KnobClass]]]:
    """Each planned group with traffic as the engine model sees it (replicas, KV capacity and step times of its
    layout) and the classes routed to it (planned rate lambda_i pi_ik, history pooled over windows, reservation,
    rho = c_p / c_w as the plan used it). Groups without traffic or without a feasible layout are left out."""
    from kvcore.profiles import resolve

    by_name = {c.name: c for c in instance.classes}
    specs = {g.name: g for g in instance.groups}
    out: list[tuple[SimGroup, list[KnobClass]]] = []
    for gp in plan.groups:
        if gp.replicas <= 0 or gp.tp <= 0:
            continue
        gs = specs[gp.name]
        prof = resolve(gs.gpu_type, gs.model, gp.tp, gp.pp, instance.profiles, instance.models,
                       instance.gpu_types)
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
            out.append((group, classes))
    return out


def knobs_for_plan(plan: Plan, instance: Instance, *, engine_version: str = "0.33.0", base: EngineConfig | None = None,
                   requests: int = REQUESTS, seed: int = 0, current: Mapping[str, Knobs] | None = None,
                   store: ReplayStore | None = None, search: str = "fast", ttft_slo_s: float = 2.0,
                   tpot_slo_s: float = 0.1) -> dict[str, KnobChoice]:
    """The operator's entry: knobs per group of a plan (:func:`plan_groups`: the instance's histories, pooled
    windows, the classes' planned rates on each group (lambda_i pi_ik), their reservations and cost ratios). Groups
    without traffic or without a feasible layout get no entry. ``current``: group -> the knobs its engines run now
    (kept while inside the knee, :func:`choose_knobs`). ``store``: the re-plan's shared replays
    (:mod:`kvcore.rules.replays`; the reservation rule measures on the same ones, and groups in the same situation
    share them); each answer's ``work`` is what it simulated. ``ttft_slo_s``, ``tpot_slo_s``: the group's latency
    targets (s; :func:`choose_knobs`)."""
    store = store if store is not None else ReplayStore()
    out = {}
    for group, classes in plan_groups(plan, instance):
        gr = store.get(group, classes, requests=requests, seed=seed, base=base)
        out[group.name] = choose_knobs(group, classes, base=base, engine_version=engine_version, seed=seed,
                                       current=(current or {}).get(group.name), search=search, shared=gr,
                                       ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s)
    return out
