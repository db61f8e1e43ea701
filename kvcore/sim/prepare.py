"""Preparation of an engine-model run: cross-checks of the inputs and every random draw.

Both engine models (fast and reference) consume the same :class:`Prepared` plan (through
:func:`kvcore.sim.engine.build_jobs`), so they see the same random numbers and differ only in how they advance
time. The draws are made up front from the injected Generator, in a
fixed layout that does not depend on the policy: three uniform arrays of length n, in this order,

1. ``u_admit``: request j is admitted by the policy when ``u_admit[j] < admission[class]``;
2. ``u_route``: its group is the first k with ``u_route[j] < cumsum(routing[class])[k]`` (the last column of the
   cumulative row is set to exactly 1 so rounding cannot route past the last group);
3. ``u_prefix``: it finds its prefix cached on that group when ``u_prefix[j] < prefix_fraction[class, group]``.

Whether a request can ever fit its group is the engine model's rule (:func:`kvcore.sim.engine.build_jobs`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvcore.errors import InputError
from kvcore.sim.types import IntArray, SimGroup, SimPolicy, Workload

SERVE = 0
"""Status code of a request that is routed to a replica (it must finish)."""
REJECT_ADMISSION = 1
"""Status code of a request rejected by the policy's admission a_i."""
REJECT_OVERSIZE = 2
"""Status code of a request that can never fit a replica of its group (set by the engine model)."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """The draws of a run, as plain arrays, per request j."""

    status: IntArray
    """SERVE / REJECT_ADMISSION per request."""
    group: IntArray
    """Group index per request (-1 when rejected by admission)."""
    prefix_hit: IntArray
    """1 when the request found its prefix cached on its group."""


def _check_shapes(workload: Workload, groups: tuple[SimGroup, ...], policy: SimPolicy) -> None:
    if not groups:
        raise InputError("groups", "at least one group is needed")
    names = [g.name for g in groups]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise InputError("groups", f"group names must be unique, repeated: {sorted(dup)}")
    if policy.n_groups != len(groups):
        raise InputError("policy.routing", f"has {policy.n_groups} group columns, there are {len(groups)} groups")
    if policy.n_classes != workload.n_classes:
        raise InputError(
            "policy.reserve_tokens", f"has {policy.n_classes} classes, the workload has {workload.n_classes}"
        )
    for k, g in enumerate(groups):
        if g.replicas == 0:
            bad = np.flatnonzero((policy.routing[:, k] > 0) & (policy.admission > 0))
            if bad.size:
                raise InputError(
                    f"policy.routing[{bad[0]}][{k}]", f"routes traffic to group {g.name!r}, which has 0 replicas"
                )


def prepare(
    workload: Workload,
    groups: tuple[SimGroup, ...],
    policy: SimPolicy,
    *,
    rng: np.random.Generator,
) -> Prepared:
    """Check the inputs against each other and draw admission, routing and prefix hits (module docstring)."""
    if not isinstance(rng, np.random.Generator):
        raise InputError("rng", f"must be a numpy.random.Generator, got {type(rng).__name__}")
    _check_shapes(workload, groups, policy)
    n = len(workload)
    cls = workload.class_index
    u_admit = rng.random(n)
    u_route = rng.random(n)
    u_prefix = rng.random(n)

    admitted = u_admit < policy.admission[cls]
    cum = np.cumsum(policy.routing, axis=1)
    cum[:, -1] = 1.0
    group = np.empty(n, dtype=np.int64)
    for c in range(workload.n_classes):
        idx = np.flatnonzero(cls == c)
        group[idx] = np.searchsorted(cum[c], u_route[idx], side="right")
    group[~admitted] = -1

    safe_group = np.where(admitted, group, 0)
    hit = admitted & (u_prefix < policy.prefix_fraction[cls, safe_group])
    status = np.full(n, SERVE, dtype=np.int64)
    status[~admitted] = REJECT_ADMISSION
    return Prepared(status=status, group=group, prefix_hit=hit.astype(np.int64))
