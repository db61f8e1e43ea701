"""The fast simulator: the same discrete dynamics as the reference, jumping over runs of identical steps.

Between *interesting* boundaries a replica's batch is constant, so every step has the same duration and each
running request gains one token per step. The fast simulator therefore keeps, per replica, a step counter ``c``
and, per running request, ``base`` such that its generated tokens are ``c - base``; nothing is touched per step.
Interesting boundaries are:

- a completion (step ``base + output``) or a request reaching its reservation (step ``base + out_slots``), kept
  in a per-replica heap of thresholds;
- the first step at which the requests past their reservation (the *growers*, O of them, taking one slot each
  per step) would find fewer than O free slots: ``free // O + 1`` steps ahead;
- an arrival at a replica whose queue is empty: it may be admitted at the first boundary after it.

An arrival behind a non-empty queue needs no boundary: the head did not fit at the last boundary and free memory
only shrinks until the next interesting one. Growers hold ``input + (c - base)`` tokens, summed as
``grow_sum + O * c``; the others hold a fixed ``input + out_slots``. Waste over a run of k steps is summed in
closed form. At an interesting boundary the rules are applied exactly as in the reference (same order), so the
two produce the same discrete dynamics; times differ only by float rounding (``t + dt1 + (j-1) dt`` here, a sum
of step durations there).

The hot loop binds everything to locals and lists and allocates one tuple per heap push. Boundary events are
plain (immutable) tuples ``(time, priority, seq, replica, version)`` keyed like the reference's, with ``seq``
counted in this run and stale versions (a boundary moved earlier by an arrival) skipped on pop. Arrivals are
not pushed: they are already sorted, so the loop merges them with the heap, taking a boundary first at equal
times (the reference's priority order). Thresholds are ``(step, kind, request, epoch)``; entries of a preempted
request carry an old epoch and are skipped.
"""

from __future__ import annotations

import math
from collections import deque
from heapq import heappop, heappush

import numpy as np

from kvcore.sim.prepare import SERVE, Prepared, prepare
from kvcore.sim.result import RequestOutcomes, SimResult, build_result
from kvcore.sim.types import SimConfig, SimGroup, SimPolicy, Workload

_DONE = 0
"""Threshold kind: the request produced its last token."""
_CROSS = 1
"""Threshold kind: the request filled its output slots; from the next token on it grows one slot per step."""


def _run(workload: Workload, groups: tuple[SimGroup, ...], prep: Prepared) -> RequestOutcomes:  # noqa: C901
    n = len(workload)
    arr: list[float] = workload.arrival_s.tolist()
    out: list[int] = workload.output_tokens.tolist()
    inn: list[int] = prep.input_net.tolist()
    yy: list[int] = prep.reserve.tolist()
    grp: list[int] = prep.group.tolist()
    status: list[int] = prep.status.tolist()

    rep_group: list[int] = []
    for k, g in enumerate(groups):
        rep_group.extend([k] * g.replicas)
    n_rep = len(rep_group)
    lo_of = prep.replica_offset.tolist()
    hi_of = [lo_of[k] + g.replicas for k, g in enumerate(groups)]
    cap = [int(prep.usable_kv[k]) for k in rep_group]
    t0 = [groups[k].step_time_base_s for k in rep_group]
    t1 = [groups[k].step_time_per_seq_s for k in rep_group]
    rate = [groups[k].prefill_tokens_per_s for k in rep_group]

    # per replica
    load = [0] * n_rep  # running + queued, for join-shortest-queue
    c_now = [0] * n_rep  # step count at the last processed boundary (where the current run started)
    c_next = [-1] * n_rep  # step of the scheduled boundary, -1 when idle
    t_run = [0.0] * n_rep
    dt1_run = [0.0] * n_rep
    dt_run = [0.0] * n_rep
    ver = [0] * n_rep
    fixed = [0] * n_rep  # tokens held by non-growers
    n_fix = [0] * n_rep
    sa_fix = [0] * n_rep  # sum of out_slots + base over non-growers (for waste)
    n_grow = [0] * n_rep
    grow_sum = [0] * n_rep  # sum of input - base over growers
    growers: list[set[int]] = [set() for _ in range(n_rep)]
    thresholds: list[list[tuple[int, int, int, int]]] = [[] for _ in range(n_rep)]
    queues: list[deque[int]] = [deque() for _ in range(n_rep)]
    waste = [0.0] * n_rep

    # per request
    base = [0] * n
    slots = [0] * n
    gen_saved = [0] * n
    epoch = [0] * n
    adm_seq = [0] * n
    nan = math.nan
    admit = [nan] * n
    first = [nan] * n
    finish = [nan] * n
    preempt = [0] * n
    recomputed = [0] * n
    replica_of = [-1] * n

    events: list[tuple[float, int, int, int, int]] = []
    seq = 0
    admissions = 0

    def boundary(r: int, c: int, t: float) -> None:
        nonlocal seq, admissions
        # per-replica scalars in locals, stored back once
        fx = fixed[r]
        nf = n_fix[r]
        sa = sa_fix[r]
        o = n_grow[r]
        gs = grow_sum[r]
        # 0. waste of the steps since the last boundary (first step dt1, the others dt)
        c0 = c_now[r]
        k = c - c0
        if k > 0:
            if nf:
                w1 = sa - nf * (c0 + 1)
                total = k * sa - nf * (k * c0 + k * (k + 1) // 2)
                waste[r] += dt_run[r] * (total - w1) + dt1_run[r] * w1
            c_now[r] = c
        # 1. completions and reservation crossings due at step c
        h = thresholds[r]
        gset = growers[r]
        while h and h[0][0] <= c:
            _, kind, q, ep = heappop(h)
            if ep != epoch[q]:
                continue
            if kind == _DONE:
                finish[q] = t
                load[r] -= 1
                if q in gset:
                    gset.discard(q)
                    o -= 1
                    gs -= inn[q] - base[q]
                    continue
            # a completing non-grower or a crossing: release the fixed holding
            a = slots[q]
            fx -= inn[q] + a
            nf -= 1
            sa -= a + base[q]
            if kind != _DONE:
                gset.add(q)
                o += 1
                gs += inn[q] - base[q]
        # 2. growth: each grower takes one free slot, in admission order; without one it is preempted
        capr = cap[r]
        dq = queues[r]
        if o:
            free = capr - fx - gs - o * c
            if free < o:
                preempted = []
                for q in sorted(gset, key=adm_seq.__getitem__):
                    if free >= 1:
                        free -= 1
                        continue
                    g = c - base[q]
                    free += inn[q] + g
                    gset.discard(q)
                    o -= 1
                    gs -= inn[q] - base[q]
                    epoch[q] += 1
                    gen_saved[q] = g
                    preempt[q] += 1
                    preempted.append(q)
                preempted.reverse()
                dq.extendleft(preempted)
        # 3. FCFS admission (memory after growth)
        free = capr - fx - gs - o * (c + 1)
        prefill = 0
        newly = None
        while dq:
            q = dq[0]
            g = gen_saved[q]
            a = yy[q]
            if a <= g:
                a = g + 1
            need = inn[q] + a
            if need > free:
                break
            dq.popleft()
            free -= need
            b = c - g
            base[q] = b
            slots[q] = a
            fx += need
            nf += 1
            sa += a + b
            adm_seq[q] = admissions
            admissions += 1
            ep = epoch[q]
            oq = out[q]
            heappush(h, (b + oq, _DONE, q, ep))
            if a < oq:
                heappush(h, (b + a, _CROSS, q, ep))
            if g:
                prefill += inn[q] + g
                recomputed[q] += inn[q] + g
            else:
                prefill += inn[q]
                admit[q] = t
                if newly is None:
                    newly = [q]
                else:
                    newly.append(q)
        fixed[r] = fx
        n_fix[r] = nf
        sa_fix[r] = sa
        n_grow[r] = o
        grow_sum[r] = gs
        # 4. the next run
        batch = nf + o
        v = ver[r] + 1
        ver[r] = v
        if not batch:
            if dq:
                raise RuntimeError(f"replica {r} idle with a queue it can never admit")
            c_next[r] = -1
            return
        dt = t0[r] + t1[r] * batch
        dt1 = dt + prefill / rate[r] if prefill else dt
        t_run[r] = t
        dt_run[r] = dt
        dt1_run[r] = dt1
        if newly is not None:
            tf = t + dt1
            for q in newly:
                first[q] = tf
        top = h[0]
        while epoch[top[2]] != top[3]:
            heappop(h)
            top = h[0]
        j = top[0] - c
        if o:
            jf = free // o + 1
            if jf < j:
                j = jf
        c_next[r] = c + j
        heappush(events, (t + dt1 + (j - 1) * dt, 0, seq, r, v))
        seq += 1

    ai = 0
    while True:
        if events:
            te = events[0][0]
            if ai < n and arr[ai] < te:
                pass
            else:
                _, _, _, r, v = heappop(events)
                if v == ver[r]:
                    boundary(r, c_next[r], te)
                continue
        elif ai >= n:
            break
        # the next arrival
        q = ai
        ai += 1
        if status[q] != SERVE:
            continue
        k = grp[q]
        r = lo = lo_of[k]
        best = load[lo]
        for i in range(lo + 1, hi_of[k]):
            if load[i] < best:
                best = load[i]
                r = i
        load[r] += 1
        replica_of[q] = r
        dq = queues[r]
        ta = arr[q]
        if c_next[r] < 0:
            dq.append(q)
            boundary(r, c_now[r], ta)
        elif dq:
            dq.append(q)
        else:
            dq.append(q)
            # the first boundary of the current run strictly after ta
            ts = t_run[r] + dt1_run[r]
            dt = dt_run[r]
            if ta < ts:
                j = 1
            else:
                j = int((ta - ts) / dt) + 2
                while ts + (j - 1) * dt <= ta:
                    j += 1
                while j > 1 and ts + (j - 2) * dt > ta:
                    j -= 1
            cj = c_now[r] + j
            if cj < c_next[r]:
                c_next[r] = cj
                ver[r] += 1
                heappush(events, (ts + (j - 1) * dt, 0, seq, r, ver[r]))
                seq += 1

    waste_by_group = np.zeros(len(groups))
    for r in range(n_rep):
        waste_by_group[rep_group[r]] += waste[r]
    return RequestOutcomes(
        status=prep.status,
        group=prep.group,
        replica=np.asarray(replica_of, dtype=np.int64),
        admit_s=np.asarray(admit, dtype=np.float64),
        first_token_s=np.asarray(first, dtype=np.float64),
        finish_s=np.asarray(finish, dtype=np.float64),
        preemptions=np.asarray(preempt, dtype=np.int64),
        recomputed_tokens=np.asarray(recomputed, dtype=np.int64),
        prefix_hit=prep.prefix_hit,
        waste_by_group=waste_by_group,
    )


def simulate(
    workload: Workload,
    groups: tuple[SimGroup, ...] | list[SimGroup],
    policy: SimPolicy,
    *,
    rng: np.random.Generator,
    config: SimConfig | None = None,
) -> SimResult:
    """Replay ``workload`` on ``groups`` under ``policy``; the model is stated in :mod:`kvcore.sim`.

    ``rng`` makes every random draw (admission, routing, prefix hits; see :mod:`kvcore.sim.prepare`), so the same
    seed gives the same result. Nothing is written anywhere; use :func:`kvcore.sim.write_json` to save.
    """
    cfg = config if config is not None else SimConfig()
    grp = tuple(groups)
    prep = prepare(workload, grp, policy, rng=rng, config=cfg)
    return build_result("fast", workload, grp, policy, cfg, prep, _run(workload, grp, prep))
