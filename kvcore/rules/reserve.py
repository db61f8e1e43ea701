"""Reservations that pay: per class, reserve nothing, the plan's DRO reservation, or something in between, chosen by
replaying recent history through the vLLM engine model with kvplan's gate (:mod:`kvcore.sim.gate`).

A reservation trades stalls and recompute against concurrency. The plan's reservation y_i is a per-request
newsvendor quantile; the gate holds it for every running request at once, which the newsvendor does not price, and
often holds far more than the pool needs. So the rule *measures* both sides on the group's recent history
(:func:`kvcore.rules.classes.replay`: the classes' (prompt, output) rows at their planned rates, with the history's own
arrival pattern when known) and keeps the reservations whose cost is lowest.

**Cost** of reservations y = (y_i) on one replay, token slots per request (a token slot: one token of work or one
token interval ``t_tok`` of a stream's time; :mod:`kvcore.rules.preemption`), against the same replay with nothing
reserved (y = 0: the gate then adds only the claims of running requests still prefilling, so nearly stock vLLM):

    J(y) = H(y) + [mean e2e(y) - mean e2e(0) + TAIL (P99(y) - P99(0))] / t_tok + [g(0) - g(y)] * mean(xi)
    H(y) = (1/n) sum_j w_j * h_j(y),       h_j = R_j + S_j / t_tok if request j was preempted, else 0

- H: the stall and recompute side, each preemption at its price in token slots (recompute tokens R_j plus the stall
  S_j converted by the step time), weighted by w_j: the class's rho = c_p / c_w for a class with costs, or 1 for a
  class priced by the engine (its harm already is the preemption's price in token slots, :func:`class_rho`);
- the concurrency side: the end-to-end latency the reservation adds, in token intervals: the mean (the memory-time
  the gate holds back, by Little's law) plus the P99 change weighted by the 1% of requests it stands for
  (``TAIL``); and the good requests it loses (share of requests meeting TTFT <= ``ttft_slo_s`` and mean time per
  output token <= ``tpot_slo_s``), each priced at the mean output it would have delivered. Both can be negative:
  less recompute can also make every request faster.

**Candidates** per class: 0, the plan's y_i scaled by ``SCALES`` (1/8, 1/4, 1/2, 1) and the class's output
quantiles ``QUANTILES`` (0.25, 0.5, 0.75), in whole tokens.

**Search.** From y = 0: the best of the candidates applied to every class alike (one scale or one quantile for the
group), then coordinate descent per class (each class over its candidates, the others fixed) for up to ``ROUNDS``
rounds while the mean cost falls. **Reserve nothing where it does not pay**: the result must cost at least
``MIN_GAIN`` (1 token slot per request) less than y = 0 on *every* replay, or the rule returns y = 0 for every
class; and a class whose own reservation does not lower the cost (its y set back to 0, the others kept) gets 0.
**Lose no request within SLO**: the result must also leave no more requests outside the latency targets than y = 0
on every replay, or the rule returns y = 0 (a fleet sized for 99% of requests within SLO has a 1% margin, which the
soft price of lost good requests in J would let a reservation spend). Each (reservation vector) replay is simulated
once (:class:`ReplaySet` memoises), so sweeping rho re-prices the same replays. Pure: seeded, no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from pydantic import BaseModel, ConfigDict, Field

from kvcore.errors import InputError
from kvcore.planner.instance import Instance
from kvcore.rules.classes import KnobClass
from kvcore.rules.knobs import plan_groups
from kvcore.planner.planmodel import Plan
from kvcore.rules.preemption import PreemptionPrice
from kvcore.rules.replay_set import QUANTILES, SCALES, ReplaySet, quantile
from kvcore.rules.replays import REQUESTS, ReplayStore
from kvcore.rules.reserve_search import fast_search, full_search
from kvcore.sim.engine import EngineConfig
from kvcore.sim.types import SimGroup

ROUNDS = 2
"""Coordinate-descent rounds over the classes."""
MIN_GAIN = 1.0
"""A reservation must lower the cost by at least this much (token slots per request) on every replay to be kept:
less is within the replays' noise (about 0.01 s of mean latency, a fraction of a token slot)."""


class ReserveMeasure(BaseModel):
    """One reservation vector's measures, averaged over the replays."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    reserves: dict[str, int]
    cost: float = Field(description="J, token slots per request (module docstring).")
    stalled_frac: float
    preemptions: int
    recomputed_tokens: int
    e2e_p99_s: float
    goodput_rps: float
    replays: int = Field(default=2, description="Replays measured (fewer when the search dropped it early).")


class ReserveChoice(BaseModel):
    """The reservations for one group, with the evidence."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    group: str
    reserves: dict[str, int] = Field(description="Per class, tokens (0: reserve nothing).")
    sources: dict[str, str] = Field(description="Per class, which candidate: none, dro*f or q<p>.")
    rho: dict[str, float] = Field(description="Per class, the weight of its stall and recompute in the cost.")
    token_interval_s: float
    reason: str
    candidates: tuple[ReserveMeasure, ...] = ()
    work: int = Field(default=0, description="Requests simulated through the engine model to choose.")


def class_rho(classes: Sequence[KnobClass], engine_priced: Collection[str] = ()) -> NDArray[np.float64]:
    """The rule's weight of each class's harm: its rho (c_p / c_w), or 1 for classes priced by the engine model
    (an SLO class under ``slo_price="engine"``: its preemptions cost exactly their price in token slots)."""
    return np.array([1.0 if c.name in engine_priced else c.rho for c in classes])


def _source(c: KnobClass, y: int) -> str:
    if y == 0:
        return "none"
    for f in SCALES:
        if y == int(round(f * c.reserve_tokens)):
            return "dro" if f == 1.0 else f"dro*{f:g}"
    for p in QUANTILES:
        if y == int(round(quantile(c, p))):
            return f"q{round(100 * p)}"
    return "custom"


def choose_reserves(group: SimGroup, classes: Sequence[KnobClass], *, engine_priced: Collection[str] = (),
                    replays: ReplaySet | None = None, search: str = "fast", work_limit: int | None = None,
                    **replay_args: object) -> ReserveChoice:
    """The reservations for one group (module docstring). ``replays``: an existing :class:`ReplaySet` of the same
    group and classes (re-priced at these classes' rho; rho may differ, the history may not); otherwise one is built
    from ``replay_args`` (``base``, ``requests``, ``replays``, ``seed``, ``arrivals_s``, ``ttft_slo_s``,
    ``tpot_slo_s``, ``shared``). ``search``: ``fast`` (the operator's) or ``full`` (:mod:`kvcore.rules.reserve_search`);
    ``work_limit``: requests the fast search may simulate on this group."""
    if search not in ("fast", "full"):
        raise InputError("reserves.search", f"must be 'fast' or 'full', got {search!r}")
    if work_limit is not None and work_limit < 0:
        raise InputError("reserves.work_limit", f"must be >= 0, got {work_limit}")
    rs = replays if replays is not None else ReplaySet(group, classes, **replay_args)  # type: ignore[arg-type]
    if len(rs.classes) != len(classes):
        raise InputError("reserves.classes", f"the replays hold {len(rs.classes)} classes, {len(classes)} given")
    rho = class_rho(classes, engine_priced)
    zero = tuple(0 for _ in classes)
    work0 = rs.work
    cands = [rs.candidates(c) for c in classes]
    family = [tuple(int(round(f * c.reserve_tokens)) for c in classes) for f in SCALES]
    family += [tuple(int(round(quantile(c, p))) for c in classes) for p in QUANTILES]
    found = (full_search(rs, classes, rho, family, cands, ROUNDS) if search == "full"
             else fast_search(rs, classes, rho, family, cands, ROUNDS, MIN_GAIN, work_limit))
    best = found.best
    names = [c.name for c in classes]
    where = f"{len(rs.runs)} replay(s) of {len(rs.runs[0])} requests, t_tok {rs.t_tok * 1e3:.1f} ms"
    if found.nothing_to_protect is not None:
        harm = ", ".join(f"{h:.2f}" for h in found.nothing_to_protect)
        reason = (f"nothing reserved: nothing to protect, stock vLLM's preemptions cost {harm} token slots/request "
                  f"on the replays, less than the {MIN_GAIN:g} a reservation must save on each ({where})")
        return ReserveChoice(group=group.name, reserves=dict(zip(names, zero)), sources=dict.fromkeys(names, "none"),
                             rho=dict(zip(names, (float(r) for r in rho))), token_interval_s=rs.t_tok,
                             reason=reason, work=rs.work - work0)
    pays = bool(np.all(np.array(found.costs[best]) <= np.array(found.costs[zero]) - MIN_GAIN))
    lost = [j for j in range(len(found.costs[best]))
            if rs.measure_on(best, j).good_share < rs.measure_on(zero, j).good_share]
    guarded = pays and bool(lost) and best != zero
    if not pays or lost:
        best = zero
    measures = []
    for ys, js in found.costs.items():
        raws = [rs.measure_on(ys, j) for j in range(len(js))]
        measures.append(ReserveMeasure(
            reserves=dict(zip(names, ys)), cost=float(np.mean(js)),
            stalled_frac=float(np.mean([r.stalled_frac for r in raws])),
            preemptions=int(sum(r.preemptions for r in raws)), recomputed_tokens=int(sum(r.recomputed for r in raws)),
            e2e_p99_s=float(np.mean([r.p99_s for r in raws])),
            goodput_rps=float(np.mean([r.goodput_rps for r in raws])), replays=len(js)))
    j0, j1 = found.mean(zero), found.mean(best)
    where += f", {len(found.costs)} vectors measured" + "".join(f"; {n}" for n in found.notes)
    if best == zero and guarded:
        reason = (f"nothing reserved: the cheapest reservations left more requests outside TTFT {rs.slo[0]:g} s / "
                  f"TPOT {rs.slo[1]:g} s than y = 0 on replay(s) {', '.join(map(str, lost))} ({where})")
    elif best == zero:
        reason = (f"nothing reserved: no reservation lowered the cost below y = 0's {j0:.1f} token slots/request on "
                  f"every replay ({where})")
    else:
        reason = f"cost {j0:.1f} -> {j1:.1f} token slots/request against y = 0 ({where})"
    return ReserveChoice(group=group.name, reserves=dict(zip(names, best)),
                         sources={c.name: _source(c, y) for c, y in zip(classes, best)},
                         rho=dict(zip(names, (float(r) for r in rho))), token_interval_s=rs.t_tok, reason=reason,
                         candidates=tuple(measures), work=rs.work - work0)


def engine_rho(replays: ReplaySet) -> dict[str, float]:
    """Per class, rho_e = C h (:mod:`kvcore.rules.preemption`): the engine's price of one token past the reservation,
    from the replays with nothing reserved (mean over replays)."""
    replays.measure(tuple(0 for _ in replays.classes))
    return {c.name: float(np.mean([p[c.name].rho for p in replays.prices])) for c in replays.classes}


def reserves_for_plan(plan: Plan, instance: Instance, *, slo_price: str = "engine", base: EngineConfig | None = None,
                      requests: int = REQUESTS, seed: int = 0, groups: Collection[str] | None = None,
                      bases: Mapping[str, EngineConfig] | None = None, priorities: Mapping[str, int] | None = None,
                      store: ReplayStore | None = None, search: str = "fast", work_limit: int | None = None,
                      ttft_slo_s: float = 2.0, tpot_slo_s: float = 0.1) -> dict[str, ReserveChoice]:
    """The operator's entry: reservations per group of a plan (:func:`kvcore.rules.knobs.plan_groups`). ``slo_price``:
    ``engine`` prices the harm of classes that give an SLO by the engine model (weight 1), ``eq8`` by seed eq. 8's
    rho as the plan did. Groups without traffic or a feasible layout get no entry; ``groups``: only these.
    ``bases``: per group, the engine settings the gate runs on (the group's knobs; default ``base``), with
    ``priorities`` (class -> vLLM request priority) under ``--scheduling-policy priority``. ``store``:
    the re-plan's shared replays (:mod:`kvcore.rules.replays`: the knob rule's stock runs are reused, and groups in
    the same situation share every measurement). ``work_limit``: per group (the fast search's). ``ttft_slo_s``,
    ``tpot_slo_s``: the latency targets (s) a request is judged by (the cost's good share and the rule's guard)."""
    for name, value in (("ttft_slo_s", ttft_slo_s), ("tpot_slo_s", tpot_slo_s)):
        if not value > 0:
            raise InputError(f"reserves.{name}", f"must be > 0 seconds, got {value}")
    if slo_price not in ("engine", "eq8"):
        raise InputError("slo_price", f"must be 'engine' or 'eq8', got {slo_price!r}")
    slo_classes = {c.name for c in instance.classes if c.slo is not None} if slo_price == "engine" else set()
    store = store if store is not None else ReplayStore()
    out = {}
    for group, classes in plan_groups(plan, instance):
        if groups is not None and group.name not in groups:
            continue
        gb = (bases or {}).get(group.name, base)
        if gb is not None and gb.policy == "priority":
            gb = gb.model_copy(update={"class_priority": tuple((priorities or {}).get(c.name, 0) for c in classes)})
        shared = store.get(group, classes, requests=requests, seed=seed, base=gb)
        key = f"reserves:{ttft_slo_s!r}:{tpot_slo_s!r}"
        rs = shared.memo.get(key)
        if not isinstance(rs, ReplaySet):
            rs = shared.memo[key] = ReplaySet(group, classes, shared=shared, ttft_slo_s=ttft_slo_s,
                                              tpot_slo_s=tpot_slo_s)
        choice = choose_reserves(group, classes, engine_priced=slo_classes, replays=rs, search=search,
                                 work_limit=work_limit)
        out[group.name] = choice.model_copy(update={"group": group.name})
    return out
