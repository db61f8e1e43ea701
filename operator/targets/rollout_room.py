"""Room for a rollout on a full GPU pool (pure): the ``maxUnavailable`` a re-layout needs to finish.

kvplan sizes each group to its GPUs (replicas = floor(G_k / GPUs per pod)), so the pool is full before and after
a re-layout and a rolling update has no room to surge into. The Deployment controller keeps ``replicas -
maxUnavailable`` pods available and removes old pods only above that floor; a new pod that needs GPUs the old pods
still hold stays Pending and is never available, so the rollout stops for good. The twin showed it on the stock
example: TP=8 x 1 -> TP=4 x 2 on one full 8-GPU node with ``maxSurge: 0, maxUnavailable: 1`` (docs/results.md
section 7).

:func:`rollout_floor` answers with the smallest ``maxUnavailable`` at or above the user's for which
:func:`completes` (the controller's rolling-update rules, below, on the group's nodes) finishes; at most the new
replica count, which removes every old pod first, as ``Recreate`` would. :func:`hold` turns that into the
Deployment patch: while a re-layout rolls, kvplan owns ``spec.strategy.rollingUpdate.maxUnavailable`` and keeps the
user's value in the annotation ``kvplan.io/rollout-max-unavailable`` (:data:`~kvplan_operator.desired.
ANN_ROLLOUT`); once the rollout is complete it writes the user's value back (unless the user changed it meanwhile)
and drops the annotation. ``Recreate`` and a floor the user's value meets already are left alone. Both fields go to
the API server as a strategic-merge update before the apply of the rest (:func:`kvplan_operator.kube.
split_updates`): were they applied, kvplan's next apply without them would remove them, mid-rollout.

The model of the controller (``pkg/controller/deployment``, ``rolling.go`` and ``sync.go``, Kubernetes 1.37), in
pods (one pod = ``g`` GPUs on one node):

- a replica change together with a template change is first a scaling event: the old ReplicaSet, the only active
  one, is scaled to the new count (pods that find no GPUs stay Pending);
- new ReplicaSet: scaled up to ``replicas + maxSurge - (pods of all ReplicaSets)``, at most ``replicas``;
- old ReplicaSets: with ``minAvailable = replicas - maxUnavailable`` and ``room = all pods - minAvailable - new pods
  not available``, first unavailable old pods are removed (up to ``room``), then available ones down to
  ``minAvailable``, preferring a node that holds more old pods (the ReplicaSet's deletion ranking);
- the scheduler places a pod on the node with the most free GPUs that has ``g``; a placed pod is available on the
  next step (``minReadySeconds`` does not change whether the rollout finishes).

Percentages resolve as the controller resolves them, against the new ``replicas``: ``maxSurge`` rounded up,
``maxUnavailable`` down, and ``maxUnavailable = 1`` when both come to 0. What the model leaves out: GPUs the group
does not own (another group's free GPUs on the same nodes would only make room sooner) and pods of other groups.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..desired import ANN_ROLLOUT

#: Default of both ``maxSurge`` and ``maxUnavailable`` (the API server's defaulting).
DEFAULT = "25%"
#: The simulation gives up after this many controller steps (each step changes something or it is stuck).
MAX_STEPS = 10_000


def resolve(value: int | str | None, replicas: int, *, round_up: bool) -> int:
    """An int-or-percent field of a rolling update, in pods (``intstr.GetScaledValueFromIntOrPercent``)."""
    value = DEFAULT if value is None else value
    if isinstance(value, int):
        return max(value, 0)
    text = str(value).strip()
    if text.endswith("%"):
        share = float(text[:-1]) * replicas / 100.0
        return max(math.ceil(share) if round_up else math.floor(share), 0)
    return max(int(text), 0)


def nodes_of(gpu_count: int, gpus_per_node: int) -> list[int]:
    """The group's GPUs as nodes: full nodes of ``gpus_per_node``, then the remainder."""
    full, rest = divmod(max(gpu_count, 0), max(gpus_per_node, 1))
    return [gpus_per_node] * full + ([rest] if rest else [])


@dataclass
class _Pod:
    node: int | None  # None: Pending
    available: bool = False


def _place(pods: list[_Pod], free: list[int], g: int) -> None:
    for p in pods:
        if p.node is None:
            best = max(range(len(free)), key=lambda i: (free[i], -i), default=None)
            if best is not None and free[best] >= g:
                p.node, free[best] = best, free[best] - g


def _remove(pods: list[_Pod], count: int, free: list[int], g: int, *, available: bool) -> int:
    """Removes up to ``count`` old pods with the given availability (pending first, then the most crowded node)."""
    crowd: dict[int | None, int] = {}
    for p in pods:
        crowd[p.node] = crowd.get(p.node, 0) + 1
    order = sorted((p for p in pods if p.available == available),
                   key=lambda p: (p.node is not None, -crowd[p.node]))
    gone = order[:max(count, 0)]
    for p in gone:
        pods.remove(p)
        if p.node is not None:
            free[p.node] += g
    return len(gone)


def completes(*, old_replicas: int, old_gpus: int, new_replicas: int, new_gpus: int, nodes: Sequence[int],
              max_surge: int, max_unavailable: int) -> bool:
    """Whether a rolling update from ``old_replicas`` pods of ``old_gpus`` to ``new_replicas`` of ``new_gpus`` GPUs
    finishes on ``nodes`` (free GPUs per node) under the controller's rules (module docstring)."""
    if max_surge == 0 and max_unavailable == 0:
        max_unavailable = 1
    free = list(nodes)
    old = [_Pod(None) for _ in range(old_replicas)]
    _place(old, free, old_gpus)
    for p in old:
        p.available = p.node is not None
    if new_replicas != old_replicas:  # the scaling event: the old ReplicaSet takes the new count first
        if new_replicas > old_replicas:
            grown = [_Pod(None) for _ in range(new_replicas - old_replicas)]
            _place(grown, free, old_gpus)
            old += grown
        else:
            _remove(old, old_replicas - new_replicas, free, old_gpus, available=False)
            _remove(old, len(old) - new_replicas, free, old_gpus, available=True)
    new: list[_Pod] = []
    min_available = new_replicas - max_unavailable
    for _ in range(MAX_STEPS):
        before = _state(old, new)
        for p in old + new:
            p.available = p.available or p.node is not None
        grow = min(new_replicas + max_surge - len(old) - len(new), new_replicas - len(new))
        new += [_Pod(None) for _ in range(max(grow, 0))]
        _place(new, free, new_gpus)
        unready_new = sum(not p.available for p in new)
        room = len(old) + len(new) - min_available - unready_new
        if room > 0:
            _remove(old, room, free, old_gpus, available=False)
            _remove(old, sum(p.available for p in old + new) - min_available, free, old_gpus, available=True)
        _place(old, free, old_gpus)  # the scheduler's queue: the older Pending pods first
        _place(new, free, new_gpus)
        if not old and len(new) == new_replicas and all(p.available for p in new):
            return True
        if _state(old, new) == before:
            return False
    return False


def _state(old: list[_Pod], new: list[_Pod]) -> tuple[int, ...]:
    return (len(old), len(new), sum(p.available for p in old + new), sum(p.node is not None for p in old + new))


def rollout_floor(*, old_replicas: int, old_gpus: int, new_replicas: int, new_gpus: int, nodes: Sequence[int],
                  max_surge: int | str | None, max_unavailable: int | str | None) -> int | None:
    """The smallest ``maxUnavailable`` (pods) at or above the user's with which the rollout finishes; None when the
    user's own value does (nothing to hold). At most ``new_replicas`` (every old pod first). Found by bisection
    between the user's value (does not finish) and ``new_replicas`` (finishes), O(log replicas) simulations instead
    of one per value: finishing is monotone in ``maxUnavailable`` (more pods may go down at once, never fewer;
    tests/unit/operator/test_op_rollout_room.py checks it on seeded random pools). Were it not somewhere, the
    value returned would still finish, with the value below it not finishing."""
    surge = resolve(max_surge, new_replicas, round_up=True)
    user = resolve(max_unavailable, new_replicas, round_up=False)
    finishes = functools.partial(completes, old_replicas=old_replicas, old_gpus=old_gpus, new_replicas=new_replicas,
                                 new_gpus=new_gpus, nodes=nodes, max_surge=surge)
    if finishes(max_unavailable=user):
        return None
    lo, hi = user, new_replicas  # finishes(lo) is False; finishes(hi) is checked
    if hi <= lo or not finishes(max_unavailable=hi):
        return max(new_replicas, 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if finishes(max_unavailable=mid):
            hi = mid
        else:
            lo = mid
    return hi


def _rolling(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    strategy = body.get("spec", {}).get("strategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return None
    return strategy.get("rollingUpdate") or {}


def rollout_complete(body: Mapping[str, Any]) -> bool:
    """The Deployment's controller has seen its spec and every replica is updated and available, none left over."""
    spec, st = body.get("spec", {}), body.get("status", {}) or {}
    want = spec.get("replicas", 1)
    return bool(st.get("observedGeneration", -1) >= body.get("metadata", {}).get("generation", 0)
                and st.get("updatedReplicas", 0) == want == st.get("availableReplicas", 0) == st.get("replicas", 0))


@dataclass(frozen=True)
class Hold:
    """What :func:`hold` adds to the Deployment patch: the ``maxUnavailable`` to write (None: none) and the
    annotation (value None: delete it; key absent: leave it)."""

    max_unavailable: int | str | None
    annotation: dict[str, str | None]

    def apply(self, patch: dict[str, Any]) -> None:
        """Merges this into a strategic-merge patch (in place)."""
        if self.max_unavailable is not None:
            patch.setdefault("spec", {})["strategy"] = {"rollingUpdate": {"maxUnavailable": self.max_unavailable}}
        patch.setdefault("metadata", {}).setdefault("annotations", {}).update(self.annotation)


NOTHING = Hold(None, {})


def hold(body: Mapping[str, Any], *, rolls: bool, old_gpus: int, new_replicas: int, new_gpus: int,
         nodes: Sequence[int]) -> Hold:
    """The strategy part of a Deployment's patch (module docstring). ``rolls``: the patch changes the pod
    template; ``body``: the Deployment as read (its ``spec.replicas`` is the old count)."""
    rolling = _rolling(body)
    ann = (body.get("metadata", {}).get("annotations") or {}).get(ANN_ROLLOUT)
    held = read_hold(ann)
    if rolling is None:  # Recreate (the user's choice, or since changed to it): nothing to hold
        return Hold(None, {ANN_ROLLOUT: None}) if ann is not None else NOTHING
    current = rolling.get("maxUnavailable")
    if rolls:
        user = held["user"] if held is not None else current
        floor = rollout_floor(old_replicas=int(body.get("spec", {}).get("replicas", 1)), old_gpus=old_gpus,
                              new_replicas=new_replicas, new_gpus=new_gpus, nodes=nodes,
                              max_surge=rolling.get("maxSurge"), max_unavailable=user)
        if floor is None:
            return NOTHING if held is None else _release(current, held)
        return Hold(floor, {ANN_ROLLOUT: json.dumps({"user": user, "held": floor}, sort_keys=True)})
    if held is None:
        return NOTHING
    if not rollout_complete(body):
        return Hold(None, {ANN_ROLLOUT: ann})  # still rolling: keep holding
    return _release(current, held)


def strategy_drift(current: Mapping[str, Any], patch: Mapping[str, Any]) -> list[str]:
    """``maxUnavailable`` of ``current`` when ``patch`` writes another one."""
    want = (patch.get("spec", {}).get("strategy") or {}).get("rollingUpdate", {}).get("maxUnavailable")
    rolling = _rolling(current) or {}
    return [] if want is None or rolling.get("maxUnavailable") == want else ["spec.strategy.rollingUpdate.maxUnavailable"]


def _release(current: int | str | None, held: Mapping[str, Any]) -> Hold:
    """The user's value back (unless they changed it meanwhile) and the annotation gone."""
    back = DEFAULT if held["user"] is None else held["user"]
    return Hold(back if current == held["held"] else None, {ANN_ROLLOUT: None})


def read_hold(text: str | None) -> dict[str, Any] | None:
    """The annotation's ``{"user", "held"}`` (None: absent or unreadable)."""
    if not text:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and "user" in doc and "held" in doc else None


__all__ = ["ANN_ROLLOUT", "Hold", "NOTHING", "completes", "hold", "nodes_of", "read_hold", "resolve", "rollout_complete",
           "rollout_floor", "strategy_drift"]
