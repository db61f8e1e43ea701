"""The slow reference simulator: every replica advances one decode step at a time.

It is written for clarity, not speed, and shares no dynamics code with :mod:`kvcore.sim.fast`: only the input
preparation (the random draws) and the summary. The model it implements is stated in :mod:`kvcore.sim`; the
tests hold the fast simulator to it.

Events are frozen NamedTuples in one heap keyed ``(time, priority, seq)``: a replica's step end has priority 0,
an arrival priority 1, so at equal times step ends (with their completions) come first; ``seq`` counts pushes in
this run only.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from kvcore.sim.prepare import SERVE, Prepared, prepare
from kvcore.sim.result import RequestOutcomes, SimResult, build_result
from kvcore.sim.types import SimConfig, SimGroup, SimPolicy, Workload

STEP_END = 0
"""Heap priority of a replica's step end."""
ARRIVAL = 1
"""Heap priority of a request's arrival."""


class StepEnd(NamedTuple):
    replica: int


class Arrival(NamedTuple):
    request: int


@dataclass(slots=True)
class _Req:
    rid: int
    input_net: int
    output: int
    reserve: int
    generated: int = 0
    out_slots: int = 0
    """Output slots allocated (the reservation, grown one at a time past it)."""


@dataclass(slots=True)
class _Replica:
    group: int
    capacity: int
    t0: float
    t1: float
    prefill_rate: float
    running: list[_Req] = field(default_factory=list)
    """In admission order."""
    queue: deque[_Req] = field(default_factory=deque)
    used: int = 0
    step_dt: float = 0.0
    busy: bool = False

    @property
    def load(self) -> int:
        return len(self.running) + len(self.queue)


class _Run:
    def __init__(self, workload: Workload, groups: tuple[SimGroup, ...], prep: Prepared) -> None:
        self.w = workload
        self.prep = prep
        self.replicas: list[_Replica] = []
        self.by_group: list[list[int]] = []
        for k, g in enumerate(groups):
            ids = []
            for _ in range(g.replicas):
                ids.append(len(self.replicas))
                self.replicas.append(
                    _Replica(k, int(prep.usable_kv[k]), g.step_time_base_s, g.step_time_per_seq_s,
                             g.prefill_tokens_per_s)
                )  # fmt: skip
            self.by_group.append(ids)
        n = len(workload)
        self.heap: list[tuple[float, int, int, StepEnd | Arrival]] = []
        self.seq = 0
        self.admit = np.full(n, np.nan)
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.replica_of = np.full(n, -1, dtype=np.int64)
        self.preempt = np.zeros(n, dtype=np.int64)
        self.recomputed = np.zeros(n, dtype=np.int64)
        self.waste = np.zeros(len(groups))

    def push(self, time: float, prio: int, event: StepEnd | Arrival) -> None:
        heapq.heappush(self.heap, (time, prio, self.seq, event))
        self.seq += 1

    def run(self) -> None:
        w, prep = self.w, self.prep
        for j in range(len(w)):
            if prep.status[j] == SERVE:
                self.push(float(w.arrival_s[j]), ARRIVAL, Arrival(j))
        while self.heap:
            t, _, _, ev = heapq.heappop(self.heap)
            if isinstance(ev, Arrival):
                self.arrive(ev.request, t)
            else:
                self.step_end(ev.replica, t)

    def arrive(self, j: int, t: float) -> None:
        ids = self.by_group[int(self.prep.group[j])]
        r = min(ids, key=lambda i: (self.replicas[i].load, i))
        self.replica_of[j] = r
        req = _Req(j, int(self.prep.input_net[j]), int(self.w.output_tokens[j]), int(self.prep.reserve[j]))
        rep = self.replicas[r]
        rep.queue.append(req)
        if not rep.busy:
            self.boundary(r, t)

    def step_end(self, r: int, t: float) -> None:
        rep = self.replicas[r]
        for req in rep.running:
            req.generated += 1
            if np.isnan(self.first_token[req.rid]):
                self.first_token[req.rid] = t
        self.waste[rep.group] += sum(q.out_slots - q.generated for q in rep.running) * rep.step_dt
        self.boundary(r, t)

    def boundary(self, r: int, t: float) -> None:
        """Completions, then growth past reservations (or preemption), then FCFS admission, then the next step."""
        rep = self.replicas[r]
        for req in [q for q in rep.running if q.generated == q.output]:
            rep.running.remove(req)
            rep.used -= req.input_net + req.out_slots
            self.finish[req.rid] = t
        preempted = []
        for req in list(rep.running):
            if req.generated + 1 <= req.out_slots:
                continue
            if rep.used < rep.capacity:
                req.out_slots += 1
                rep.used += 1
            else:
                rep.running.remove(req)
                rep.used -= req.input_net + req.out_slots
                self.preempt[req.rid] += 1
                preempted.append(req)
        rep.queue.extendleft(reversed(preempted))
        prefill = 0
        while rep.queue:
            req = rep.queue[0]
            slots = max(req.reserve, req.generated + 1)
            if req.input_net + slots > rep.capacity - rep.used:
                break
            rep.queue.popleft()
            req.out_slots = slots
            rep.used += req.input_net + slots
            rep.running.append(req)
            prefill += req.input_net + req.generated
            self.recomputed[req.rid] += req.input_net + req.generated if req.generated else 0
            if np.isnan(self.admit[req.rid]):
                self.admit[req.rid] = t
        if not rep.running:
            if rep.queue:
                raise RuntimeError(f"replica {r} idle with a queue it can never admit")
            rep.busy = False
            return
        dt = rep.t0 + rep.t1 * len(rep.running)
        dt += prefill / rep.prefill_rate
        rep.step_dt = dt
        rep.busy = True
        self.push(t + dt, STEP_END, StepEnd(r))


def simulate_reference(
    workload: Workload,
    groups: tuple[SimGroup, ...] | list[SimGroup],
    policy: SimPolicy,
    *,
    rng: np.random.Generator,
    config: SimConfig | None = None,
) -> SimResult:
    """Replay ``workload`` step by step. Same signature, model and draws as :func:`kvcore.sim.simulate`."""
    cfg = config if config is not None else SimConfig()
    grp = tuple(groups)
    prep = prepare(workload, grp, policy, rng=rng, config=cfg)
    run = _Run(workload, grp, prep)
    run.run()
    out = RequestOutcomes(
        status=prep.status,
        group=prep.group,
        replica=run.replica_of,
        admit_s=run.admit,
        first_token_s=run.first_token,
        finish_s=run.finish,
        preemptions=run.preempt,
        recomputed_tokens=run.recomputed,
        prefix_hit=prep.prefix_hit,
        waste_by_group=run.waste,
    )
    return build_result("reference", workload, grp, policy, cfg, prep, out)
