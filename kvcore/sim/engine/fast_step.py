"""The fast engine model's interesting steps: :meth:`FastStep.end` (the outputs of the step before, i.e.
completions, after accounting for the decode steps skipped since the last interesting step) and
:meth:`FastStep.start` (one ``schedule()``, the same rules in the same order as
:mod:`kvcore.sim.engine.reference`, then the next interesting step)."""

from __future__ import annotations

import heapq

from kvcore.sim.engine.fast_replica import FastReplica, _cdiv
from kvcore.sim.engine.fast_state import DECODER, EXPLICIT, FINISHED, PREEMPTED, RUNNING, WAITING
from kvcore.sim.gate import waiting_claim


class FastStep(FastReplica):
    def end(self, s: int, t: int) -> None:
        """Close the run ``c0 .. s - 1`` and process the completions of step ``s - 1`` (their end is ``t``)."""
        rq, out = self.rq, self.rq.out
        self.hist.close_run(s)
        if s > self.c0 + 1:
            skipped = self.crossings(self.c0 + 1, s - 1)
            if skipped:
                self.pool.pop(skipped)
            self.steps += s - self.c0 - 1
        fin = self.fin
        while fin and fin[0][0] < s:
            f, _, j, ep = heapq.heappop(fin)
            if ep != rq.epoch[j] or rq.status[j] != RUNNING:
                continue
            if f != s - 1:
                raise AssertionError(f"request {j} finished at step {f}, noticed at {s}")  # pragma: no cover
            if rq.kind[j] == DECODER:
                gap = self.hist.longest(rq.gap_from[j], f)
                if gap > out["max_gap_ns"][j]:
                    out["max_gap_ns"][j] = gap
                nblk, ncached = self.decoder_blocks(j, f)
                self._drop_decoder(j)
            else:
                nblk, ncached = rq.nblk[j], rq.ncached[j]
                del self.explicit[j]
            out["finish_ns"][j] = t
            out["finish_step_ns"][j] = t - self.hist.duration(f)
            self.release(j, nblk, ncached)
            rq.status[j] = FINISHED
            rq.epoch[j] += 1
            del self.running[j]
            self.nload -= 1

    def _preempt(self, j: int, s: int, t: int, allocated_now: bool) -> None:
        rq, out = self.rq, self.rq.out
        if rq.kind[j] == DECODER:
            b = rq.base[j]
            nblk, ncached = self.decoder_blocks(j, s if allocated_now else s - 1)
            rq.high[j] = s - 1 - b
            rq.output[j] = s - b - rq.prompt[j]
            gap = self.hist.longest(rq.gap_from[j], s - 1)
            if gap > out["max_gap_ns"][j]:
                out["max_gap_ns"][j] = gap
            rq.last_tok[j] = t
            self._drop_decoder(j)
        else:
            nblk, ncached = rq.nblk[j], rq.ncached[j]
            del self.explicit[j]
        self.release(j, nblk, ncached)
        rq.status[j] = PREEMPTED
        rq.computed[j] = 0
        rq.epoch[j] += 1
        out["preemptions"][j] += 1
        del self.running[j]
        self._push_waiting(j, True)

    def _slow_running(self, s: int, t: int) -> tuple[dict[int, int], bool]:
        """vLLM's running loop request by request (blocks run short at this step). Returns the running requests
        scheduled (request -> tokens, in order; decoders included) and whether anything was preempted."""
        rq, B, pool = self.rq, self.B, self.pool
        order = list(self.running)
        scheduled: dict[int, int] = {}
        allocated: set[int] = set()
        preempted = False
        budget = self.M
        i = 0
        while i < len(order) and budget > 0:
            j = order[i]
            if rq.kind[j] == DECODER:
                n = 1
                need = 1 if (s - rq.base[j]) % B == 1 % B else 0
            else:
                n = min(rq.prompt[j] + rq.output[j] - rq.computed[j], budget)
                need = max(_cdiv(rq.computed[j] + n, B) - rq.nblk[j], 0)
            ok = False
            while True:
                if need <= pool.num_free:
                    ok = True
                    break
                if self.prio_policy:
                    victim = max(order, key=lambda q: (rq.prio[q], q))
                else:
                    victim = order[-1]
                v = order.index(victim)
                del order[v]
                if v < i:
                    i -= 1
                if victim in scheduled:
                    budget += scheduled.pop(victim)
                self._preempt(victim, s, t, victim in allocated)
                preempted = True
                if victim == j:
                    break
            if not ok:
                if self.prio_policy and rq.status[j] == PREEMPTED:
                    continue
                break
            if rq.kind[j] == DECODER:
                if need:
                    pool.pop(need)
            else:
                self.grow(j, rq.computed[j] + n)
            allocated.add(j)
            scheduled[j] = n
            budget -= n
            i += 1
        return scheduled, preempted

    def start(self, s: int, t: int) -> int:
        """Schedule step ``s`` at ``t``; returns the start time of the next interesting step (-1: now idle)."""
        self.pending = False
        rq, B, pool = self.rq, self.B, self.pool
        out = rq.out
        n_dec = self.n_dec
        explicit = self.explicit
        prompt, output, computed, nblk = rq.prompt, rq.output, rq.computed, rq.nblk
        # ---- 1. running requests
        crossing = self.cnt[(s - 1) % B] if n_dec else 0
        preempted = False
        if not explicit:
            if crossing <= pool.num_free:
                if crossing:
                    pool.pop(crossing)
                explicit_sched: list[tuple[int, int]] = []
                batch = tokens = n_dec
                budget = self.M - n_dec
                ctx = n_dec * s - self.sum_base
            else:
                explicit_sched, batch, tokens, budget, preempted, ctx = self._running_slow(s, t)
        else:
            budget = self.M - n_dec
            plan = []
            needs = crossing
            in_order = all(rq.seq[j] > self.last_dec_seq for j in explicit)
            for j in explicit:
                if budget <= 0:
                    break
                n = min(prompt[j] + output[j] - computed[j], budget)
                plan.append((j, n))
                needs += max(_cdiv(computed[j] + n, B) - nblk[j], 0)
                budget -= n
            if in_order and needs <= pool.num_free:
                if crossing:
                    pool.pop(crossing)
                for j, n in plan:
                    self.grow(j, computed[j] + n)
                explicit_sched = plan
                batch, tokens = n_dec + len(plan), n_dec + sum(n for _, n in plan)
                ctx = n_dec * s - self.sum_base
            else:
                explicit_sched, batch, tokens, budget, preempted, ctx = self._running_slow(s, t)
        # ---- 2. waiting requests (none in a step that preempted)
        if not preempted and budget > 0 and (self.fifo or self.heap):
            budget, batch, tokens = self._admit(s, t, budget, batch, tokens, explicit_sched)
        if batch == 0:
            if self.running or self.fifo or self.heap:
                raise RuntimeError(f"a replica scheduled nothing with {self.n_waiting()} waiting: it would hang")
            self.c_next = -1
            self.idle_step = s
            return -1
        # ---- 3. the step runs; its explicit requests advance and may sample
        dt1 = self.timing.base_ns(batch, tokens) if batch != tokens else self._decode_ns(batch)
        ps = self.ctx_ps
        if ps:
            ctx += sum(computed[j] + n for j, n in explicit_sched)
            dt1 += (ctx * ps + 500) // 1000
        t_end = t + dt1
        high = rq.high
        for j, n in explicit_sched:
            c = computed[j]
            if c < high[j]:
                out["recomputed"][j] += min(c + n, high[j]) - c
            c += n
            computed[j] = c
            if c > high[j]:
                high[j] = c
            if c < prompt[j] + output[j]:
                continue
            output[j] += 1
            if rq.last_tok[j] < 0:
                out["first_token_ns"][j] = t_end
            elif t_end - rq.last_tok[j] > out["max_gap_ns"][j]:
                out["max_gap_ns"][j] = t_end - rq.last_tok[j]
            rq.last_tok[j] = t_end
            if output[j] == rq.target[j]:
                heapq.heappush(self.fin, (s, rq.seq[j], j, rq.epoch[j]))
            else:
                self._add_decoder(j, s - c, s + 1)
        nd = self.n_dec
        dt = self._decode_ns(nd) if nd else dt1
        lengthens = bool(ps and nd)
        if lengthens:  # step s + 1 + k: dt + floor((a * k + b) / 1000), its decoders' context growing by nd a step
            self.hist.start_run(s, dt1, dt, ps * nd, ps * (nd * (s + 1) - self.sum_base) + 500)
        else:
            self.hist.start_run(s, dt1, dt)
        self.steps += 1
        # ---- 4. the next interesting step: the step after a preemption admits again; a queue head held back by
        # this step's token budget (spent by prefill) may fit the next one; an explicit request continues
        if preempted or self.explicit or (budget <= 0 and (self.fifo or self.heap)):
            nxt = s + 1
        else:
            nxt = self.fin[0][0] + 1 if self.fin else -1
            free = pool.num_free
            # the decoders allocate at most n_dec blocks per B steps: skip the search when that cannot run out
            if nxt < 0 or ((nxt - s - 1) // B + 1) * nd > free:
                short = self.first_shortage(s, free)
                if short >= 0 and (nxt < 0 or short < nxt):
                    nxt = short
        self.c0, self.t0, self.dt1, self.dt, self.c_next = s, t, dt1, dt, nxt
        return t_end + (self.hist.elapsed(nxt - s - 1) if lengthens else (nxt - s - 1) * dt)

    def _decode_ns(self, batch: int) -> int:
        dt = self.decode_ns.get(batch)
        if dt is None:
            dt = self.decode_ns[batch] = self.timing.base_ns(batch, batch)
        return dt

    def _running_slow(self, s: int, t: int) -> tuple[list[tuple[int, int]], int, int, int, bool, int]:
        """The slow running loop's explicit requests scheduled, batch, tokens, budget left, whether it preempted,
        and the context its scheduled decoders hold after the step."""
        scheduled, preempted = self._slow_running(s, t)
        kind, base = self.rq.kind, self.rq.base
        explicit_sched = [(j, n) for j, n in scheduled.items() if kind[j] == EXPLICIT]
        tokens = sum(scheduled.values())
        ctx = sum(s - base[j] for j in scheduled if kind[j] == DECODER) if self.ctx_ps else 0
        return explicit_sched, len(scheduled), tokens, self.M - tokens, preempted, ctx

    def _admit(self, s: int, t: int, budget: int, batch: int, tokens: int,
               explicit_sched: list[tuple[int, int]]) -> tuple[int, int, int]:
        """vLLM's waiting loop: admit queue heads while they fit; returns the budget, batch and tokens left."""
        rq, B, pool, out = self.rq, self.B, self.pool, self.rq.out
        while budget > 0 and (self.fifo or self.heap) and len(self.running) < self.max_seqs:
            j = self.head()
            ntok = rq.prompt[j] + rq.output[j]
            copies, segs = (pool.lookup(j, rq.cls[j], min(rq.prefix[j], rq.prompt[j]) // B, (ntok - 1) // B)
                            if self.caching else ([], []))
            h = len(copies) + len(segs)
            hit_tokens = h * B
            n = min(ntok - hit_tokens, budget)
            evict = sum(1 for c in copies if c.ref == 0) + len(segs)
            if self.gate:  # hit blocks no request holds are free for vLLM, not for the gate (they are taken)
                own = waiting_claim(rq.prompt[j], rq.output[j], rq.reserve[j], hit_tokens, B)
                if pool.num_free - evict < self.gate_claims(s) + own:
                    break
            wm = self.wm if self.running else 0
            if max(_cdiv(ntok, B) - h, 0) + evict + wm > pool.num_free:
                break
            if max(_cdiv(hit_tokens + n, B) - h, 0) + evict + wm > pool.num_free:
                break
            pool.touch(copies, segs, len(copies))
            rq.hits[j] = copies
            rq.hit_hi[j] = h if segs else 0
            rq.nblk[j] = h
            rq.ncached[j] = h
            self.grow(j, hit_tokens + n)
            self._pop_waiting()
            self.running[j] = None
            self.explicit[j] = None
            rq.seq[j] = self.next_seq
            self.next_seq += 1
            if rq.status[j] == WAITING:
                out["cached"][j] = hit_tokens
                out["admit_ns"][j] = t
            rq.status[j] = RUNNING
            rq.computed[j] = hit_tokens
            explicit_sched.append((j, n))
            budget -= n
            batch += 1
            tokens += n
        return budget, batch, tokens

    def cut_for_arrival(self, j: int, ta: int, head_before: int) -> int:
        """Request j arrived at ``ta`` during a run. If it could be admitted before the next interesting step,
        make the first step starting at or after ``ta`` interesting and return its start time; else -1."""
        rq = self.rq
        if head_before >= 0:
            if not self.prio_policy or (rq.prio[j], j) >= (rq.prio[head_before], head_before):
                return -1
        if len(self.running) >= self.max_seqs or self.M - self.n_dec <= 0:
            return -1
        first = self.t0 + self.dt1
        if ta <= first:
            i, wait = 1, 0
        elif not self.hist.run_a[-1]:
            i = 1 + _cdiv(ta - first, self.dt)
            wait = (i - 1) * self.dt
        else:  # the run's steps lengthen with their context
            m, wait = self.hist.first_reaching(ta - first, self.c_next - self.c0 - 2)
            if m < 0:
                return -1
            i = 1 + m
        cs = self.c0 + i
        if cs >= self.c_next:
            return -1
        self.c_next = cs
        return first + wait
