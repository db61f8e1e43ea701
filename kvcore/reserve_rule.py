"""Reservations that pay: per class, reserve nothing, the plan's DRO reservation, or something in between, chosen by
replaying recent history through the vLLM engine model with kvplan's gate (:mod:`kvcore.sim.gate`).

A reservation trades stalls and recompute against concurrency. The plan's reservation y_i is a per-request
newsvendor quantile; the gate holds it for every running request at once, which the newsvendor does not price, and
often holds far more than the pool needs. So the rule *measures* both sides on the group's recent history
(:func:`kvcore.knobs.replay`: the classes' (prompt, output) rows at their planned rates, with the history's own
arrival pattern when known) and keeps the reservations whose cost is lowest.

**Cost** of reservations y = (y_i) on one replay, token slots per request (a token slot: one token of work or one
token interval ``t_tok`` of a stream's time; :mod:`kvcore.preemption`), against the same replay with nothing
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
``MIN_GAIN`` (1 token slot per request) less than y = 0 on *every* replay, or the rule returns y = 0 for every class; and a class whose own reservation does not lower the cost
(its y set back to 0, the others kept) gets 0. Each (reservation vector) replay is simulated once
(:class:`ReplaySet` memoises), so sweeping rho re-prices the same replays. Pure: seeded, no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from pydantic import BaseModel, ConfigDict, Field

from kvcore.errors import InputError
from kvcore.instance import Instance
from kvcore.knobs import KnobClass, history_segment, plan_groups, replay
from kvcore.planmodel import Plan
from kvcore.preemption import PreemptionPrice, class_prices, context_tokens, harm_tokens, token_interval_s
from kvcore.samples import weighted_quantile
from kvcore.sim.engine import EngineConfig, simulate_engine
from kvcore.sim.types import SimGroup, SimPolicy, Workload

SCALES = (0.125, 0.25, 0.5, 1.0)
"""Fractions of the plan's reservation tried per class."""
QUANTILES = (0.25, 0.5, 0.75)
"""Quantiles of a class's outputs tried per class."""
ROUNDS = 2
"""Coordinate-descent rounds over the classes."""
TAIL = 0.01
"""Weight of the P99 latency change: the share of requests the P99 stands for."""
MIN_GAIN = 1.0
"""A reservation must lower the cost by at least this much (token slots per request) on every replay to be kept:
less is within the replays' noise (about 0.01 s of mean latency, a fraction of a token slot)."""
NS = 1e-9


@dataclass(frozen=True)
class _Raw:
    """One replay of one reservation vector: what the cost needs, before rho."""

    harm: NDArray[np.float64]
    """Per class, sum_j h_j over its requests (token slots)."""
    p99_s: float
    mean_s: float
    good_share: float
    stalled_frac: float
    preemptions: int
    recomputed: int
    goodput_rps: float


class ReplaySet:
    """The rule's replays of one group's history, and every reservation vector simulated on them (memoised)."""

    def __init__(self, group: SimGroup, classes: Sequence[KnobClass], *, base: EngineConfig | None = None,
                 requests: int = 3000, replays: int = 2, seed: int = 0, arrivals_s: ArrayLike | None = None,
                 ttft_slo_s: float = 2.0, tpot_slo_s: float = 0.1) -> None:
        if not classes:
            raise InputError("reserves.classes", "at least one class is needed")
        if replays < 1:
            raise InputError("reserves.replays", f"must be >= 1, got {replays}")
        self.group = group
        self.classes = tuple(classes)
        self.engine = (base if base is not None else EngineConfig()).model_copy(update={"admission": "gate"})
        self.seed = seed
        self.slo = (float(ttft_slo_s), float(tpot_slo_s))
        times = None if arrivals_s is None else np.asarray(arrivals_s, dtype=np.float64).ravel()
        self.runs: list[Workload] = []
        for k in range(replays):
            workload, _ = replay(group, classes, requests=requests, rng=np.random.default_rng(seed + k),
                                 arrivals_s=history_segment(times, requests, replays, k))
            self.runs.append(workload)
        ins = np.concatenate([w.input_tokens for w in self.runs])
        outs = np.concatenate([w.output_tokens for w in self.runs])
        self.t_tok = token_interval_s(group, self.engine, context_tokens(ins, outs))
        """Seconds per token at the operating batch of the replayed history."""
        self.mean_output = float(outs.mean())
        self._memo: dict[tuple[int, ...], tuple[_Raw, ...]] = {}
        self.prices: tuple[dict[str, PreemptionPrice], ...] = ()
        """Per replay, the engine's preemption price per class with nothing reserved (filled by the first measure)."""

    @property
    def simulated(self) -> int:
        """Reservation vectors simulated so far."""
        return len(self._memo)

    def measure(self, ys: tuple[int, ...]) -> tuple[_Raw, ...]:
        """Each replay under the gate with reservations ``ys`` (tokens per class)."""
        if ys not in self._memo:
            raws = []
            prices = []
            for workload in self.runs:
                policy = SimPolicy.from_arrays([float(y) for y in ys], np.ones((len(ys), 1)), cp=1.0, cw=1.0)
                res = simulate_engine(workload, [self.group], policy, rng=np.random.default_rng(self.seed),
                                      engine=self.engine, keep_requests=True)
                o = res.outcomes
                assert o is not None
                h = harm_tokens(o, self.t_tok)
                cls = workload.class_index
                harm = np.array([float(h[cls == i].sum()) for i in range(len(self.classes))])
                xi = workload.output_tokens
                ttft = o.first_token_ns * NS - workload.arrival_s
                e2e = o.finish_ns * NS - workload.arrival_s
                tpot = np.where(xi > 1, (e2e - ttft) / np.maximum(xi - 1, 1), 0.0)
                good = (o.finish_ns >= 0) & (ttft <= self.slo[0]) & (tpot <= self.slo[1])
                raws.append(_Raw(harm, res.e2e.p99 or 0.0, res.e2e.mean or 0.0, float(good.mean()),
                                 res.stalled_frac or 0.0, res.preemptions, res.recomputed_tokens, res.goodput_rps))
                if not any(ys):
                    prices.append(class_prices(workload, res, self.t_tok, [c.name for c in self.classes]))
            self._memo[ys] = tuple(raws)
            if prices:
                self.prices = tuple(prices)
        return self._memo[ys]

    def costs(self, ys: tuple[int, ...], rho: NDArray[np.float64]) -> NDArray[np.float64]:
        """J(ys) on each replay (token slots per request; module docstring)."""
        zero = self.measure(tuple(0 for _ in ys))
        out = []
        for r, z, w in zip(self.measure(ys), zero, self.runs):
            harm = float((rho * r.harm).sum()) / len(w)
            latency = (r.mean_s - z.mean_s) + TAIL * (r.p99_s - z.p99_s)
            out.append(harm + latency / self.t_tok + (z.good_share - r.good_share) * self.mean_output)
        return np.array(out)

    def candidates(self, c: KnobClass) -> list[int]:
        """0, the plan's y scaled, and output quantiles, whole tokens, ascending."""
        q = [_quantile(c, p) for p in QUANTILES]
        ys = {0} | {int(round(f * c.reserve_tokens)) for f in SCALES} | {int(round(v)) for v in q}
        return sorted(ys)


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


def class_rho(classes: Sequence[KnobClass], engine_priced: Collection[str] = ()) -> NDArray[np.float64]:
    """The rule's weight of each class's harm: its rho (c_p / c_w), or 1 for classes priced by the engine model
    (an SLO class under ``slo_price="engine"``: its preemptions cost exactly their price in token slots)."""
    return np.array([1.0 if c.name in engine_priced else c.rho for c in classes])


def _quantile(c: KnobClass, p: float) -> float:
    w = c.weights if c.weights is not None else np.full(c.outputs.size, 1.0 / c.outputs.size)
    return weighted_quantile(c.outputs, w, p)


def _source(c: KnobClass, y: int) -> str:
    if y == 0:
        return "none"
    for f in SCALES:
        if y == int(round(f * c.reserve_tokens)):
            return "dro" if f == 1.0 else f"dro*{f:g}"
    for p in QUANTILES:
        if y == int(round(_quantile(c, p))):
            return f"q{round(100 * p)}"
    return "custom"


def choose_reserves(group: SimGroup, classes: Sequence[KnobClass], *, engine_priced: Collection[str] = (),
                    replays: ReplaySet | None = None, **replay_args: object) -> ReserveChoice:
    """The reservations for one group (module docstring). ``replays``: an existing :class:`ReplaySet` of the same
    group and classes (re-priced at these classes' rho; rho may differ, the history may not); otherwise one is built
    from ``replay_args`` (``base``, ``requests``, ``replays``, ``seed``, ``arrivals_s``, ``ttft_slo_s``,
    ``tpot_slo_s``)."""
    rs = replays if replays is not None else ReplaySet(group, classes, **replay_args)  # type: ignore[arg-type]
    if len(rs.classes) != len(classes):
        raise InputError("reserves.classes", f"the replays hold {len(rs.classes)} classes, {len(classes)} given")
    rho = class_rho(classes, engine_priced)
    k = len(classes)
    zero = tuple(0 for _ in range(k))
    cands = [rs.candidates(c) for c in classes]
    seen: dict[tuple[int, ...], NDArray[np.float64]] = {}

    def cost(ys: tuple[int, ...]) -> float:
        if ys not in seen:
            seen[ys] = rs.costs(ys, rho)
        return float(seen[ys].mean())

    best = zero
    family = [tuple(int(round(f * c.reserve_tokens)) for c in classes) for f in SCALES]
    family += [tuple(int(round(_quantile(c, p))) for c in classes) for p in QUANTILES]
    for ys in family:
        if cost(ys) < cost(best):
            best = ys
    for _ in range(ROUNDS):
        moved = False
        for i in range(k):
            for y in cands[i]:
                ys = best[:i] + (y,) + best[i + 1:]
                if cost(ys) < cost(best) - 1e-12:
                    best, moved = ys, True
        if not moved:
            break
    for i in range(k):  # a class whose reservation does not pay gets none
        ys = best[:i] + (0,) + best[i + 1:]
        if best[i] and cost(ys) <= cost(best):
            best = ys
    pays = bool(np.all(seen.get(best, rs.costs(best, rho)) <= seen.get(zero, rs.costs(zero, rho)) - MIN_GAIN))
    if not pays:
        best = zero
    names = [c.name for c in classes]
    measures = []
    for ys, js in seen.items():
        raws = rs.measure(ys)
        measures.append(ReserveMeasure(
            reserves=dict(zip(names, ys)), cost=float(js.mean()),
            stalled_frac=float(np.mean([r.stalled_frac for r in raws])),
            preemptions=int(sum(r.preemptions for r in raws)), recomputed_tokens=int(sum(r.recomputed for r in raws)),
            e2e_p99_s=float(np.mean([r.p99_s for r in raws])),
            goodput_rps=float(np.mean([r.goodput_rps for r in raws]))))
    j0, j1 = cost(zero), cost(best)
    where = f"{len(rs.runs)} replay(s) of {len(rs.runs[0])} requests, t_tok {rs.t_tok * 1e3:.1f} ms"
    if best == zero:
        reason = (f"nothing reserved: no reservation lowered the cost below y = 0's {j0:.1f} token slots/request on "
                  f"every replay ({where})")
    else:
        reason = f"cost {j0:.1f} -> {j1:.1f} token slots/request against y = 0 ({where})"
    return ReserveChoice(group=group.name, reserves=dict(zip(names, best)),
                         sources={c.name: _source(c, y) for c, y in zip(classes, best)},
                         rho=dict(zip(names, (float(r) for r in rho))), token_interval_s=rs.t_tok, reason=reason,
                         candidates=tuple(measures))


def engine_rho(replays: ReplaySet) -> dict[str, float]:
    """Per class, rho_e = C h (:mod:`kvcore.preemption`): the engine's price of one token past the reservation,
    from the replays with nothing reserved (mean over replays)."""
    replays.measure(tuple(0 for _ in replays.classes))
    return {c.name: float(np.mean([p[c.name].rho for p in replays.prices])) for c in replays.classes}


def reserves_for_plan(plan: Plan, instance: Instance, *, slo_price: str = "engine", base: EngineConfig | None = None,
                      requests: int = 3000, seed: int = 0) -> dict[str, ReserveChoice]:
    """The operator's entry: reservations per group of a plan (:func:`kvcore.knobs.plan_groups`). ``slo_price``:
    ``engine`` prices the harm of classes that give an SLO by the engine model (weight 1), ``eq8`` by seed eq. 8's
    rho as the plan did. Groups without traffic or a feasible layout get no entry."""
    if slo_price not in ("engine", "eq8"):
        raise InputError("slo_price", f"must be 'engine' or 'eq8', got {slo_price!r}")
    slo_classes = {c.name for c in instance.classes if c.slo is not None} if slo_price == "engine" else set()
    return {group.name: choose_reserves(group, classes, engine_priced=slo_classes, base=base, requests=requests,
                                        seed=seed) for group, classes in plan_groups(plan, instance)}
