"""The harness: every (shift, rho, policy) scenario of one trace under one protocol, scored per request.

``observe`` trains every policy on what the operator would see (per-window bucket counts of a layout, see
:mod:`kvcore.evaluate.observe`) instead of the raw lengths; costs are always measured on the raw test outputs.

Cost of a request served with reservation y, in token slots (c_w = 1, c_p = rho):
``rho * (xi - y)^+ + (y - xi)^+``, with xi its (shifted, capped) output length. A row's ``cost`` is the mean over
every scored request of the protocol (all rolling steps pooled). With ``simulate`` the same requests are replayed
through the vLLM engine model with kvplan's gate on the one evaluation fleet, at ``load`` (see
:mod:`kvcore.evaluate.simulate`), and the row also carries P99 latency, SLO violation rate, preemptions and waste.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kvcore.history.bucket_model import DEFAULT_MODEL, check_model
from kvcore.errors import InputError
from kvcore.evaluate.observe import check_observe, observe_episodes
from kvcore.evaluate.policies import DEFAULT_METHODS, get_policy
from kvcore.evaluate.protocols import PROTOCOLS, Episode, episodes_for, resolve_lmax, rolling_schedule
from kvcore.evaluate.engine import EngineFleet
from kvcore.evaluate.simulate import SIMULATE_LOAD, simulate_episodes
from kvcore.history.samples import FloatArray
from kvcore.history.traces import Trace

T = TypeVar("T")
Wrap = Callable[[Sequence[T], str], Iterable[T]]

DEFAULT_RHOS: tuple[float, ...] = (2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
"""The cost ratios c_p / c_w of the paper's tables."""
DEFAULT_SHIFTS: tuple[float, ...] = (1.0, 1.5, 2.5)
"""Output-length multipliers of the test requests (1.0 = no shift)."""


class Row(BaseModel):
    """One scenario (trace, protocol, rho, shift) x one policy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    trace: str
    protocol: str
    observe: str = Field(default="raw", description="What the policy was trained on: raw lengths or a bucket "
                         "layout's per-window counts (kvcore.evaluate.observe).")
    rho: float = Field(description="c_p / c_w (c_w = 1).")
    shift: float = Field(description="Output-length multiplier of the test requests.")
    method: str
    cost: float = Field(description="Mean rho (xi - y)^+ + (y - xi)^+ per scored request, token slots.")
    requests: int = Field(description="Scored requests.")
    plans: int = Field(description="Plans that served scored requests (1 for split).")
    reserve_mean: float = Field(description="Reservation averaged over scored requests, output tokens.")
    eps_mean: float | None = Field(default=None, description="DRO radius averaged over requests, tokens.")
    under_reserved: float = Field(description="Fraction of scored requests with xi > y.")
    p99_latency_s: float | None = Field(default=None, description="Simulated end-to-end P99, seconds.")
    slo_violation_rate: float | None = Field(default=None, description="Simulated finished requests that are not "
                                             "good for goodput (kvcore.sim.engine.meets_slo) / finished.")
    preemptions: int | None = Field(default=None, description="Simulated preemptions (recompute).")
    waste_token_slot_s: float | None = Field(default=None, description="Simulated reserved output slots not yet "
                                             "filled, integrated over each request's decode (token-slot-seconds).")


class Evaluation(BaseModel):
    """All rows of one trace under one protocol, and how the protocol was run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    trace: str
    protocol: str
    observe: str = Field(default="raw", description="What every policy was trained on (raw or a bucket layout).")
    bucket_model: str = Field(default=DEFAULT_MODEL, description="Within-bucket model the counts were read with "
                              "(unused for raw).")
    lmax: float
    requests: int
    timestamps: bool
    plans: int = Field(description="Plans the protocol makes (1 for split; every re-plan time for rolling).")
    scored_plans: int = Field(description="Plans that served at least one scored request.")
    reused_windows: int = Field(description="Rolling re-plans whose window was empty (previous history reused).")
    rows: tuple[Row, ...]

    def cost(self, rho: float, shift: float, method: str) -> float:
        """The cost of one cell (KeyError if absent)."""
        for r in self.rows:
            if r.rho == rho and r.shift == shift and r.method == method:
                return r.cost
        raise KeyError((rho, shift, method))


def request_cost(y: FloatArray | float, xi: FloatArray, rho: float) -> FloatArray:
    """``rho * (xi - y)^+ + (y - xi)^+`` per request, token slots."""
    return np.asarray(rho * np.maximum(xi - y, 0.0) + np.maximum(y - xi, 0.0), dtype=np.float64)


def _identity(items: Sequence[T], label: str) -> Iterable[T]:
    return items


def _check_list(values: Sequence[float], field: str) -> tuple[float, ...]:
    if not values:
        raise InputError(field, "is empty")
    out = []
    for i, v in enumerate(values):
        if not (np.isfinite(v) and v > 0):
            raise InputError(f"{field}[{i}]", f"must be a finite number > 0, got {v}")
        out.append(float(v))
    return tuple(out)


def evaluate(
    trace: Trace,
    *,
    protocol: str = "split",
    rhos: Sequence[float] = DEFAULT_RHOS,
    shifts: Sequence[float] = DEFAULT_SHIFTS,
    methods: Sequence[str] = DEFAULT_METHODS,
    lmax: float | None = None,
    simulate: bool = False,
    fleet: EngineFleet | None = None,
    load: float = SIMULATE_LOAD,
    seed: int = 0,
    wrap: Wrap[tuple[float, str]] = _identity,
    observe: str = "raw",
    bucket_model: str = DEFAULT_MODEL,
) -> Evaluation:
    """Score every (shift, rho, method) of ``trace`` under ``protocol``; ``wrap`` may draw progress. ``observe``
    and ``bucket_model``: what the policies are trained on (module docstring). ``fleet`` and ``load``: where and how
    hard ``simulate`` replays (default :class:`EngineFleet`, load 0.7)."""
    if protocol not in PROTOCOLS:
        raise InputError("protocol", f"unknown protocol {protocol!r}", hint="one of " + ", ".join(PROTOCOLS))
    check_observe(observe)
    check_model(bucket_model, "bucket_model")
    rho_list = _check_list(rhos, "rho")
    shift_list = _check_list(shifts, "shift")
    policies = [get_policy(m) for m in methods]
    if not policies:
        raise InputError("method", "no policies to evaluate")
    top = resolve_lmax(trace, lmax)
    by_shift = {s: observe_episodes(episodes_for(trace, protocol, shift=s, lmax=top), observe, lmax=top,
                                    model=bucket_model) for s in shift_list}
    name = trace.source or "trace"
    rows: list[Row] = []
    tasks = [(s, p.name) for s in shift_list for p in policies]
    for shift, method in wrap(tasks, f"{name} {protocol}"):
        episodes = by_shift[shift]
        for rho in rho_list:
            rows.append(_score(name, protocol, observe, rho, shift, method, episodes, top, simulate, fleet, load,
                               trace, seed))
    first = by_shift[shift_list[0]]
    plans = len(rolling_schedule(trace).plan_times_s) if protocol == "rolling" else 1
    return Evaluation(
        trace=name, protocol=protocol, observe=observe, bucket_model=bucket_model, lmax=top, requests=len(trace),
        timestamps=trace.has_timestamps, plans=plans, scored_plans=len(first),
        reused_windows=sum(e.reused for e in first), rows=tuple(rows),
    )


def _score(name: str, protocol: str, observe: str, rho: float, shift: float, method: str, episodes: list[Episode],
           lmax: float, simulate: bool, fleet: EngineFleet | None, load: float, trace: Trace, seed: int) -> Row:
    fn = get_policy(method).fn
    total = under = reserved = eps_total = 0.0
    n = 0
    has_eps = False
    ys: list[float] = []
    for ep in episodes:
        res = fn(ep.history, rho, lmax, ep.horizon_ratio)
        y = float(res.reserve_tokens)
        ys.append(y)
        k = int(ep.test_outputs.size)
        total += float(request_cost(y, ep.test_outputs, rho).sum())
        under += float(np.count_nonzero(ep.test_outputs > y))
        reserved += y * k
        if res.radius is not None and res.eps is not None:
            has_eps = True
            eps_total += float(res.eps) * k
        n += k
    if n == 0:
        raise InputError(name, f"the {protocol} protocol scored no request (too few requests in the trace)")
    sim: dict[str, float | int | None] = {}
    if simulate:
        sim = simulate_episodes(trace, episodes, ys, rho=rho, fleet=fleet or EngineFleet(), seed=seed, load=load)
    return Row(
        trace=name, protocol=protocol, observe=observe, rho=rho, shift=shift, method=method, cost=total / n, requests=n,
        plans=len(episodes), reserve_mean=reserved / n, eps_mean=eps_total / n if has_eps else None,
        under_reserved=under / n, **sim,
    )
