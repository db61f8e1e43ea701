"""Per-request state of the fast engine model, and the step-duration history it answers gap queries from.

A running request is *explicit* (admitted, prefilling, or just re-admitted: its computed tokens and blocks are stored)
or a *decoder* (its prefill is done and it gains one token per step). A decoder is described by one number, its
base ``b``: before step ``s`` it knows ``s - b`` tokens, schedules one, holds ``ceil((s - b) / B)`` blocks after the
step's allocation (it needs a new block at step ``s`` iff ``(s - b) % B == 1 % B``) and samples its last token at step
``b + prompt + output - 1``. Nothing is touched per decode step.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

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
    """Durations of a replica's steps, by runs (a first step of ``dt1`` then equal steps of ``dt``), answering
    "longest step among steps a..now" in O(log runs) with a monotonic stack of suffix maxima."""

    def __init__(self) -> None:
        self.run_start: list[int] = []
        self.run_dt1: list[int] = []
        self.run_dt: list[int] = []
        self.st_step: list[int] = []
        self.st_val: list[int] = []

    def _push(self, step: int, value: int) -> None:
        while self.st_val and self.st_val[-1] <= value:
            self.st_val.pop()
            self.st_step.pop()
        self.st_step.append(step)
        self.st_val.append(value)

    def start_run(self, step: int, dt1: int, dt: int) -> None:
        self.run_start.append(step)
        self.run_dt1.append(dt1)
        self.run_dt.append(dt)
        self._push(step, dt1)

    def close_run(self, end: int) -> None:
        """The current run's steps are ``run_start[-1] .. end - 1``."""
        if self.run_start and end > self.run_start[-1] + 1:
            self._push(self.run_start[-1] + 1, self.run_dt[-1])

    def duration(self, step: int) -> int:
        r = bisect_right(self.run_start, step) - 1
        return self.run_dt1[r] if self.run_start[r] == step else self.run_dt[r]

    def longest(self, a: int, b: int) -> int:
        """Longest duration among steps ``a..b`` (all closed); 0 when ``a > b``."""
        if a > b:
            return 0
        i = bisect_left(self.st_step, a)
        best = self.st_val[i] if i < len(self.st_step) else 0
        return max(best, self.duration(a))
