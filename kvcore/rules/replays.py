"""The replays both engine-model rules measure on, shared: one group's recent history replayed, stock vLLM's run of
it, and the work spent.

The knob rule (:mod:`kvcore.rules.knobs`) and the reservation rule (:mod:`kvcore.rules.reserve`) replay the same history of
the same group: ``replays`` stretches of ``requests`` requests (:func:`kvcore.rules.classes.replay`), seeded. Built once
(:class:`GroupReplays`), they share

- the workloads: every candidate of either rule is measured on the same requests (common random numbers: two
  candidates differ by what they change, not by the draw);
- **stock vLLM's run** of each replay (:meth:`GroupReplays.stock`): the knob rule's reference candidate, and the
  reservation rule's evidence of whether there is anything to protect at all (:mod:`kvcore.rules.reserve`);
- the **work** spent, in simulated requests (one request replayed once through the engine model). The fast engine
  model skips runs of decode-only steps, so its cost follows the requests replayed rather than the engine steps
  (``docs/benchmarks.md``, "The engine-model rules"); the operator budgets each re-plan cycle in this unit, never in
  seconds, so what it decides does not depend on the machine's load.

:class:`ReplayStore` hands out one :class:`GroupReplays` per distinct (group, classes, replay settings): two groups
of the same layout, replicas and routed classes at the same rates share everything, including every measurement
the rules memoise on it. Pure: seeded, no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from kvcore.errors import InputError
from kvcore.rules.classes import KnobClass, history_segment, replay
from kvcore.sim.engine import EngineConfig, EngineResult, simulate_engine
from kvcore.sim.types import SimGroup, SimPolicy, Workload

REQUESTS = 2000
"""Requests per replay of both rules (the knob rule's length before; the reservation rule replayed 3,000:
``benchmarks/rule_agreement.py`` measures what the shorter replay changes)."""
REPLAYS = 2
"""Independent replays per group."""


class GroupReplays:
    """``replays`` replays of one group's history (:func:`kvcore.rules.classes.replay`), stock vLLM's run of each, and the
    work spent on them by every rule that measured here."""

    def __init__(self, group: SimGroup, classes: Sequence[KnobClass], *, requests: int = REQUESTS,
                 replays: int = REPLAYS, seed: int = 0, arrivals_s: NDArray[np.float64] | None = None,
                 base: EngineConfig | None = None, stock_runs: dict[tuple[int, str], EngineResult] | None = None
                 ) -> None:
        if not classes:
            raise InputError("rules.classes", "at least one class is needed")
        if replays < 1:
            raise InputError("rules.replays", f"must be >= 1, got {replays}")
        if requests < 1:
            raise InputError("rules.requests", f"must be >= 1, got {requests}")
        self.group = group
        self.classes = tuple(classes)
        self.requests = requests
        self.seed = seed
        self.base = base if base is not None else EngineConfig()
        self.runs: list[tuple[Workload, SimPolicy]] = []
        for k in range(replays):
            self.runs.append(replay(group, classes, requests=requests, rng=np.random.default_rng(seed + k),
                                    arrivals_s=history_segment(arrivals_s, requests, replays, k)))
        self.rho = np.array([c.rho for c in classes])
        self.work = 0
        """Requests simulated on these replays so far (every rule, every candidate)."""
        self._stock: dict[tuple[int, str], EngineResult] = stock_runs if stock_runs is not None else {}
        """Stock vLLM's runs by (replay, stock settings): shared by the store between replay sets of the same history
        whose bases differ only in what stock vLLM does not run (watermark, policy)."""
        self.memo: dict[str, object] = {}
        """Each rule's memoised measurements on these replays (by rule), so a group met again costs nothing."""

    @property
    def workloads(self) -> list[Workload]:
        return [w for w, _ in self.runs]

    def stock_config(self) -> EngineConfig:
        """Stock vLLM: the base engine settings with no watermark, fcfs and kvplan's gate off."""
        return self.base.model_copy(update={"watermark": 0.0, "policy": "fcfs", "class_priority": None,
                                            "admission": "vllm"})

    def simulate(self, k: int, engine: EngineConfig, policy: SimPolicy | None = None) -> EngineResult:
        """Replay ``k`` under ``engine`` (per-request outcomes kept), counted as work."""
        workload, own = self.runs[k]
        res = simulate_engine(workload, [self.group], policy if policy is not None else own,
                              rng=np.random.default_rng(self.seed), engine=engine, keep_requests=True)
        self.work += len(workload)
        return res

    def stock(self, k: int) -> EngineResult:
        """Stock vLLM's run of replay ``k`` (memoised)."""
        config = self.stock_config()
        key = (k, config.model_dump_json())
        if key not in self._stock:
            self._stock[key] = self.simulate(k, config)
        return self._stock[key]


def fingerprint(group: SimGroup, classes: Sequence[KnobClass], *parts: object) -> str:
    """What a group's replays depend on, as a digest: the group's engine model without its name, each class's rate,
    history, reservation and rho, and ``parts`` (replay settings)."""
    h = hashlib.sha256()
    g = group.model_dump(exclude={"name"})
    h.update(repr(sorted(g.items())).encode())
    for c in classes:
        h.update(repr((c.name, c.rate_rps, c.reserve_tokens, c.rho)).encode())
        for arr in (c.inputs, c.outputs, c.weights):
            h.update(b"-" if arr is None else np.ascontiguousarray(arr).tobytes())
    for p in parts:
        h.update(p.tobytes() if isinstance(p, np.ndarray) else repr(p).encode())
    return h.hexdigest()


class ReplayStore:
    """One :class:`GroupReplays` per distinct group situation (:func:`fingerprint`), for every rule of one re-plan;
    ``work`` sums what was simulated on all of them. Replay sets of the same history under different engine bases
    (the knob rule's stock vLLM, the reservation rule's engines as they run) share stock vLLM's runs where stock's
    settings coincide (the same workloads: the replays are seeded)."""

    def __init__(self) -> None:
        self._by_key: dict[str, GroupReplays] = {}
        self._stock: dict[str, dict[tuple[int, str], EngineResult]] = {}

    def get(self, group: SimGroup, classes: Sequence[KnobClass], *, requests: int = REQUESTS,
            replays: int = REPLAYS, seed: int = 0, arrivals_s: NDArray[np.float64] | None = None,
            base: EngineConfig | None = None) -> GroupReplays:
        base = base if base is not None else EngineConfig()
        history = fingerprint(group, classes, requests, replays, seed,
                              np.empty(0) if arrivals_s is None else np.asarray(arrivals_s, dtype=np.float64))
        key = history + base.model_dump_json()
        if key not in self._by_key:
            self._by_key[key] = GroupReplays(group, classes, requests=requests, replays=replays, seed=seed,
                                             arrivals_s=arrivals_s, base=base,
                                             stock_runs=self._stock.setdefault(history, {}))
        return self._by_key[key]

    @property
    def work(self) -> int:
        return sum(g.work for g in self._by_key.values())
