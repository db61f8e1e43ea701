"""What the vLLM engine models consume and produce, as plain per-request lists and arrays.

:class:`Jobs` is a replay already routed to replicas' groups: per request j its arrival (integer ns), prompt and
output lengths, class, priority, shared-prefix length, gate reservation and group (-1: not served). Each group has
its :class:`~kvcore.sim.engine.config.EngineConfig`, block count and :class:`StepTiming`. Both engine models (the
step-by-step reference and the fast one) take the same :class:`Jobs` and return :class:`EngineOutcomes`; the tests
compare them field by field.

Conventions shared by both models (and by the parity driver, which runs vLLM itself):

- A step starts at an integer ns time. A request arriving at ``t`` joins its replica before the ``schedule()`` of
  the first step starting at or after ``t``; outputs of a step are processed at its end, before arrivals at that
  same instant, which come before the next ``schedule()``. An idle replica starts a step when a request arrives.
- Within a group a request joins the replica with the fewest requests (running + waiting), ties to the lowest.
- ``admit`` is the start of the first step that scheduled the request; ``first_token`` / ``finish`` the ends of the
  steps that sampled its first / last token; ``max_gap`` the longest time between two consecutive tokens of the
  request (0 with a single token); ``recomputed`` the tokens scheduled again below the request's high-water mark
  of computed tokens (recompute after preemption); ``cached`` the prompt tokens its first admission found in the
  prefix cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvcore.sim.engine.config import EngineConfig, StepTiming
from kvcore.sim.types import IntArray


@dataclass(frozen=True, slots=True)
class GroupEngine:
    """One group as the engine models see it."""

    replicas: int
    num_blocks: int
    engine: EngineConfig
    timing: StepTiming


@dataclass(frozen=True, slots=True)
class Jobs:
    """Per-request inputs (lists, for the pure-Python hot loops) and the groups."""

    arrival_ns: list[int]
    prompt: list[int]
    output: list[int]
    cls: list[int]
    priority: list[int]
    prefix: list[int]
    reserve: list[int]
    group: list[int]
    groups: tuple[GroupEngine, ...]

    def __len__(self) -> int:
        return len(self.arrival_ns)


@dataclass(frozen=True, slots=True)
class EngineOutcomes:
    """Per-request results (ns times; -1 where a time does not apply) and per-group step counts."""

    replica: IntArray
    admit_ns: IntArray
    first_token_ns: IntArray
    finish_ns: IntArray
    finish_step_ns: IntArray
    """Start of the step that sampled the last token (the parity tier's ``finish_step``)."""
    max_gap_ns: IntArray
    preemptions: IntArray
    recomputed: IntArray
    cached: IntArray
    steps: IntArray
    """Engine steps run, per group (all replicas)."""


def new_outcomes(n: int, n_groups: int) -> dict[str, list[int]]:
    """Mutable per-request lists both models fill in, initialised to 'did not happen'."""
    out = {name: [-1] * n for name in ("replica", "admit_ns", "first_token_ns", "finish_ns", "finish_step_ns")}
    for name in ("max_gap_ns", "preemptions", "recomputed", "cached"):
        out[name] = [0] * n
    out["steps"] = [0] * n_groups
    return out


def freeze_outcomes(raw: dict[str, list[int]]) -> EngineOutcomes:
    arrays = {}
    for name, values in raw.items():
        arr = np.asarray(values, dtype=np.int64)
        arr.setflags(write=False)
        arrays[name] = arr
    return EngineOutcomes(**arrays)
