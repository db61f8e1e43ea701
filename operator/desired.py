"""The desired state: what one decision wants the cluster to look like, and the writes that get it there.

Bottom of the operator (imports no phase and no target). ``build`` fills :class:`Desired`; each target turns it
into :class:`Write` s; ``apply`` sends them in :class:`Stage` order.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

#: Annotations kvplan writes (on Deployments, the router ConfigMap, the HTTPRoute, the state ConfigMap).
ANN_OWNER = "kvplan.io/owner"
ANN_PLAN = "kvplan.io/plan"
ANN_LAYOUT = "kvplan.io/layout"
ANN_RESERVATIONS = "kvplan.io/reservations"
ANN_OWNED = "kvplan.io/owned-fields"
ANN_GENERATION = "kvplan.io/generation"
#: On a Deployment while kvplan holds ``maxUnavailable`` for a re-layout (:mod:`.targets.rollout_room`): JSON
#: ``{"user": <the user's value>, "held": <kvplan's>}``.
ANN_ROLLOUT = "kvplan.io/rollout-max-unavailable"
#: On the state ConfigMap: the re-layouts attempted in the last hour (the disruption budget, JSON list of
#: ``{"t": unix seconds, "layouts": "<group>=<tp>x<pp>,..."}``), kept on the cluster so failures and restarts
#: cannot reset it.
ANN_LAYOUT_CHANGES = "kvplan.io/layout-changes"
#: On the state ConfigMap: the KVPlan generation whose spec change already re-laid out (a spec change bypasses the
#: budget once, not on every retry).
ANN_RELAYOUT_GENERATION = "kvplan.io/relayout-generation"


@dataclass(frozen=True)
class GroupTarget:
    """What one group should look like: layout, replicas, and the engine knobs. A knob that is None is left as the
    container has it; a value equal to what the container already runs (vLLM's default when the flag is absent) is
    not written either."""

    name: str
    tp: int
    pp: int
    replicas: int
    max_num_seqs: int | None = None
    #: ``--max-num-active-seqs`` (the knob rule's admission cap where vLLM has it; ``--max-num-seqs`` then untouched).
    max_num_active_seqs: int | None = None
    #: ``--watermark`` (fraction of KV blocks kept free at admission; vLLM >= 0.33).
    watermark: float | None = None
    #: ``--scheduling-policy`` (``fcfs`` or ``priority``).
    scheduling_policy: str | None = None
    #: ``--scheduler-cls`` of kvplan's plugin; None: the plugin is off (kvplan removes what it added, if anything).
    scheduler_cls: str | None = None
    #: vLLM engines per pod (``--data-parallel-size-local``; 1 without data parallelism). ``replicas`` counts pods.
    dp_local: int = 1
    #: The group's classification file mounted without kvplan's scheduler (``scheduler_cls`` None): the stat
    #: logger labels requests by class for the ``kvplan`` history source (:mod:`kvplan_operator.decide.knobs`).
    classification_file: bool = False

    @property
    def mounts_file(self) -> bool:
        """Whether the pod mounts the group's reservation (classification) file."""
        return self.scheduler_cls is not None or self.classification_file

    @property
    def gpus_per_replica(self) -> int:
        """GPUs one pod requests: local data parallelism x TP x PP."""
        return self.dp_local * self.tp * self.pp

    @property
    def layout(self) -> tuple[int, int]:
        return (self.tp, self.pp)


@dataclass(frozen=True)
class ClassTarget:
    """Per class: reservation (output tokens), admitted fraction, routing weights and prefix-cache fractions."""

    name: str
    reserve_tokens: int
    admitted: float
    routing: Mapping[str, float]
    prefix_fraction: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class LayoutChange:
    """One re-layout attempt (unix seconds) and the layouts it aimed at (``a=8x1,b=4x1``)."""

    t: float
    layouts: str


def layouts_key(layouts: Mapping[str, tuple[int, int]]) -> str:
    """``{"a": (8, 1)}`` -> ``"a=8x1"`` (sorted): how a re-layout attempt names its target."""
    return ",".join(f"{g}={tp}x{pp}" for g, (tp, pp) in sorted(layouts.items()))


def plan_id(groups: Mapping[str, GroupTarget], classes: Mapping[str, ClassTarget]) -> str:
    """Content hash of the decisions (12 hex): unchanged decisions give an unchanged id, so nothing is rewritten."""
    doc = {"g": {k: [v.tp, v.pp, v.replicas, v.max_num_seqs] + _knobs(v) for k, v in sorted(groups.items())},
           "c": {k: [v.reserve_tokens, round(v.admitted, 6), sorted((g, round(w, 6)) for g, w in v.routing.items()),
                     sorted((g, round(w, 6)) for g, w in v.prefix_fraction.items())]
                 for k, v in sorted(classes.items())}}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]


def _knobs(g: GroupTarget) -> list[Any]:
    """The engine knobs' part of a group's plan id (empty when none is set, so ids of kvplan 0.1 plans are kept)."""
    knobs = [g.watermark, g.scheduling_policy, g.scheduler_cls]
    if g.max_num_active_seqs is not None:  # appended only when set, so earlier plan ids are kept
        knobs.append(g.max_num_active_seqs)
    return [] if all(k is None for k in knobs) else knobs


class Stage(enum.IntEnum):
    """Write order (docs/operator.md, "Write order"): routing moves off groups about to change first, then the
    state ConfigMap (reservations and the budget record), then the Deployments, then the final routing."""

    ROUTE_AWAY = 1
    STATE = 2
    LAYOUT = 3
    ROUTE = 4
    #: The plan's detail ConfigMaps (:mod:`kvplan_operator.targets.plandetail`): sent by the record phase, after every
    #: apply write succeeded and before the status patch.
    RECORD = 5


@dataclass(frozen=True)
class Desired:
    """One decision, as values (no patches): per group and per class targets, the plan id, and what the write
    order needs (groups whose Deployment changes layout, the routing to use while they do)."""

    plan_id: str
    groups: Mapping[str, GroupTarget]
    classes: Mapping[str, ClassTarget]
    rates: Mapping[str, float]
    #: group -> True when kvplan sets ``spec.replicas`` (no HPA/ScaledObject owns it).
    manage_replicas: Mapping[str, bool]
    #: groups whose Deployment changes TP/PP or scales to 0 in this apply: routing moves off them first.
    draining: frozenset[str] = frozenset()
    #: class routing while ``draining`` groups change (None: no interim step).
    interim_classes: Mapping[str, ClassTarget] | None = None
    #: group -> (tp, pp, replicas) as the Deployments are now (the interim router document describes these).
    current: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)
    #: the disruption budget to persist with the state ConfigMap.
    layout_changes: tuple[LayoutChange, ...] = ()
    relayout_generation: int | None = None
    #: True when this apply re-lays-out a Deployment kvplan already manages (counted in the budget).
    relayout: bool = False
    #: class -> vLLM request priority (lower is served first) for groups under ``--scheduling-policy priority``;
    #: empty when no group uses it.
    class_priority: Mapping[str, int] = field(default_factory=dict)
    #: group -> the ``kvplan.reservations.v1`` document its kvplan plugin reads (the state ConfigMap's
    #: ``reservations-<group>.json``), for every group that runs the plugin or is about to.
    reservation_files: Mapping[str, str] = field(default_factory=dict)

    @property
    def reservations(self) -> dict[str, int]:
        return {c: t.reserve_tokens for c, t in self.classes.items()}


@dataclass(frozen=True)
class Write:
    """One idempotent write: ``verb`` ``body`` to ``kind``/``name``, at ``stage``, by the target ``target``.
    ``fields`` says what differs (for the outcome); ``relayout`` marks a Deployment write that changes TP/PP."""

    stage: Stage
    target: str
    kind: str
    name: str
    verb: Literal["create", "patch"]
    body: Mapping[str, Any]
    fields: tuple[str, ...] = ()
    relayout: bool = False

    @property
    def label(self) -> str:
        return f"{self.kind}/{self.name}" + (f": {', '.join(self.fields)}" if self.fields else "")
