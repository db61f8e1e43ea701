"""Memory of one reconcile, by construction (issue 26, item 4): three reconciles at the caps at once must fit the
chart's 1 GiB memory limit beside the operator itself (about 110-160 MiB).

- the Prometheus answer: read streaming into compact series, at most :data:`kvplan_operator.prom.stream.
  RETAINED_BUDGET` kept, and freed once regrouped (:mod:`kvplan_operator.observe.history`);
- the histories: binned one class at a time, at most :data:`MAX_HISTORY_SAMPLES` samples (16 bytes each);
- the plan: kvcore's planner refuses, before any work, a size whose estimated memory passes
  :data:`PLAN_MEMORY_LIMIT` (its ``memory_limit``; the estimate includes its 136 MiB base of Python, numpy and
  HiGHS, which the operator's reconciles share).

:data:`PLAN_MEMORY_LIMIT` keeps kvcore's reference size (256 classes x 64 groups x 2,000 samples a class: about 190
MiB estimated) and the fleet benchmark inside, with room for three times its samples.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from kvcore import BASE_BYTES, FLEET_BYTES_PER_SAMPLE

#: The planner's memory limit in the operator, bytes (kvcore's default is the whole container's 1 GiB).
PLAN_MEMORY_LIMIT = 320 * 1024**2
#: Most samples one reconcile's histories may hold: what the planner accepts within :data:`PLAN_MEMORY_LIMIT`
#: (the fleet method's per-sample bytes above its base, the costliest; about 1.75 million, 27 MiB), so that
#: observe never builds histories the planner would refuse.
MAX_HISTORY_SAMPLES = int((PLAN_MEMORY_LIMIT - BASE_BYTES) // FLEET_BYTES_PER_SAMPLE)


def bounded_planner(plan: Callable[..., Any]) -> Callable[..., Any]:
    """kvcore's ``plan`` with the operator's memory limit."""
    return functools.partial(plan, memory_limit=PLAN_MEMORY_LIMIT)
