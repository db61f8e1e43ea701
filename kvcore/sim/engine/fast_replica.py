"""One replica of the fast engine model: vLLM 0.33's ``schedule()`` applied only at *interesting* steps. Between
interesting steps every running request is a decoder (:mod:`kvcore.sim.engine.fast_state`), nothing is admitted and
nothing finishes, so every step has the same batch, a duration that grows by the same context term each step (each
decoder holds one token more), and only allocates the blocks its boundary-crossing decoders need. Decoders are
counted per residue ``b mod B`` (``cnt``), so the blocks allocated over any run of steps is a cyclic prefix sum, and
the first step at which they would run out is found in O(B). Interesting steps: a completion's next step, the first
step short of blocks, a step with an explicit (prefilling) request, the step after a preemption, and a step at which
an arrival may be admitted (decided by the caller). At an interesting step the rules of
:mod:`kvcore.sim.engine.reference` run in the same order; the per-request decode loop is only materialised when the
free blocks do not cover every allocation of the step.

kvplan's gate needs the running requests' outstanding claims. A decoder below its reservation (``K = ceil((prompt +
y) / B)`` blocks) owes ``K - ceil((s - b) / B)``; those are summed per residue too (``under_*``), and decoders leave
that set through a heap of the step at which they reach K.
"""

from __future__ import annotations

import heapq
from collections import deque

from kvcore.sim.engine.config import EngineConfig, StepTiming
from kvcore.sim.engine.fast_pool import FastPool
from kvcore.sim.engine.fast_state import DECODER, EXPLICIT, Requests, StepHistory


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class FastReplica:
    def __init__(self, cfg: EngineConfig, num_blocks: int, timing: StepTiming, group: int, rq: Requests) -> None:
        self.cfg = cfg
        self.B = cfg.block_size
        self.wm = cfg.watermark_blocks(num_blocks)
        self.M = cfg.max_num_batched_tokens
        self.max_seqs = cfg.max_num_seqs
        self.prio_policy = cfg.policy == "priority"
        self.gate = cfg.admission == "gate"
        self.caching = cfg.prefix_caching
        self.timing = timing
        self.group = group
        self.rq = rq
        self.pool = FastPool(num_blocks, cfg.prefix_caching)
        self.nload = 0
        self.running: dict[int, None] = {}
        """Running requests in vLLM's ``self.running`` order (insertion order)."""
        self.explicit: dict[int, None] = {}
        """The running requests that are not decoders (at most the one prefilling, between steps)."""
        self.last_dec_seq = -1
        """An upper bound on the decoders' admission sequence numbers."""
        self.pending = False
        """A ``schedule()`` of this replica is due at the current instant: arrivals just join the queue."""
        self.fifo: deque[int] = deque()
        self.heap: list[tuple[int, int]] = []
        self.n_dec = 0
        self.sum_base = 0
        """Sum of the decoders' bases: at step s they hold ``n_dec * s - sum_base`` tokens of context."""
        self.cnt = [0] * self.B
        self.fin: list[tuple[int, int, int, int]] = []
        self.under_cnt = [0] * self.B
        self.under_m = [0] * self.B
        self.under_k = 0
        self.under_heap: list[tuple[int, int, int]] = []
        self.hist = StepHistory()
        self.next_seq = 0
        self.c0 = 0
        """First step of the current run (the last interesting step scheduled)."""
        self.t0 = 0
        self.dt1 = 0
        self.dt = 0
        self.c_next = -1
        """Next interesting step; -1 when idle."""
        self.ver = 0
        self.steps = 0
        self.decode_ns: dict[int, int] = {}
        """Duration of a decode-only step by batch size, less its context term (cached)."""
        self.ctx_ps = timing.context_ps
        self.idle_step = 0
        """Index of the next step when the replica is idle (step indices do not advance while idle)."""

    # ------------------------------------------------------------------ queue
    def n_waiting(self) -> int:
        return len(self.fifo) + len(self.heap)

    def load(self) -> int:
        """Running + waiting requests (join-shortest-queue)."""
        return self.nload

    def _push_waiting(self, j: int, front: bool) -> None:
        if self.prio_policy:
            heapq.heappush(self.heap, (self.rq.prio[j], j))
        elif front:
            self.fifo.appendleft(j)
        else:
            self.fifo.append(j)

    def add(self, j: int) -> None:
        self._push_waiting(j, False)
        self.nload += 1

    def head(self) -> int:
        return self.heap[0][1] if self.prio_policy else self.fifo[0]

    def _pop_waiting(self) -> int:
        return heapq.heappop(self.heap)[1] if self.prio_policy else self.fifo.popleft()

    # ------------------------------------------------------------------ decoders
    def crossings(self, a: int, b: int) -> int:
        """Blocks the decoders allocate over steps ``a..b``."""
        if b < a or not self.n_dec:
            return 0
        B, cnt = self.B, self.cnt
        k = b - a + 1
        q, r = divmod(k, B)
        total = q * self.n_dec
        start = (a - 1) % B
        for i in range(r):
            total += cnt[(start + i) % B]
        return total

    def first_shortage(self, s: int, free: int) -> int:
        """First step after ``s`` at which the decoders' allocations exceed ``free``; -1 if never."""
        if not self.n_dec:
            return -1
        B, cnt = self.B, self.cnt
        q, rem = divmod(free, self.n_dec)
        acc = 0
        start = s % B  # step s + 1 uses cnt[s % B]
        for i in range(B):
            acc += cnt[(start + i) % B]
            if acc > rem:
                return s + q * B + i + 1
        raise AssertionError("a full period allocates n_dec blocks")  # pragma: no cover

    def _add_decoder(self, j: int, b: int, from_step: int) -> None:
        rq = self.rq
        rq.kind[j] = DECODER
        del self.explicit[j]
        self.last_dec_seq = max(self.last_dec_seq, rq.seq[j])
        rq.base[j] = b
        rq.gap_from[j] = from_step
        self.n_dec += 1
        self.sum_base += b
        self.cnt[b % self.B] += 1
        heapq.heappush(self.fin, (b + rq.prompt[j] + rq.target[j] - 1, rq.seq[j], j, rq.epoch[j]))
        if self.gate:
            k = _cdiv(rq.prompt[j] + rq.reserve[j], self.B)
            g = b + (k - 1) * self.B  # last step at which it holds fewer than k blocks
            if g >= from_step:
                rq.under[j] = True
                self.under_cnt[b % self.B] += 1
                self.under_m[b % self.B] += b // self.B
                self.under_k += k
                heapq.heappush(self.under_heap, (g, j, rq.epoch[j]))

    def _drop_under(self, j: int) -> None:
        rq = self.rq
        if rq.under[j]:
            rq.under[j] = False
            b = rq.base[j]
            self.under_cnt[b % self.B] -= 1
            self.under_m[b % self.B] -= b // self.B
            self.under_k -= _cdiv(rq.prompt[j] + rq.reserve[j], self.B)

    def _drop_decoder(self, j: int) -> None:
        rq = self.rq
        self.n_dec -= 1
        self.sum_base -= rq.base[j]
        self.cnt[rq.base[j] % self.B] -= 1
        self._drop_under(j)
        rq.kind[j] = EXPLICIT

    def decoder_blocks(self, j: int, last: int) -> tuple[int, int]:
        """(blocks, cached blocks) of decoder j after its allocation at step ``last``."""
        tokens = last - self.rq.base[j]
        return _cdiv(tokens, self.B), tokens // self.B

    def gate_claims(self, s: int) -> int:
        """Sum of the running requests' outstanding gate claims during step ``s`` (after its allocations)."""
        rq, B = self.rq, self.B
        while self.under_heap and self.under_heap[0][0] < s:
            _, j, ep = heapq.heappop(self.under_heap)
            if ep == rq.epoch[j] and rq.kind[j] == DECODER:
                self._drop_under(j)
        total = self.under_k
        for rho in range(B):
            if self.under_cnt[rho]:
                total -= self.under_cnt[rho] * ((s - rho + B - 1) // B) - self.under_m[rho]
        for j in self.explicit:
            total += max(0, _cdiv(rq.prompt[j] + max(rq.reserve[j], rq.output[j]), B) - rq.nblk[j])
        return total

    # ------------------------------------------------------------------ blocks
    def k_shared(self, j: int) -> int:
        return min(self.rq.prefix[j], self.rq.prompt[j]) // self.B

    def release(self, j: int, nblk: int, ncached: int) -> None:
        rq = self.rq
        self.pool.release(j, nblk, ncached, self.k_shared(j), rq.hits[j], rq.hit_hi[j], rq.own[j])
        rq.hits[j] = []
        rq.own[j] = []
        rq.hit_hi[j] = 0
        rq.nblk[j] = 0
        rq.ncached[j] = 0

    def grow(self, j: int, need_tokens: int) -> None:
        """Explicit request j's blocks grow to cover ``need_tokens``; newly full blocks are registered."""
        rq, B = self.rq, self.B
        more = _cdiv(need_tokens, B) - rq.nblk[j]
        if more > 0:
            self.pool.pop(more)
            rq.nblk[j] += more
        if self.caching:
            full = min(need_tokens, rq.prompt[j] + rq.output[j]) // B
            k = self.k_shared(j)
            for i in range(rq.ncached[j], min(full, k)):
                rq.own[j].append(self.pool.new_copy((rq.cls[j], i)))
            if full > rq.ncached[j]:
                rq.ncached[j] = full
