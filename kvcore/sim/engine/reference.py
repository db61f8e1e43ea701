"""The reference vLLM engine model: every replica runs vLLM 0.33's ``Scheduler.schedule()`` /
``update_from_output()`` one step at a time, written as a literal mirror of ``vllm/v1/core/sched/scheduler.py`` for
the features we model (one full-attention KV group, chunked prefill, prefix caching, watermark, ``fcfs`` and
``priority``, no speculative decoding, no connectors, synchronous scheduling). The parity tier holds it to vLLM
itself; the fast model (:mod:`kvcore.sim.engine.fast`) is held to it. Slow and simple on purpose.

One step of one replica (``schedule``):

1. **Running requests, in order.** Each gets ``min(tokens still to compute, token budget)`` (a decode: 1). Its
   blocks grow to cover them (``allocate_slots``; no watermark for running requests). When the pool cannot, a victim
   is preempted and the allocation retried: under ``fcfs`` the last running request (possibly the one that needs the
   block), under ``priority`` the running request with the largest ``(priority, arrival)`` (its tokens already
   scheduled in this step are given back). A preempted request frees every block, goes back to the waiting queue
   (front under ``fcfs``; by key under ``priority``) and later recomputes prompt + generated tokens, net of prefix
   cache hits. If the request preempted itself the loop stops (``priority``: goes on with the next one).
2. **Waiting requests**, only if nothing was preempted in this step: while budget is left and fewer than
   ``max_num_seqs`` run, the head of the queue is looked up in the prefix cache and admitted only if its whole known
   sequence fits (``scheduler_reserve_full_isl``) with the watermark kept free when anything is running, and with
   kvplan's gate when configured; otherwise admission stops for this step (head-of-line).
3. Every scheduled request's computed tokens advance; at the step's end a request whose computation reached its last
   known token samples one more token; one that reaches its output length finishes and frees its blocks.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

from kvcore.sim.engine.config import EngineConfig, StepTiming
from kvcore.sim.engine.jobs import EngineOutcomes, Jobs, freeze_outcomes, new_outcomes
from kvcore.sim.engine.ref_blocks import Block, BlockPool, Key
from kvcore.sim.gate import admits, running_claim, waiting_claim

WAITING, RUNNING, PREEMPTED, FINISHED = range(4)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(eq=False, slots=True)
class _Req:
    j: int
    prompt: int
    target: int
    cls: int
    prio: int
    prefix: int
    reserve: int
    status: int = WAITING
    computed: int = 0
    high: int = 0
    output: int = 0
    blocks: list[Block] = field(default_factory=list)
    n_cached: int = 0
    last_token_ns: int = -1

    @property
    def num_tokens(self) -> int:
        return self.prompt + self.output

    def key(self, i: int, block_size: int) -> Key:
        if (i + 1) * block_size <= min(self.prefix, self.prompt):
            return ("p", self.cls, i)
        return ("u", self.j, i)

    def order(self) -> tuple[int, int]:
        return (self.prio, self.j)


class _Replica:
    def __init__(self, cfg: EngineConfig, num_blocks: int, timing: StepTiming, group: int,
                 out: dict[str, list[int]]) -> None:
        self.cfg = cfg
        self.bs = cfg.block_size
        self.pool = BlockPool(num_blocks, cfg.prefix_caching)
        self.wm = cfg.watermark_blocks(num_blocks)
        self.timing = timing
        self.group = group
        self.out = out
        self.running: list[_Req] = []
        self.fifo: deque[_Req] = deque()
        self.heap: list[tuple[tuple[int, int], _Req]] = []
        self.busy = False
        self.scheduled: dict[_Req, int] = {}
        self.step_start = 0

    # ---- waiting queue (FCFSRequestQueue / PriorityRequestQueue)
    def n_waiting(self) -> int:
        return len(self.fifo) + len(self.heap)

    def add(self, r: _Req) -> None:
        if self.cfg.policy == "priority":
            heapq.heappush(self.heap, (r.order(), r))
        else:
            self.fifo.append(r)

    def peek(self) -> _Req:
        return self.heap[0][1] if self.cfg.policy == "priority" else self.fifo[0]

    def pop(self) -> _Req:
        return heapq.heappop(self.heap)[1] if self.cfg.policy == "priority" else self.fifo.popleft()

    def prepend(self, r: _Req) -> None:
        if self.cfg.policy == "priority":
            heapq.heappush(self.heap, (r.order(), r))
        else:
            self.fifo.appendleft(r)

    # ---- KVCacheManager
    def lookup(self, r: _Req) -> list[Block]:
        if not self.cfg.prefix_caching:
            return []
        hits = []
        for i in range((r.num_tokens - 1) // self.bs):
            blk = self.pool.lookup(r.key(i, self.bs))
            if blk is None:
                break
            hits.append(blk)
        return hits

    def to_allocate(self, r: _Req, num_tokens: int, hits: list[Block]) -> int:
        new = max(_cdiv(num_tokens, self.bs) - len(r.blocks) - len(hits), 0)
        return new + sum(1 for b in hits if b.ref == 0)

    def allocate(self, r: _Req, num_new: int, hits: list[Block], has_running: bool) -> bool:
        waiting = r.status in (WAITING, PREEMPTED)
        wm = self.wm if has_running and waiting else 0
        computed = r.computed + len(hits) * self.bs
        if waiting and self.to_allocate(r, r.num_tokens, hits) + wm > self.pool.num_free:
            return False
        need = computed + num_new
        if self.to_allocate(r, need, hits) + wm > self.pool.num_free:
            return False
        if hits:
            self.pool.touch(hits)
            r.blocks.extend(hits)
            r.n_cached = len(r.blocks)
        more = _cdiv(need, self.bs) - len(r.blocks)
        if more > 0:
            r.blocks.extend(self.pool.get_new_blocks(more))
        if self.cfg.prefix_caching:
            full = min(need, r.num_tokens) // self.bs
            for i in range(r.n_cached, full):
                self.pool.cache_block(r.blocks[i], r.key(i, self.bs))
            r.n_cached = max(r.n_cached, full)
        return True

    def free(self, r: _Req) -> None:
        blocks, r.blocks, r.n_cached = r.blocks, [], 0
        self.pool.free_blocks(reversed(blocks))

    def gate_admits(self, r: _Req, hits: list[Block]) -> bool:
        """kvplan's gate as ``kvplan_vllm.scheduler`` applies it: cached hit blocks no request holds are counted as
        free by vLLM, but taking the hit removes them, so they are not free for the gate."""
        claims = [running_claim(q.prompt, q.output, q.reserve, len(q.blocks), self.bs) for q in self.running]
        own = waiting_claim(r.prompt, r.output, r.reserve, len(hits) * self.bs, self.bs)
        return admits(self.pool.num_free - sum(1 for b in hits if b.ref == 0), claims, own)

    # ---- Scheduler
    def preempt(self, r: _Req) -> None:
        self.free(r)
        r.status = PREEMPTED
        r.computed = 0
        self.out["preemptions"][r.j] += 1
        self.prepend(r)

    def schedule(self, now: int) -> int:
        """One ``schedule()``; returns the step's duration (0: nothing scheduled)."""
        cfg, budget = self.cfg, self.cfg.max_num_batched_tokens
        scheduled: dict[_Req, int] = {}
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            r = self.running[i]
            n = min(r.num_tokens - r.computed, budget)
            ok = False
            while True:
                if self.allocate(r, n, [], True):
                    ok = True
                    break
                if cfg.policy == "priority":
                    victim = max(self.running, key=_Req.order)
                    v = self.running.index(victim)
                    del self.running[v]
                    if v < i:
                        i -= 1
                    if victim in scheduled:
                        budget += scheduled.pop(victim)
                else:
                    victim = self.running.pop()
                self.preempt(victim)
                preempted = True
                if victim is r:
                    break
            if not ok:
                if cfg.policy == "priority" and r.status == PREEMPTED:
                    continue
                break
            scheduled[r] = n
            budget -= n
            i += 1
        if not preempted:
            while budget > 0 and self.n_waiting() and len(self.running) < cfg.max_num_seqs:
                r = self.peek()
                hits = self.lookup(r)
                n = min(r.num_tokens - len(hits) * self.bs, budget)
                if cfg.admission == "gate" and not self.gate_admits(r, hits):
                    break
                if not self.allocate(r, n, hits, bool(self.running)):
                    break
                self.pop()
                self.running.append(r)
                if r.status == WAITING:
                    self.out["cached"][r.j] = len(hits) * self.bs
                    self.out["admit_ns"][r.j] = now
                r.status = RUNNING
                r.computed = len(hits) * self.bs
                scheduled[r] = n
                budget -= n
        for r, n in scheduled.items():
            self.out["recomputed"][r.j] += max(0, min(r.computed + n, r.high) - r.computed)
            r.computed += n
            r.high = max(r.high, r.computed)
        self.scheduled = scheduled
        self.step_start = now
        if not scheduled:
            return 0
        context = sum(r.computed for r in scheduled) if self.timing.context_ps else 0
        return self.timing.step_ns(len(scheduled), sum(scheduled.values()), context)

    def finish_step(self, now: int) -> int:
        """``update_from_output`` at the step's end; returns how many requests finished."""
        done = []
        for r in self.scheduled:
            if r.computed < r.num_tokens:
                continue
            r.output += 1
            if r.last_token_ns < 0:
                self.out["first_token_ns"][r.j] = now
            else:
                self.out["max_gap_ns"][r.j] = max(self.out["max_gap_ns"][r.j], now - r.last_token_ns)
            r.last_token_ns = now
            if r.output == r.target:
                r.status = FINISHED
                self.free(r)
                self.out["finish_ns"][r.j] = now
                self.out["finish_step_ns"][r.j] = self.step_start
                done.append(r)
        if done:
            gone = set(done)
            self.running = [r for r in self.running if r not in gone]
        self.scheduled = {}
        return len(done)


STEP_END, ARRIVAL, STEP_START = 0, 1, 2
"""Heap priorities at equal times: a step's outputs, then arrivals, then the next ``schedule()``."""


def run_reference(jobs: Jobs) -> EngineOutcomes:
    """Replay ``jobs`` step by step on every replica of every group."""
    out = new_outcomes(len(jobs), len(jobs.groups))
    replicas: list[_Replica] = []
    first: list[int] = []
    for k, g in enumerate(jobs.groups):
        first.append(len(replicas))
        replicas.extend(_Replica(g.engine, g.num_blocks, g.timing, k, out) for _ in range(g.replicas))
    heap: list[tuple[int, int, int, int]] = []
    seq = 0
    for j, t in enumerate(jobs.arrival_ns):
        if jobs.group[j] >= 0:
            heap.append((t, ARRIVAL, seq, j))
            seq += 1
    heapq.heapify(heap)
    while heap:
        t, kind, _, x = heapq.heappop(heap)
        if kind == ARRIVAL:
            k = jobs.group[x]
            lo = first[k]
            r = min(range(lo, lo + jobs.groups[k].replicas),
                    key=lambda i: (len(replicas[i].running) + replicas[i].n_waiting(), i))
            rep = replicas[r]
            out["replica"][x] = r
            rep.add(_Req(x, jobs.prompt[x], jobs.output[x], jobs.cls[x], jobs.priority[x], jobs.prefix[x],
                         jobs.reserve[x]))
            if not rep.busy:
                rep.busy = True
                heapq.heappush(heap, (t, STEP_START, seq, r))
                seq += 1
            continue
        rep = replicas[x]
        if kind == STEP_END:
            rep.finish_step(t)
            heapq.heappush(heap, (t, STEP_START, seq, x))
            seq += 1
            continue
        dt = rep.schedule(t)
        if dt == 0:
            if rep.running or rep.n_waiting():
                raise RuntimeError(f"replica {x} scheduled nothing with {rep.n_waiting()} waiting: it would hang")
            rep.busy = False
            continue
        out["steps"][rep.group] += 1
        heapq.heappush(heap, (t + dt, STEP_END, seq, x))
        seq += 1
    return freeze_outcomes(out)
