"""The fast vLLM engine model: the same dynamics as :mod:`kvcore.sim.engine.reference`, skipping runs of steps in
which nothing but decoding happens (:mod:`kvcore.sim.engine.fast_replica`).

Events are plain tuples ``(time_ns, priority, seq, replica, version)`` in one heap: a replica's END (outputs of the
step before an interesting step: completions) has priority 0, arrivals 1 (they are a sorted list merged with the
heap, never pushed), a START (``schedule()``) 2, so at equal times outputs come first, then arrivals, then the
schedule, as in the reference. A replica has at most one live event; an arrival that may be admitted before the
replica's next interesting step moves it earlier (a new version; the stale event is skipped on pop).
"""

from __future__ import annotations

import heapq

from kvcore.sim.engine.fast_state import Requests
from kvcore.sim.engine.fast_step import FastStep
from kvcore.sim.engine.jobs import EngineOutcomes, Jobs, freeze_outcomes, new_outcomes

END, ARRIVAL, START = 0, 1, 2


def run_fast(jobs: Jobs) -> EngineOutcomes:
    """Replay ``jobs`` on every replica of every group, skipping decode-only runs of steps."""
    n = len(jobs)
    out = new_outcomes(n, len(jobs.groups))
    rq = Requests(jobs, out)
    reps: list[FastStep] = []
    lo_of: list[int] = []
    for k, g in enumerate(jobs.groups):
        lo_of.append(len(reps))
        reps.extend(FastStep(g.engine, g.num_blocks, g.timing, k, rq) for _ in range(g.replicas))
    hi_of = [lo + g.replicas for lo, g in zip(lo_of, jobs.groups)]
    arr = jobs.arrival_ns
    grp = jobs.group
    replica_of = out["replica"]
    events: list[tuple[int, int, int, int, int]] = []
    seq = 0
    ai = 0
    while True:
        if events and (ai >= n or (events[0][0], events[0][1]) < (arr[ai], ARRIVAL)):
            t, kind, _, r, v = heapq.heappop(events)
            rep = reps[r]
            if v != rep.ver:
                continue
            if kind == END:
                rep.end(rep.c_next, t)
                if ai < n and arr[ai] <= t:  # arrivals at this instant join before the schedule
                    rep.pending = True
                    heapq.heappush(events, (t, START, seq, r, v))
                    seq += 1
                    continue
            s = rep.c_next if rep.c_next >= 0 else rep.idle_step
            t_next = rep.start(s, t)
            if t_next >= 0:
                rep.ver += 1
                heapq.heappush(events, (t_next, END, seq, r, rep.ver))
                seq += 1
            continue
        if ai >= n:
            break
        j = ai
        ai += 1
        k = grp[j]
        if k < 0:
            continue
        r = lo = lo_of[k]
        best = reps[lo].nload
        for i in range(lo + 1, hi_of[k]):
            load = reps[i].nload
            if load < best:
                best, r = load, i
        rep = reps[r]
        replica_of[j] = r
        head = rep.head() if (rep.fifo or rep.heap) else -1
        rep.add(j)
        if rep.pending:
            continue
        ta = arr[j]
        if rep.c_next < 0:
            rep.pending = True
            rep.ver += 1
            heapq.heappush(events, (ta, START, seq, r, rep.ver))
            seq += 1
            continue
        t_cut = rep.cut_for_arrival(j, ta, head)
        if t_cut >= 0:
            rep.ver += 1
            heapq.heappush(events, (t_cut, END, seq, r, rep.ver))
            seq += 1
    for rep in reps:
        out["steps"][rep.group] += rep.steps
    return freeze_outcomes(out)
