"""``kvcore evaluate --engine vllm``: stock vLLM, kvplan's knobs and kvplan's plugin on the same trace, fleet and
routing, through the vLLM engine model (:mod:`kvcore.sim.engine`).

**Protocol.** The split protocol: the first half of the trace is history, the second half is replayed. Requests are
two classes by prompt length (``short``: at most the history's median prompt, ``long``: above), each with its own
output distribution, both priced at the same rho = c_p / c_w.

**Fleet** (:class:`EngineFleet`): one group of ``replicas`` replicas of the measured profile (70B on 4 A100-80GB by
default) with ``kv_capacity_tokens`` KV tokens each (100,000: memory binds, the regime where a reservation
matters), vLLM's scheduling defaults (16-token blocks, 256 seqs, 2048 batched tokens, prefix caching).

**Load** (:func:`capacity_rps`, the project's one definition: ``--simulate``, ``--slo-capacity`` and the
benchmarks use it too). ``load`` is the arrival rate over the saturation rate of the fleet on the replayed requests,
measured in the engine model with prefill, chunking and preemption included
(:mod:`kvcore.evaluate.saturation`: every request queued at once on vLLM's defaults, requests finished per second
while the queue is full). The replay's arrival rate is ``load x capacity_rps``; the trace's own
timestamps are rescaled to it (keeping its burstiness), or Poisson when it has none (:func:`replay_workload`). Stated
in every report.

**Variants.**

- ``vllm-default``: vLLM 0.33's defaults;
- ``kvplan-knobs``: :func:`kvcore.rules.knobs.choose_knobs` on the history at this load (``--watermark``,
  ``--max-num-seqs``, priorities when rhos differ);
- ``kvplan-plugin``: kvplan's gate with the reservations that pay (:func:`kvcore.rules.reserve.choose_reserves` on
  the history at this load and rho: per class nothing, the plan's DRO reservation, or something in between; the
  full search, the rule as designed: the operator's fast search keeps 89-101% of its gain on fresh replays,
  ``benchmarks/rule_agreement.py``);
- ``kvplan-plugin-dro``: kvplan's gate with each class's plan reservation as it is (DRO, default radius, on its
  history at rho), kept so the comparison with the rule stays honest;
- ``kvplan-plugin+knobs``: what the operator deploys for a group with the plugin on and ``knobs: Auto`` (the
  default): the knob rule's settings, and the gate with the reservations that pay chosen on top of them (the
  reservation rule replays the history with the knobs the engines run, as the operator does: docs/operator.md).

**Measures** per row: preemptions, recomputed tokens, TTFT and e2e P50/P99 (s), ``stall_p99_s`` (P99 over requests
of the longest gap between two tokens), ``stalled_frac`` (share with a gap > 1 s), ``goodput_rps`` (requests with
TTFT <= ``ttft_slo_s`` and mean time per output token <= ``tpot_slo_s``, per second of the replay) and ``cost``
(waste + rho x overflow per finished request, token slots: waste = reserved slots never filled, (y - xi)^+ under the
gate, 0 otherwise; overflow = tokens recomputed after preemption).

The frontier sweeps rho for the plugin (the rule's and the raw DRO reservations, and ``rho=engine``: the rule with
the engine's preemption price, :mod:`kvcore.rules.preemption`) and (watermark, max_num_seqs) for stock vLLM; and, to
compare the two instruments themselves rather than a rule's choice, the gate's own setting as a grid the size of
stock's: per class, nothing or each of the history's output quantiles :data:`FRONTIER_QUANTILES`, at every
max_num_seqs of stock's grid (:func:`frontier_rows`). Every point is measured on the replay; none is chosen from it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kvcore.errors import InputError
from kvcore.evaluate.policies import get_policy
from kvcore.evaluate.saturation import saturation_rps
from kvcore.rules.classes import KnobClass
from kvcore.rules.knobs import KnobChoice, choose_knobs
from kvcore.profiles import roofline
from kvcore.rules.replay_set import ReplaySet
from kvcore.rules.reserve import ReserveChoice, choose_reserves, engine_rho
from kvcore.history.samples import History, Samples
from kvcore.sim import SimGroup, SimPolicy, Workload
from kvcore.sim.engine import EngineConfig, EngineOutcomes, EngineResult, meets_slo, simulate_engine
from kvcore.history.traces import Trace

DEFAULT_LOADS = (0.7, 0.9)
METHODS = ("vllm-default", "kvplan-knobs", "kvplan-plugin", "kvplan-plugin-dro", "kvplan-plugin+knobs")
FRONTIER_RHOS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
FRONTIER_WATERMARKS = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2)
FRONTIER_SEQS = (256, 128, 64, 32)
FRONTIER_QUANTILES = (0.25, 0.5, 0.75, 0.9)
"""The gate's grid on the frontier: per class, nothing or these quantiles of the class's history outputs."""
CLASSES = ("short", "long")


class EngineFleet(BaseModel):
    """The one evaluation fleet: the engine comparison (``--engine vllm``) and ``--simulate`` replay on it. Frozen;
    unknown keys rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    gpu_type: str = Field(default="A100-80GB", description="GPU type of the profile.")
    model: str = Field(default="llama-70b", description="Model of the profile (the paper's 70B).")
    tp: int = Field(default=4, ge=1, description="Tensor parallelism: 70B fits 4 A100-80GB with room for KV.")
    pp: int = Field(default=1, ge=1, description="Pipeline parallelism.")
    replicas: int = Field(default=2, ge=1, description="Replicas (8 GPUs, the paper's testbed size).")
    kv_capacity_tokens: int = Field(default=100_000, gt=0, description=(
        "KV tokens per replica; 100,000 (about a fifth of the profile's 483,680) so that memory binds."))
    prefill_tokens_per_s: float | None = Field(default=None, gt=0, description=(
        "Prefill rate per replica, tokens/s; default: the profile's (the step-time model's time to the first token "
        "of a 2,048-token prompt)."))
    ttft_slo_s: float = Field(default=2.0, gt=0, description="Goodput: time to first token at most this (s).")
    tpot_slo_s: float = Field(default=0.1, gt=0, description="Goodput: mean time per output token after the "
                              "first at most this (s): 10 tokens/s, a reading pace.")

    def good(self, workload: Workload, outcomes: EngineOutcomes) -> np.ndarray:
        """Per request: a good request of goodput (:func:`kvcore.sim.engine.meets_slo`) at this fleet's SLOs."""
        return meets_slo(workload, outcomes, ttft_slo_s=self.ttft_slo_s, tpot_slo_s=self.tpot_slo_s)

    def group(self) -> SimGroup:
        prof = roofline(self.gpu_type, self.model, self.tp, self.pp)
        group = SimGroup.from_profile(f"{self.model}-tp{self.tp}pp{self.pp}", self.replicas, prof,
                                      prefill_tokens_per_s=self.prefill_tokens_per_s)
        return group.model_copy(update={"kv_capacity_tokens": self.kv_capacity_tokens})


class EngineRow(BaseModel):
    """One (trace, load, method) measurement."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    trace: str
    load: float
    method: str
    preemptions: int
    recomputed_tokens: int
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    e2e_p50_s: float | None
    e2e_p99_s: float | None
    stall_p99_s: float | None
    stalled_frac: float | None
    goodput_rps: float
    cost: float
    rho: float
    knobs: str = Field(default="", description="The engine settings of the row, for reading the table.")


class EngineEvaluation(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    trace: str
    requests: int
    replicas: int
    capacity_rps: float = Field(description="Requests/s the fleet serves at load 1 on this trace (module docstring).")
    reserves: dict[str, float] = Field(description="The plan's (DRO) reservation per class at the report's rho "
                                       "(tokens): kvplan-plugin-dro's.")
    knobs: dict[str, str] = Field(default_factory=dict, description="Per load: the knobs chosen and why.")
    plugin: dict[str, str] = Field(default_factory=dict, description="Per load: the reservations that pay and why.")
    plugin_knobs: dict[str, str] = Field(default_factory=dict, description=(
        "Per load: the reservations that pay on top of the knob rule's settings (kvplan-plugin+knobs) and why."))
    engine_rho: dict[str, dict[str, float]] = Field(default_factory=dict, description=(
        "Per load, per class: rho_e = C h, the engine's price of a token past the reservation (kvcore.rules.preemption)."))
    rows: list[EngineRow]


class EngineSetup:
    """The split, classes, histories and replay of one trace (shared by every variant)."""

    def __init__(self, trace: Trace, fleet: EngineFleet, replay_requests: int = 3000) -> None:
        n = len(trace)
        if n < 20:
            raise InputError(trace.source or "trace", f"needs at least 20 requests for the engine comparison, has {n}")
        self.half = n // 2
        inp = np.maximum(np.rint(np.asarray(trace.input_tokens, dtype=np.float64)), 0)
        out = np.maximum(np.rint(np.asarray(trace.output_tokens, dtype=np.float64)), 1)
        cut = float(np.median(inp[: self.half]))
        self.cls = (inp > cut).astype(np.int64)
        if not self.cls[: self.half].any():
            raise InputError(trace.source or "trace", f"no prompt of the history (first {self.half} requests) is "
                             f"longer than its median, {cut:.0f} tokens: the engine comparison splits its two classes "
                             "there, so the long class would be empty", hint="needs prompts of more than one length")
        self.inp, self.out = inp, out
        self.group = fleet.group()
        self.fleet = fleet
        test = slice(self.half, n)
        self.capacity_rps = capacity_rps(self.group, inp[test], out[test])
        self.arrival_all = None if trace.arrival_s is None else np.asarray(trace.arrival_s, dtype=np.float64)
        self.arrival = None if self.arrival_all is None else self.arrival_all[test]
        self.lmax = float(out.max())
        self.replay_requests = replay_requests
        self._replays: dict[tuple[float, EngineConfig | None], ReplaySet] = {}

    def replays(self, load: float, seed: int, base: EngineConfig | None = None) -> ReplaySet:
        """The reservation rule's replays of the history at ``load`` (one set for every rho), on vLLM's defaults or
        on ``base`` (the engine settings the gate runs with)."""
        if (load, base) not in self._replays:
            history_t = None if self.arrival_all is None else self.arrival_all[: self.half]
            self._replays[load, base] = ReplaySet(self.group, self.knob_classes(load, self.reserves(1.0), 1.0),
                                                  base=base, requests=self.replay_requests, seed=seed,
                                                  arrivals_s=history_t, ttft_slo_s=self.fleet.ttft_slo_s,
                                                  tpot_slo_s=self.fleet.tpot_slo_s)
        return self._replays[load, base]

    def rule(self, load: float, rho: float | Sequence[float] | None, seed: int, base: EngineConfig | None = None,
             ) -> ReserveChoice:
        """The reservations that pay at ``load``, the classes at ``rho`` (one for both, or one each); None: priced by
        the engine (the plan's reservations at the engine's rho_e, harm at its price in token slots). ``base``: the
        engine settings the gate runs with (vLLM's defaults when None)."""
        rs = self.replays(load, seed, base)
        if rho is None:
            rho_e = engine_rho(rs)
            ys = [self.reserves_at(c, rho_e[CLASSES[c]]) for c in (0, 1)]
            classes = self.knob_classes(load, ys, 1.0)
            return choose_reserves(self.group, classes, replays=rs, engine_priced=CLASSES, search="full")
        return choose_reserves(self.group, self.knob_classes(load, self.reserves(rho), rho), replays=rs, search="full")

    def history(self, c: int) -> History:
        train = self.out[: self.half][self.cls[: self.half] == c]
        parts = np.array_split(train, max(1, min(4, train.size)))
        return History(tuple(Samples.from_arrays(p, field=f"history[{CLASSES[c]}][{i}]") for i, p in enumerate(parts)))

    def grid(self) -> list[list[float]]:
        """Per class: 0 and each of :data:`FRONTIER_QUANTILES` of its history outputs (whole tokens, distinct)."""
        out = []
        for c in (0, 1):
            train = self.out[: self.half][self.cls[: self.half] == c]
            qs = np.rint(np.quantile(train, FRONTIER_QUANTILES)) if train.size else np.zeros(0)
            out.append(sorted({0.0, *(float(q) for q in qs)}))
        return out

    def reserves(self, rho: float | Sequence[float]) -> list[float]:
        """The plan's reservation of each class at ``rho`` (one for both, or one each)."""
        rhos = _per_class(rho)
        return [self.reserves_at(c, rhos[c]) for c in (0, 1)]

    def reserves_at(self, c: int, rho: float) -> float:
        """The plan's reservation of class ``c`` at ``rho`` (rho 0: nothing)."""
        if rho <= 0:
            return 0.0
        return get_policy("default").fn(self.history(c), rho, self.lmax, 1.0).reserve_tokens

    def workload(self, load: float, seed: int) -> Workload:
        return replay_workload(self.arrival, self.cls[self.half:], self.inp[self.half:], self.out[self.half:],
                               n_classes=2, rate_rps=load * self.capacity_rps, seed=seed)

    def knob_classes(self, load: float, reserves: Sequence[float], rho: float | Sequence[float]) -> list[KnobClass]:
        rate = load * self.capacity_rps
        train_cls = self.cls[: self.half]
        rhos = _per_class(rho)
        out = []
        for c in (0, 1):
            m = train_cls == c
            out.append(KnobClass.build(CLASSES[c], rate * float(m.mean()), self.inp[: self.half][m],
                                       self.out[: self.half][m], reserves[c], rhos[c]))
        return out


def _per_class(rho: float | Sequence[float]) -> tuple[float, float]:
    if isinstance(rho, (int, float)):
        return float(rho), float(rho)
    if len(rho) != len(CLASSES):
        raise InputError("rho", f"needs one value or one per class ({len(CLASSES)}), got {len(rho)}")
    return float(rho[0]), float(rho[1])


def capacity_rps(group: SimGroup, inputs: np.ndarray, outputs: np.ndarray) -> float:
    """Requests/s ``group`` serves at load 1 on these requests: the saturation rate measured in the vLLM engine
    model, prefill included (:func:`kvcore.evaluate.saturation.saturation_rps`, the one definition of load)."""
    return saturation_rps(group, inputs, outputs)


def replay_workload(arrival_s: np.ndarray | None, cls: np.ndarray, inputs: np.ndarray, outputs: np.ndarray, *,
                    n_classes: int, rate_rps: float, seed: int) -> Workload:
    """The one workload builder of the evaluation: these requests at ``rate_rps``, the trace's own ``arrival_s``
    rescaled (its burstiness kept), or Poisson from ``seed`` when it has none (or they span no time)."""
    n = int(outputs.size)
    if arrival_s is not None and float(arrival_s[-1] - arrival_s[0]) > 0:
        t = arrival_s - arrival_s[0]
        arrival = t * ((n - 1) / rate_rps) / float(t[-1])
    else:
        gaps = np.random.default_rng(seed).exponential(1.0 / rate_rps, size=n)
        gaps[0] = 0.0
        arrival = np.cumsum(gaps)
    return Workload.from_arrays(arrival, cls, inputs, outputs, n_classes=n_classes)


def measure_row(setup: EngineSetup, name: str, load: float, method: str, rho: float, workload: Workload,
                policy: SimPolicy, res: EngineResult, gated: bool, knobs: str) -> EngineRow:
    """One row of measures (module docstring) of ``res``, a replay of ``workload`` under ``policy``."""
    o = res.outcomes
    assert o is not None
    n = max(res.finished, 1)
    xi = workload.output_tokens
    y = policy.reserve_tokens[workload.class_index]
    waste = float(np.maximum(y - xi, 0).sum()) if gated else 0.0
    cost = (waste + rho * float(o.recomputed.sum())) / n
    good = setup.fleet.good(workload, o)
    return EngineRow(trace=name, load=load, method=method, preemptions=res.preemptions,
                     recomputed_tokens=res.recomputed_tokens, ttft_p50_s=res.ttft.p50, ttft_p99_s=res.ttft.p99,
                     e2e_p50_s=res.e2e.p50, e2e_p99_s=res.e2e.p99, stall_p99_s=res.stall.p99,
                     stalled_frac=res.stalled_frac, goodput_rps=float(good.sum() / res.duration_s)
                     if res.duration_s > 0 else 0.0, cost=cost, rho=rho, knobs=knobs)


def run_variant(setup: EngineSetup, workload: Workload, reserves: Sequence[float], rho: float,
                engine: EngineConfig, seed: int) -> tuple[SimPolicy, EngineResult]:
    """Replay ``workload`` on the setup's group with these reservations (tokens per class) and engine settings."""
    policy = SimPolicy.from_arrays(list(reserves), np.ones((2, 1)), cp=rho, cw=1.0)
    res = simulate_engine(workload, [setup.group], policy, rng=np.random.default_rng(seed), engine=engine,
                          keep_requests=True)
    return policy, res


def _describe(engine: EngineConfig) -> str:
    text = f"watermark={engine.watermark:g} max_num_seqs={engine.max_num_seqs} policy={engine.policy}"
    if engine.class_priority:
        text += " priorities=" + ",".join(f"{c}:{p}" for c, p in zip(CLASSES, engine.class_priority))
    if engine.admission == "gate":
        text += " gate"
    return text


def evaluate_engine(trace: Trace, *, loads: Sequence[float] = DEFAULT_LOADS, rho: float = 10.0,
                    fleet: EngineFleet | None = None, seed: int = 0, frontier: bool = False,
                    wrap: Callable[[Sequence[float]], Iterable[float]] | None = None,
                    replay_requests: int = 3000, setup: EngineSetup | None = None) -> EngineEvaluation:
    """The variants of :data:`METHODS` (and with ``frontier`` the sweeps) at every load; rows in (load, method)
    order. ``replay_requests``: requests per history replay of the knob and reservation rules (2 replays each).
    ``setup``: an :class:`EngineSetup` of this trace and fleet to reuse (its replays are memoised)."""
    fleet = fleet if fleet is not None else EngineFleet()
    if not (math.isfinite(rho) and rho > 0):
        raise InputError("--rho", f"must be finite and > 0, got {rho}")
    for load in loads:
        if not (math.isfinite(load) and 0 < load < 2):
            raise InputError("--load", f"must be in (0, 2), got {load}")
    if replay_requests < 20:
        raise InputError("--replay-requests", f"must be at least 20, got {replay_requests}")
    setup = setup if setup is not None else EngineSetup(trace, fleet, replay_requests)
    name = trace.source or "trace"
    reserves = setup.reserves(rho)
    base = EngineConfig()
    gate = base.model_copy(update={"admission": "gate"})
    rows: list[EngineRow] = []
    knob_notes: dict[str, str] = {}
    plugin_notes: dict[str, str] = {}
    both_notes: dict[str, str] = {}
    rho_e: dict[str, dict[str, float]] = {}
    for load in (wrap(loads) if wrap is not None else loads):
        workload = setup.workload(load, seed)
        history_t = None if setup.arrival_all is None else setup.arrival_all[: setup.half]
        choice: KnobChoice = choose_knobs(setup.group, setup.knob_classes(load, reserves, rho), base=base,
                                          requests=setup.replay_requests, seed=seed, arrivals_s=history_t,
                                          ttft_slo_s=setup.fleet.ttft_slo_s, tpot_slo_s=setup.fleet.tpot_slo_s)
        knob_notes[f"{load:g}"] = f"{_describe(choice.engine_config(base, CLASSES))}: {choice.reason}"
        rule = setup.rule(load, rho, seed)
        paying = [float(rule.reserves[c]) for c in CLASSES]
        plugin_notes[f"{load:g}"] = f"{_reserves_text(rule)}: {rule.reason}"
        rho_e[f"{load:g}"] = engine_rho(setup.replays(load, seed))
        knobs = choice.engine_config(base, CLASSES)
        both = setup.rule(load, rho, seed, base=knobs)
        both_notes[f"{load:g}"] = f"{_describe(knobs)}; {_reserves_text(both)}: {both.reason}"
        variants = [("vllm-default", base, reserves), ("kvplan-knobs", knobs, reserves),
                    ("kvplan-plugin", gate, paying), ("kvplan-plugin-dro", gate, reserves),
                    ("kvplan-plugin+knobs", knobs.model_copy(update={"admission": "gate"}),
                     [float(both.reserves[c]) for c in CLASSES])]
        for method, engine, ys in variants:
            policy, res = run_variant(setup, workload, ys, rho, engine, seed)
            text = _describe(engine) + (f" y={ys[0]:.0f},{ys[1]:.0f}" if engine.admission == "gate" else "")
            rows.append(measure_row(setup, name, load, method, rho, workload, policy, res, engine.admission == "gate",
                                    text))
        if frontier:
            rows += frontier_rows(setup, name, load, workload, rho, seed)
    return EngineEvaluation(trace=name, requests=len(trace) - setup.half, replicas=fleet.replicas,
                            capacity_rps=setup.capacity_rps, reserves=dict(zip(CLASSES, reserves)),
                            knobs=knob_notes, plugin=plugin_notes, plugin_knobs=both_notes, engine_rho=rho_e,
                            rows=rows)


def _reserves_text(rule: ReserveChoice) -> str:
    return ", ".join(f"{c} {rule.reserves[c]} ({rule.sources[c]})" for c in CLASSES)


def frontier_rows(setup: EngineSetup, name: str, load: float, workload: Workload, rho: float, seed: int,
                  ) -> list[EngineRow]:
    """At every rho of :data:`FRONTIER_RHOS` (cost priced at each): the plugin with the reservations that pay
    (``plugin-rho=``) and with the plan's raw reservations (``plugin-dro-rho=``); the rule priced by the engine
    (``plugin-rho=engine``, cost priced at the report's rho); stock vLLM at every watermark x max_num_seqs (cost
    priced at the report's rho); the gate at every reservation vector of :meth:`EngineSetup.grid` and max_num_seqs of
    stock's grid (``plugin-y=<short>,<long>,s=<max_num_seqs>``, cost priced at the report's rho)."""
    rows = []
    base = EngineConfig()
    gate = base.model_copy(update={"admission": "gate"})
    for r in (*FRONTIER_RHOS, None):
        rule = setup.rule(load, r, seed)
        ys = [float(rule.reserves[c]) for c in CLASSES]
        price = rho if r is None else r
        policy, res = run_variant(setup, workload, ys, price, gate, seed)
        tag = "engine" if r is None else f"{r:g}"
        rows.append(measure_row(setup, name, load, f"plugin-rho={tag}", price, workload, policy, res, True,
                         f"gate y={_reserves_text(rule)}"))
    for r in FRONTIER_RHOS:
        ys = setup.reserves(r)
        policy, res = run_variant(setup, workload, ys, r, gate, seed)
        rows.append(measure_row(setup, name, load, f"plugin-dro-rho={r:g}", r, workload, policy, res, True,
                         f"gate y={ys[0]:.0f},{ys[1]:.0f}"))
    for w in FRONTIER_WATERMARKS:
        for s in FRONTIER_SEQS:
            engine = base.model_copy(update={"watermark": w, "max_num_seqs": s})
            policy, res = run_variant(setup, workload, [0.0, 0.0], rho, engine, seed)
            rows.append(measure_row(setup, name, load, f"stock-w={w:g},s={s}", rho, workload, policy, res, False,
                             _describe(engine)))
    grid = setup.grid()
    for s in FRONTIER_SEQS:
        engine = gate.model_copy(update={"max_num_seqs": s})
        for a in grid[0]:
            for b in grid[1]:
                policy, res = run_variant(setup, workload, [a, b], rho, engine, seed)
                rows.append(measure_row(setup, name, load, f"plugin-y={a:g},{b:g},s={s}", rho, workload, policy, res,
                                        True, f"{_describe(engine)} y={a:g},{b:g}"))
    return rows
