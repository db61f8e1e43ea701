"""The engine-model rules' answers (knobs and reservations, :mod:`.engine_rules`), reused between re-plans while a
group's situation has not changed.

kvcore's rules replay a group's recent history through the vLLM engine model, which costs seconds of CPU per
group and rule (docs/benchmarks.md, "The engine-model rules"), against a re-plan cycle of a few seconds. Their answers move slowly (the recent history, replayed), and acting on a knob is rationed anyway
(a knob change restarts pods, at most ``replan.maxLayoutChangesPerHour``). So the operator's runtime keeps one
:class:`KnobCache` (``Deps.knob_cache``; None, the default in tests, runs the rules every time) and reuses a
group's answer (key: KVPlan, group, rule) while its **situation** is the same:

- the KVPlan generation and the group's ``engine.vllmVersion``;
- the group's planned layout and replicas;
- the knobs its engines run now (after a knob change, the rule runs again and, with the knobs in force measured,
  normally keeps them);

and the answer is younger than :attr:`KnobCache.max_age_s`. A drift of reservations, rates or routing inside an
unchanged situation is picked up when the answer expires. (Which classes are routed to a group is not part of the
situation: a re-plan on the same data moves small routing shares across zero, which made every cycle a miss in
``benchmarks/replan.py``.) Failures are never cached. The cache is in memory:
an operator restart runs the rule once per group again.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: A group's situation (see the module docstring).
Situation = tuple[Hashable, ...]


@dataclass
class KnobCache:
    """group key -> (time computed, situation, the rule's answer); see the module docstring."""

    #: Seconds an answer is reused. 1800 s: half the disruption budget's hour, so a traffic shift reaches the knobs
    #: well before the budget would let a second change through; six re-plans at the default 5 min interval.
    max_age_s: float = 1800.0
    entries: dict[tuple[str, ...], tuple[float, Situation, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def get(self, key: tuple[str, ...], situation: Situation, now: float) -> Any | None:
        """The cached answer for ``key`` if its situation is ``situation`` and it is younger than ``max_age_s``."""
        with self.lock:
            entry = self.entries.get(key)
        if entry is None or entry[1] != situation or not 0 <= now - entry[0] < self.max_age_s:
            return None
        return entry[2]

    def age(self, key: tuple[str, ...], now: float) -> float | None:
        """Seconds since ``key``'s answer was computed, whatever its situation; None when there is none."""
        with self.lock:
            entry = self.entries.get(key)
        return None if entry is None else now - entry[0]

    def put(self, key: tuple[str, ...], situation: Situation, now: float, answer: Any) -> None:
        with self.lock:
            self.entries[key] = (now, situation, answer)

    def forget(self, owner: str, keep: Mapping[str, Any]) -> None:
        """Drop ``owner``'s entries of groups not in ``keep`` (groups removed from the spec)."""
        with self.lock:
            for key in [k for k in self.entries if k[0] == owner and k[1] not in keep]:
                del self.entries[key]
