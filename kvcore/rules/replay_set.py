"""The reservation rule's replays (:class:`ReplaySet`): one group's shared history replays
(:mod:`kvcore.rules.replays`) under kvplan's gate, every reservation vector simulated on them memoised, and the
rule's cost J(y) of each (the cost and its terms are defined in :mod:`kvcore.rules.reserve`). The candidates'
searches (:mod:`kvcore.rules.reserve_search`) read it, so it sits below both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from kvcore.errors import InputError
from kvcore.history.samples import weighted_quantile
from kvcore.rules.classes import KnobClass
from kvcore.rules.preemption import PreemptionPrice, class_prices, context_tokens, harm_tokens, token_interval_s
from kvcore.rules.replays import REPLAYS, REQUESTS, GroupReplays
from kvcore.sim.engine import EngineConfig, meets_slo
from kvcore.sim.types import SimGroup, SimPolicy, Workload

SCALES = (0.125, 0.25, 0.5, 1.0)
"""Fractions of the plan's reservation tried per class."""
QUANTILES = (0.25, 0.5, 0.75)
"""Quantiles of a class's outputs tried per class."""
TAIL = 0.01
"""Weight of the P99 latency change: the share of requests the P99 stands for."""


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
    """The rule's replays of one group's history (shared with the knob rule, :mod:`kvcore.rules.replays`), and every
    reservation vector simulated on them, per replay (memoised)."""

    def __init__(self, group: SimGroup, classes: Sequence[KnobClass], *, base: EngineConfig | None = None,
                 requests: int = REQUESTS, replays: int = REPLAYS, seed: int = 0, arrivals_s: ArrayLike | None = None,
                 ttft_slo_s: float = 2.0, tpot_slo_s: float = 0.1, shared: GroupReplays | None = None) -> None:
        if not classes:
            raise InputError("reserves.classes", "at least one class is needed")
        if replays < 1:
            raise InputError("reserves.replays", f"must be >= 1, got {replays}")
        times = None if arrivals_s is None else np.asarray(arrivals_s, dtype=np.float64).ravel()
        self.shared = shared if shared is not None else GroupReplays(
            group, classes, requests=requests, replays=replays, seed=seed, arrivals_s=times, base=base)
        self.group = group
        self.classes = tuple(classes)
        self.engine = self.shared.base.model_copy(update={"admission": "gate"})
        self.slo = (float(ttft_slo_s), float(tpot_slo_s))
        self.runs: list[Workload] = self.shared.workloads
        ins = np.concatenate([w.input_tokens for w in self.runs])
        outs = np.concatenate([w.output_tokens for w in self.runs])
        self.t_tok = token_interval_s(group, self.engine, context_tokens(ins, outs))
        """Seconds per token at the operating batch of the replayed history."""
        self.mean_output = float(outs.mean())
        self._memo: dict[tuple[tuple[int, ...], int], _Raw] = {}
        self.prices: tuple[dict[str, PreemptionPrice], ...] = ()
        """Per replay, the engine's preemption price per class with nothing reserved (filled by its measure)."""

    @property
    def simulated(self) -> int:
        """Reservation vectors simulated so far (on at least one replay)."""
        return len({ys for ys, _ in self._memo})

    @property
    def work(self) -> int:
        """Requests simulated on the shared replays so far (by every rule)."""
        return self.shared.work

    def measure_on(self, ys: tuple[int, ...], k: int) -> _Raw:
        """Replay ``k`` under the gate with reservations ``ys`` (tokens per class)."""
        if (ys, k) not in self._memo:
            workload = self.runs[k]
            policy = SimPolicy.from_arrays([float(y) for y in ys], np.ones((len(ys), 1)), cp=1.0, cw=1.0)
            res = self.shared.simulate(k, self.engine, policy)
            o = res.outcomes
            assert o is not None
            h = harm_tokens(o, self.t_tok)
            cls = workload.class_index
            harm = np.bincount(cls, weights=h, minlength=len(self.classes)).astype(np.float64)
            good = meets_slo(workload, o, ttft_slo_s=self.slo[0], tpot_slo_s=self.slo[1])
            self._memo[(ys, k)] = _Raw(harm, res.e2e.p99 or 0.0, res.e2e.mean or 0.0, float(good.mean()),
                                       res.stalled_frac or 0.0, res.preemptions, res.recomputed_tokens,
                                       res.goodput_rps)
            if not any(ys):
                prices = list(self.prices) + [{}] * (len(self.runs) - len(self.prices))
                prices[k] = class_prices(workload, res, self.t_tok, [c.name for c in self.classes])
                self.prices = tuple(prices)
        return self._memo[(ys, k)]

    def measure(self, ys: tuple[int, ...]) -> tuple[_Raw, ...]:
        """Each replay under the gate with reservations ``ys``."""
        return tuple(self.measure_on(ys, k) for k in range(len(self.runs)))

    def cost_on(self, ys: tuple[int, ...], rho: NDArray[np.float64], k: int) -> float:
        """J(ys) on replay ``k`` (token slots per request; module docstring)."""
        r, z = self.measure_on(ys, k), self.measure_on(tuple(0 for _ in ys), k)
        harm = float((rho * r.harm).sum()) / len(self.runs[k])
        latency = (r.mean_s - z.mean_s) + TAIL * (r.p99_s - z.p99_s)
        return harm + latency / self.t_tok + (z.good_share - r.good_share) * self.mean_output

    def costs(self, ys: tuple[int, ...], rho: NDArray[np.float64]) -> NDArray[np.float64]:
        """J(ys) on each replay."""
        return np.array([self.cost_on(ys, rho, k) for k in range(len(self.runs))])

    def stock_harm(self, rho: NDArray[np.float64]) -> NDArray[np.float64]:
        """Per replay, what stock vLLM's preemptions cost on it, ``sum_j rho_j h_j / n`` token slots per request
        (the shared stock runs, :meth:`kvcore.rules.replays.GroupReplays.stock`)."""
        out = []
        for k, w in enumerate(self.runs):
            o = self.shared.stock(k).outcomes
            assert o is not None
            out.append(float((rho[w.class_index] * harm_tokens(o, self.t_tok)).sum()) / len(w))
        return np.array(out)

    def candidates(self, c: KnobClass) -> list[int]:
        """0, the plan's y scaled, and output quantiles, whole tokens, ascending."""
        q = [quantile(c, p) for p in QUANTILES]
        ys = {0} | {int(round(f * c.reserve_tokens)) for f in SCALES} | {int(round(v)) for v in q}
        return sorted(ys)


def quantile(c: KnobClass, p: float) -> float:
    w = c.weights if c.weights is not None else np.full(c.outputs.size, 1.0 / c.outputs.size)
    return weighted_quantile(c.outputs, w, p)
