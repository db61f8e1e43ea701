"""Per-request state of the fast engine model, and the step-duration history it answers gap queries from.

A running request is *explicit* (admitted, prefilling, or just re-admitted: its computed tokens and blocks are stored)
or a *decoder* (its prefill is done and it gains one token per step). A decoder is described by one number, its
base ``b``: before step ``s`` it knows ``s - b`` tokens, schedules one, holds ``ceil((s - b) / B)`` blocks after the
step's allocation (it needs a new block at step ``s`` iff ``(s - b) % B == 1 % B``) and samples its last token at step
``b + prompt + output - 1``. Nothing is touched per decode step.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right

from kvcore.sim.engine.config import floor_sum
from kvcore.sim.engine.fast_pool import Copy
from kvcore.sim.engine.jobs import Jobs

WAITING, RUNNING, PREEMPTED, FINISHED = range(4)
EXPLICIT, DECODER = 0, 1


class Requests:
    """Mutable per-request lists, indexed by request."""

    def __init__(self, jobs: Jobs, out: dict[str, list[int]]) -> None:
        n = len(jobs)
        self.prompt = jobs.prompt
        self.target = jobs.output
        self.cls = jobs.cls
        self.prio = jobs.priority
        self.reserve = jobs.reserve
        self.prefix = jobs.prefix
        self.out = out
        self.status = [WAITING] * n
        self.kind = [EXPLICIT] * n
        self.epoch = [0] * n
        self.seq = [0] * n
        self.base = [0] * n
        self.computed = [0] * n
        self.output = [0] * n
        self.nblk = [0] * n
        self.ncached = [0] * n
        self.hits: list[list[Copy]] = [[] for _ in range(n)]
        self.hit_hi = [0] * n
        self.own: list[list[Copy]] = [[] for _ in range(n)]
        self.high = [0] * n
        self.last_tok = [-1] * n
        self.gap_from = [0] * n
        """First step whose duration is a gap of this decoder (the step after its last explicit step)."""
        self.under = [False] * n


class StepHistory:
    """Durations of a replica's steps, by runs: a first step of ``dt1``, then decode steps whose durations grow with
    the context, step ``k`` after the first lasting ``dt + floor((a * k + b) / 1000)`` ns (``a = c_ps * batch``, the
    context term's growth per step; ``a = 0, b = 500``: equal steps of ``dt``). Answers "how long from the run's
    second step to its (m+1)-th" exactly (:func:`~kvcore.sim.engine.config.floor_sum`) and "longest step among steps
    a..now" in O(log runs) with a monotonic stack of suffix maxima (a run's decode steps never shorten)."""

    def __init__(self) -> None:
        self.run_start: list[int] = []
        self.run_dt1: list[int] = []
        self.run_dt: list[int] = []
        self.run_a: list[int] = []
        self.run_b: list[int] = []
        self.st_step: list[int] = []
        self.st_val: list[int] = []

    def _push(self, step: int, value: int) -> None:
        while self.st_val and self.st_val[-1] <= value:
            self.st_val.pop()
            self.st_step.pop()
        self.st_step.append(step)
        self.st_val.append(value)

    def start_run(self, step: int, dt1: int, dt: int, a: int = 0, b: int = 500) -> None:
        self.run_start.append(step)
        self.run_dt1.append(dt1)
        self.run_dt.append(dt)
        self.run_a.append(a)
        self.run_b.append(b)
        self._push(step, dt1)

    def close_run(self, end: int) -> None:
        """The current run's steps are ``run_start[-1] .. end - 1``."""
        if self.run_start and end > self.run_start[-1] + 1:
            self._push(self.run_start[-1] + 1, self.duration(end - 1))

    def elapsed(self, m: int, r: int = -1) -> int:
        """Nanoseconds from the start of run ``r``'s second step to the start of its ``(m + 2)``-th: ``m`` decode
        steps."""
        a, b, dt = self.run_a[r], self.run_b[r], self.run_dt[r]
        if a == 0:
            return m * (dt + b // 1000)
        if m <= 2:  # most runs are short: their sums written out
            return 0 if m <= 0 else dt + b // 1000 if m == 1 else 2 * dt + b // 1000 + (a + b) // 1000
        return m * dt + floor_sum(m, 1000, a, b)

    def first_reaching(self, x: int, m_max: int) -> tuple[int, int]:
        """The least ``m`` in ``1..m_max`` with ``elapsed(m) >= x`` (``x >= 1``) in the current run, and that
        ``elapsed(m)``; ``(-1, 0)`` if none. Without its floors the sum is ``U(m) = m dt + (a m (m - 1) / 2 + b m) /
        1000`` (an integer quadratic times 2000, compared exactly); the floors take less than 1 ns a step off it, so
        ``m`` is at or just past the least ``m`` with ``U(m) >= x``, found from the quadratic's root."""
        a, b, dt = self.run_a[-1], self.run_b[-1], self.run_dt[-1]
        x2000 = 2000 * x

        def under(m: int) -> bool:  # U(m) < x
            return 2000 * m * dt + a * m * (m - 1) + 2 * b * m < x2000

        lin = dt + (b - a / 2.0) / 1000.0
        k = max(1, math.ceil(2.0 * x / (lin + math.sqrt(lin * lin + a / 500.0 * x))))
        while k > 1 and not under(k - 1):
            k -= 1
        while under(k):
            k += 1
        for _ in range(4):  # almost always the first or second
            if k > m_max:
                return -1, 0
            e = self.elapsed(k)
            if e >= x:
                return k, e
            k += 1
        if k > m_max or self.elapsed(m_max) < x:  # steps of a few ns: bisect
            return -1, 0
        hi = m_max
        while k < hi:
            mid = (k + hi) // 2
            if self.elapsed(mid) >= x:
                hi = mid
            else:
                k = mid + 1
        return k, self.elapsed(k)

    def duration(self, step: int) -> int:
        r = bisect_right(self.run_start, step) - 1
        k = step - self.run_start[r] - 1
        if k < 0:
            return self.run_dt1[r]
        a = self.run_a[r]
        return self.run_dt[r] + (a * k + self.run_b[r]) // 1000 if a else self.run_dt[r]

    def longest(self, a: int, b: int) -> int:
        """Longest duration among steps ``a..b`` (all closed); 0 when ``a > b``."""
        if a > b:
            return 0
        i = bisect_left(self.st_step, a)
        best = self.st_val[i] if i < len(self.st_step) else 0
        r = bisect_right(self.run_start, a) - 1
        if a == self.run_start[r]:
            return max(best, self.run_dt1[r])
        if not self.run_a[r]:  # equal steps
            return max(best, self.run_dt[r])
        last = min(b, self.run_start[r + 1] - 1) if r + 1 < len(self.run_start) else b
        return max(best, self.duration(last))  # a's run lengthens: its longest step from a on is its last
