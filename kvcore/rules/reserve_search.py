"""How the reservation rule (:mod:`kvcore.rules.reserve`) searches the reservation vectors of one group.

Both searches minimise the mean cost J over the replays (:meth:`kvcore.rules.replay_set.ReplaySet.costs`) from y = 0
and keep the result only if it pays, by ``MIN_GAIN``, on every replay.

**full** (the rule as designed; ``benchmarks/rule_agreement.py`` measures the fast one against it): the best of the
family of vectors that treat every class alike (each of ``SCALES`` of the plan's y, each of ``QUANTILES``); then
coordinate descent, each class over all its candidates, for up to ``ROUNDS`` rounds; then each class whose own
reservation does not lower the cost gets 0. About 8 candidates per class and round: its work grows with the classes.

**fast** (the operator's), the same steps where they matter:

1. **Nothing to protect.** A reservation saves at most the harm of the preemptions it prevents. When stock vLLM's
   preemptions on some replay cost less than ``MIN_GAIN`` token slots per request (the shared stock runs,
   :meth:`~kvcore.rules.replay_set.ReplaySet.stock_harm`), no reservation can pay on every replay by that much unless it
   lowers latency by acting as a concurrency cap, which is the knob rule's instrument (``--max-num-seqs``), not a
   reservation's: nothing is reserved, and nothing but stock's runs (shared with the knob rule) is simulated.
2. **Only the classes that are preempted.** With nothing reserved, a class whose requests are never preempted on
   any replay has no harm to save: it keeps 0 throughout (reserving for it would only hold memory back). The family
   and the descent move the other classes (the *active* ones), the most harmed first.
3. **Descent by neighbours.** Each active class moves along its candidates, sorted, one step at a time (up, else
   down) while the cost falls, instead of trying every candidate; up to ``ROUNDS`` rounds.
4. **Early rejection.** A vector is measured on the first replay and dropped there when it is no cheaper than the
   best vector on it; only a vector that is cheaper on the first replay is measured on the others and compared on
   the mean.
5. **Work limit.** The search stops measuring once ``work_limit`` requests were simulated on the group (counted,
   never timed, so the answer does not depend on the machine's load) and keeps the best vector found; the reason
   says so.

Pure: seeded, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from kvcore.rules.classes import KnobClass
from kvcore.rules.replay_set import ReplaySet

Vec = tuple[int, ...]


@dataclass
class Search:
    """What a search measured and found: per vector its cost on each replay measured (in replay order; all of them
    unless dropped early), the best vector, and notes for the reason."""

    best: Vec
    costs: dict[Vec, list[float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    nothing_to_protect: NDArray[np.float64] | None = None
    """Stock vLLM's harm per replay when it was too small for any reservation to pay (fast, step 1)."""

    def mean(self, ys: Vec) -> float:
        return float(np.mean(self.costs[ys]))


def full_search(rs: ReplaySet, classes: Sequence[KnobClass], rho: NDArray[np.float64], family: list[Vec],
                cands: list[list[int]], rounds: int) -> Search:
    """Every candidate of every class, the rule as designed (module docstring)."""
    k = len(classes)
    zero: Vec = tuple(0 for _ in range(k))
    out = Search(zero)

    def cost(ys: Vec) -> float:
        if ys not in out.costs:
            out.costs[ys] = list(rs.costs(ys, rho))
        return out.mean(ys)

    best = zero
    for ys in family:
        if cost(ys) < cost(best):
            best = ys
    for _ in range(rounds):
        moved = False
        for i in range(k):
            for y in cands[i]:
                ys = best[:i] + (y,) + best[i + 1:]
                if cost(ys) < cost(best) - 1e-12:
                    best, moved = ys, True
        if not moved:
            break
    for i in range(k):  # a class whose reservation does not pay gets none
        ys = best[:i] + (0,) + best[i + 1:]
        if best[i] and cost(ys) <= cost(best):
            best = ys
    out.best = best
    return out


def fast_search(rs: ReplaySet, classes: Sequence[KnobClass], rho: NDArray[np.float64], family: list[Vec],
                cands: list[list[int]], rounds: int, min_gain: float, work_limit: int | None) -> Search:
    """The operator's search (module docstring)."""
    k = len(classes)
    zero: Vec = tuple(0 for _ in range(k))
    out = Search(zero)
    protect = rs.stock_harm(rho)
    if float(protect.min()) < min_gain:
        out.nothing_to_protect = protect
        return out
    start = rs.work
    out.costs[zero] = list(rs.costs(zero, rho))
    harm = np.sum([rho * rs.measure_on(zero, j).harm for j in range(len(rs.runs))], axis=0)
    active = sorted((i for i in range(k) if harm[i] > 0), key=lambda i: (-harm[i], i))
    if not active:
        out.notes.append("no class preempted with nothing reserved")
        return out
    stopped = False

    def spent() -> bool:
        nonlocal stopped
        stopped = stopped or (work_limit is not None and rs.work - start >= work_limit)
        return stopped

    def better(ys: Vec, than: Vec, *, ties: bool = False) -> bool:
        """Whether ``ys`` beats ``than`` on the mean, measured replay 0 first (dropped there if no cheaper)."""
        if ys not in out.costs:
            out.costs[ys] = [rs.cost_on(ys, rho, 0)]
        first, ref = out.costs[ys][0], out.costs[than][0]
        if first > ref or (first == ref and not ties):
            return False
        while len(out.costs[ys]) < len(rs.runs):
            out.costs[ys].append(rs.cost_on(ys, rho, len(out.costs[ys])))
        return out.mean(ys) <= out.mean(than) if ties else out.mean(ys) < out.mean(than) - 1e-12

    def only_active(ys: Vec) -> Vec:
        return tuple(y if i in active else 0 for i, y in enumerate(ys))

    best = zero
    for ys in dict.fromkeys(only_active(v) for v in family):
        if spent():
            break
        if ys != best and better(ys, best):
            best = ys
    for _ in range(rounds):
        moved = False
        for i in active:
            at = cands[i].index(best[i])
            for step in (1, -1):  # up while it pays, else down while it pays
                went = False
                while not spent() and 0 <= at + step < len(cands[i]):
                    ys = best[:i] + (cands[i][at + step],) + best[i + 1:]
                    if not better(ys, best):
                        break
                    best, at, went = ys, at + step, True
                moved = moved or went
                if went:
                    break
        if not moved or spent():
            break
    for i in active:  # a class whose reservation does not pay gets none
        if spent():
            break
        ys = best[:i] + (0,) + best[i + 1:]
        if best[i] and better(ys, best, ties=True):
            best = ys
    if stopped:
        out.notes.append(f"work limit of {work_limit} simulated requests reached: the best vector found is kept")
    out.best = best
    return out
