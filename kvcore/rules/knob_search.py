"""How the knob rule (:mod:`kvcore.rules.knobs`) finds its choice without measuring every candidate on every replay.

The rule's choice is defined on the full table (every candidate measured on every replay): among the *eligible*
candidates (P99 e2e and goodput within the tolerance of stock vLLM's, and no more requests outside the latency
targets than stock vLLM's, on every replay) whose rho-priced recompute is at most ``enough(floor) = floor + KNEE
(stock - floor)`` (``floor``: the least priced recompute of any eligible candidate), the least intrusive, then the
cheapest; the knobs in force are kept when they are among those. This module reaches **the same choice** from part
of the table:

1. **Early rejection.** A candidate is measured replay by replay and dropped at the first replay where it is not
   within the tolerance: it cannot be eligible, and the other replays would not change that.
2. **Bounds on the floor instead of the floor.** ``enough`` grows with the floor, and the floor lies between 0 (no
   priced recompute is negative) and ``U``, the least priced recompute measured so far on an eligible candidate
   (stock's at worst). A measured candidate that is eligible with priced recompute ``<= enough(0)`` is in the knee
   whatever the floor is; one above ``enough(U)`` (or not eligible) is out of it whatever the floor is. Candidates
   are measured in order of intrusiveness (:func:`kvcore.rules.knobs.intrusiveness`), the knobs in force first, and the
   search stops as soon as the choice (and whether the knobs in force stay) no longer depends on anything
   unmeasured: some candidate ``a`` is surely in the knee, every candidate less intrusive than ``a`` is measured and
   surely out of it, every candidate as intrusive as ``a`` is measured. Once every candidate is measured the floor is
   known and the answer is the full table's.
3. **Caps that never bind.** ``max_num_seqs = S`` changes nothing on a replay where fewer than ``S`` requests were
   ever running at once under the same watermark and policy with a larger cap (the cap is only ever consulted as
   ``len(running) < S``). The peak is bounded from above by the requests between their first admission and their
   finish on one replica (a preempted request is counted as running while it waits: an over-estimate, so the reuse
   stays exact). Such a measurement is reused instead of replayed.

Every measurement is the same deterministic replay the full table would make (same workload, same seed), so the
choice is identical; ``tests/unit/kvcore/rules/test_knob_search.py`` checks it against :func:`full_table` on seeded cases and
``benchmarks/rule_agreement.py`` on the vendored traces. Work is counted in simulated requests (one request replayed
once through the engine model), the unit the engine model's cost follows (:mod:`kvcore.rule_work`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from kvcore.rules.replays import GroupReplays
from kvcore.sim.engine import EngineOutcomes, meets_slo

KNEE = 0.1
"""A candidate within this share of the best reduction of priced recompute is as good as the best (the knee)."""
Cand = tuple[float, int, str, tuple[int, ...] | None]
"""(watermark, max_num_seqs, policy, class priorities) of one candidate."""
Measure = tuple[float, float, int, float, float, int]
"""One replay's (rho-priced recompute per request, stalled share, preemptions, P99 e2e s, goodput req/s, requests
outside the latency targets)."""


def peak_running(outcomes: EngineOutcomes) -> int:
    """An upper bound on the running requests of any one replica at any schedule: requests between their first
    admission and their finish, per replica (a finish at the instant of a schedule frees its slot first, as the
    engine's outputs come before the schedule)."""
    served = outcomes.finish_ns >= 0
    rep = outcomes.replica[served]
    if rep.size == 0:
        return 0
    start, end = outcomes.admit_ns[served], outcomes.finish_ns[served]
    peak = 0
    for r in np.unique(rep):
        m = rep == r
        times = np.concatenate([end[m], start[m]])
        delta = np.concatenate([-np.ones(int(m.sum()), dtype=np.int64), np.ones(int(m.sum()), dtype=np.int64)])
        order = np.lexsort((delta, times))  # at equal times the finishes (-1) come before the admissions
        peak = max(peak, int(np.cumsum(delta[order]).max()))
    return peak


@dataclass
class KnobReplays:
    """The knob rule's measurements on a group's shared replays (:class:`kvcore.rules.replays.GroupReplays`),
    memoised, with caps that never bound reused (module docstring, 3)."""

    replays: GroupReplays
    slo: tuple[float, float] = (2.0, 0.1)
    """The latency targets a request is judged by: TTFT (s) and mean time per output token after the first (s)."""
    _memo: dict[tuple[Cand, int], Measure] = field(default_factory=dict)
    _peaks: dict[tuple[float, str, tuple[int, ...] | None, int], list[tuple[int, int, Measure]]] = field(
        default_factory=dict)

    @property
    def count(self) -> int:
        """Replays per candidate."""
        return len(self.replays.runs)

    def stock_key(self) -> Cand:
        return (0.0, self.replays.base.max_num_seqs, "fcfs", None)

    def measure(self, cand: Cand, k: int) -> Measure:
        """Candidate ``cand`` on replay ``k``."""
        key = (cand, k)
        if key in self._memo:
            return self._memo[key]
        w, s, name, prio = cand
        family = (w, name, prio, k)
        for seqs, peak, m in self._peaks.get(family, []):
            if seqs > s > peak:  # the larger cap never bound: this one would not either
                self._memo[key] = m
                return m
        gr = self.replays
        base = gr.stock_config()
        if cand == self.stock_key():
            res = gr.stock(k)
        else:
            res = gr.simulate(k, base.model_copy(update={
                "watermark": w, "max_num_seqs": s, "policy": name, "class_priority": prio,
                "max_num_batched_tokens": max(base.max_num_batched_tokens, s)}))
        wl = gr.runs[k][0]
        o = res.outcomes
        assert o is not None
        good = meets_slo(wl, o, ttft_slo_s=self.slo[0], tpot_slo_s=self.slo[1])
        m = (float((gr.rho[wl.class_index] * o.recomputed).sum() / len(wl)), res.stalled_frac or 0.0,
             res.preemptions, res.e2e.p99 or 0.0, res.goodput_rps, int(good.size - good.sum()))
        self._memo[key] = m
        self._peaks.setdefault(family, []).append((s, peak_running(o), m))
        return m


def knob_replays(gr: GroupReplays, slo: tuple[float, float] = (2.0, 0.1)) -> KnobReplays:
    """The knob rule's measurements on ``gr`` judged by the latency targets ``slo`` (TTFT s, TPOT s), kept with it:
    a group met again is not measured again."""
    key = f"knobs:{slo[0]!r}:{slo[1]!r}"
    rp = gr.memo.get(key)
    if not isinstance(rp, KnobReplays):
        rp = gr.memo[key] = KnobReplays(gr, slo)
    return rp


@dataclass
class Table:
    """What the search measured: per candidate its replays (all of them, or up to the first out of tolerance)."""

    runs: dict[Cand, list[Measure]]
    eligible: dict[Cand, bool]
    complete: bool
    """True when every candidate was measured (the floor is then exact)."""

    def priced(self, c: Cand) -> float:
        return float(np.mean([m[0] for m in self.runs[c]]))


def _evaluate(rp: KnobReplays, c: Cand, stock: list[Measure], ok: Callable[[Measure, Measure], bool],
              table: Table) -> None:
    runs: list[Measure] = []
    good = True
    for k in range(rp.count):
        m = rp.measure(c, k)
        runs.append(m)
        if not ok(m, stock[k]):
            good = False
            break
    table.runs[c], table.eligible[c] = runs, good


def full_table(rp: KnobReplays, cands: Sequence[Cand], stock_key: Cand, tolerance: float) -> Table:
    """Every candidate on every replay (the reference the search is checked against)."""
    stock = [rp.measure(stock_key, k) for k in range(rp.count)]
    table = Table({}, {}, True)
    for c in cands:
        runs = [rp.measure(c, k) for k in range(rp.count)]
        table.runs[c] = runs
        table.eligible[c] = all(_within(m, st, tolerance) for m, st in zip(runs, stock))
    return table


def _within(m: Measure, st: Measure, tolerance: float) -> bool:
    """Eligible on one replay: P99 e2e and goodput within ``tolerance`` of stock's, and not one request more outside
    the latency targets (at a 99% attainment target a 1% goodput tolerance would be the whole margin)."""
    return m[3] <= (1 + tolerance) * st[3] and m[4] >= (1 - tolerance) * st[4] and m[5] <= st[5]


def enough(floor: float, stock_priced: float) -> float:
    """The knee: priced recompute within ``KNEE`` of the best reduction from stock's down to ``floor``."""
    return floor + KNEE * (stock_priced - floor)


@dataclass(frozen=True)
class Decision:
    choice: Cand
    kept: bool
    """True when the choice is the knobs in force, kept because they are inside the knee."""
    gentlest: Cand
    """The least intrusive candidate measured that is surely inside the knee."""
    floor: float
    """The least priced recompute of an eligible candidate measured (the floor itself when the table is complete)."""


def decide(table: Table, cands: Sequence[Cand], stock_key: Cand, current: Cand | None,
           intr: Callable[[Cand], float]) -> Decision | None:
    """The choice, if what ``table`` holds determines it (module docstring, 2); else None."""
    stock_priced = table.priced(stock_key)
    measured = [c for c in cands if c in table.runs]
    upper = min(table.priced(c) for c in measured if table.eligible[c])
    lower = upper if table.complete or len(measured) == len(cands) else 0.0
    lo, hi = enough(lower, stock_priced) + 1e-12, enough(upper, stock_priced) + 1e-12

    def sure(c: Cand) -> bool:
        return c in table.runs and table.eligible[c] and table.priced(c) <= lo

    def out(c: Cand) -> bool:
        return c in table.runs and (not table.eligible[c] or table.priced(c) > hi)

    sures = [c for c in measured if sure(c)]
    if not sures:
        return None
    gentlest = min(sures, key=lambda c: (intr(c), table.priced(c)))
    if current is not None and sure(current):  # the knobs in force stay whatever else is in the knee
        return Decision(current, True, gentlest, upper)
    if current is not None and not out(current):
        return None
    level = intr(gentlest)
    for c in cands:
        if intr(c) < level and not out(c):
            return None
        if intr(c) == level and c not in table.runs:
            return None
    return Decision(gentlest, False, gentlest, upper)


def search(rp: KnobReplays, cands: Sequence[Cand], stock_key: Cand, current: Cand | None, tolerance: float,
           intr: Callable[[Cand], float]) -> tuple[Table, Decision]:
    """Measure candidates in order (stock, the knobs in force, then by intrusiveness) until :func:`decide` answers."""
    stock = [rp.measure(stock_key, k) for k in range(rp.count)]
    table = Table({}, {}, False)

    def ok(m: Measure, st: Measure) -> bool:
        return _within(m, st, tolerance)

    order = sorted(range(len(cands)), key=lambda i: (cands[i] != stock_key, cands[i] != current, intr(cands[i]), i))
    for n, i in enumerate(order):
        _evaluate(rp, cands[i], stock, ok, table)
        table.complete = n + 1 == len(order)
        found = decide(table, cands, stock_key, current, intr)
        if found is not None:
            return table, found
    raise AssertionError("a complete table always decides")  # pragma: no cover - decide() on a complete table
