"""Shared preparation of a run: cross-checks of the inputs and every random draw.

Both simulators call :func:`prepare` and consume the same :class:`Prepared` plan, so they see the same random
numbers and differ only in how they advance time. The draws are made up front from the injected Generator, in a
fixed layout that does not depend on the policy: three uniform arrays of length n, in this order,

1. ``u_admit``: request j is admitted by the policy when ``u_admit[j] < admission[class]``;
2. ``u_route``: its group is the first k with ``u_route[j] < cumsum(routing[class])[k]`` (the last column of the
   cumulative row is set to exactly 1 so rounding cannot route past the last group);
3. ``u_prefix``: it finds its prefix cached on that group when ``u_prefix[j] < prefix_fraction[class, group]``.

A request is also rejected, as ``oversize``, when it could never fit one replica of its group even alone:
``input_net + max(reserve, output) > usable capacity``. It is counted, per class, never dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvcore.errors import InputError
from kvcore.sim.types import IntArray, SimConfig, SimGroup, SimPolicy, Workload

SERVE = 0
"""Status code of a request that is routed to a replica (it must finish)."""
REJECT_ADMISSION = 1
"""Status code of a request rejected by the policy's admission a_i."""
REJECT_OVERSIZE = 2
"""Status code of a request that can never fit a replica of its group (input + max(reserve, output) > M)."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """Everything a simulator needs, as plain arrays. Per request j and per group k."""

    status: IntArray
    """SERVE / REJECT_ADMISSION / REJECT_OVERSIZE per request."""
    group: IntArray
    """Group index per request (-1 when rejected by admission)."""
    input_net: IntArray
    """Input tokens net of the cached prefix (KV held and prefill work)."""
    prefix_hit: IntArray
    """1 when the request found its prefix cached on its group."""
    reserve: IntArray
    """y of the request's class, whole output tokens."""
    usable_kv: IntArray
    """Per group: KV capacity of one replica left after pinned prefixes, tokens."""
    replica_offset: IntArray
    """Per group: index of its first replica in the flat replica numbering; replicas are contiguous."""


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


def usable_capacity(groups: tuple[SimGroup, ...], policy: SimPolicy, config: SimConfig) -> IntArray:
    """KV tokens per replica left for requests, per group, after the pinned prefixes (see SimConfig)."""
    cap = np.array([g.kv_capacity_tokens for g in groups], dtype=np.int64)
    if config.pin_prefix_memory:
        pinned = ((policy.prefix_fraction > 0) * policy.prefix_tokens[:, None]).sum(axis=0).astype(np.int64)
        cap = cap - pinned
        bad = np.flatnonzero(cap <= 0)
        if bad.size:
            k = int(bad[0])
            raise InputError(
                f"groups[{k}].kv_capacity_tokens",
                f"{groups[k].kv_capacity_tokens} tokens cannot hold the pinned prefixes ({int(pinned[k])} tokens)",
                hint="lower policy.prefix_fraction or set config.pin_prefix_memory=False",
            )
    return cap


def prepare(
    workload: Workload,
    groups: tuple[SimGroup, ...],
    policy: SimPolicy,
    *,
    rng: np.random.Generator,
    config: SimConfig,
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
    saved = np.where(hit, np.minimum(policy.prefix_tokens[cls], workload.input_tokens), 0)
    input_net = workload.input_tokens - saved
    reserve = policy.reserve_tokens[cls]
    usable = usable_capacity(groups, policy, config)
    peak = input_net + np.maximum(reserve, workload.output_tokens)
    oversize = admitted & (peak > usable[safe_group])

    status = np.full(n, SERVE, dtype=np.int64)
    status[~admitted] = REJECT_ADMISSION
    status[oversize] = REJECT_OVERSIZE
    offsets = np.concatenate([[0], np.cumsum([g.replicas for g in groups])[:-1]]).astype(np.int64)
    return Prepared(
        status=status,
        group=group,
        input_net=input_net.astype(np.int64),
        prefix_hit=hit.astype(np.int64),
        reserve=reserve.astype(np.int64),
        usable_kv=usable,
        replica_offset=offsets,
    )
