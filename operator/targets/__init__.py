"""Targets: one module per kind of object kvplan writes, behind one small interface.

A target knows which objects a spec names (:meth:`Target.names`), reads them (:meth:`Target.read`, called by the
observe phase), turns the desired state into writes (:meth:`Target.build`, pure, called by the build phase) and
sends one write (:meth:`Target.write`, called by the apply phase). Targets import :mod:`kvplan_operator.desired`
and :mod:`kvplan_operator.run` (the bottom), never a phase.

=========================  =========================================================================================
target                     objects
=========================  =========================================================================================
``state-configmap``        ``<kvplan>-kvplan``: the plugin's reservation files and the disruption budget record
``deployment``             ``groups[].deployment``: vLLM flags (args, command or a shell string), GPUs, pool, env
``router-configmap``       ``router.configMap``: the ``kvplan.v1`` routing document
``httproute``              ``router.httpRoute``: backendRef weights of the groups' Services and InferencePools
``inferencepool``          ``groups[].inferencePool``: read only; each must exist and select its group's pods
``llminferenceservice``    the group's KServe LLMInferenceService (``workloadRef``, or the Deployment's controller):
                           parallelism, replicas, the vLLM container's flags and GPUs; its Deployment is left to KServe
``leaderworkerset``        ``groups[].workloadRef`` of kind LeaderWorkerSet: pods per group, GPUs per pod, the leader's
                           and workers' vLLM argv, replicas (layouts wider than a node)
=========================  =========================================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..desired import Desired, Write
from ..kube import KubeApi
from ..run import RunContext
from ..spec import KVPlanSpec
from .ownership import claimant

#: Object name -> its body as read (None: it does not exist).
Observed = Mapping[str, Mapping[str, Any] | None]


class TargetRefused(Exception):
    """A target cannot express the desired state; ``reason`` is a condition reason, nothing is applied."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


def raise_refusals(refusals: Mapping[str, list[str]], order: tuple[str, ...]) -> None:
    """Raise :class:`TargetRefused` for the first reason of ``order`` that ``refusals`` (reason -> messages) holds,
    its messages first, then every other reason's; return when it holds none of them."""
    for reason in order:
        if reason in refusals:
            others = [m for r, ms in refusals.items() if r != reason for m in ms]
            raise TargetRefused(reason, "; ".join(refusals[reason] + others))


@dataclass(frozen=True)
class BuildInput:
    """What a target's build sees: the run, the spec, the desired state, every target's observed objects, and
    which foreign owners (``kvplan.io/owner`` values of other KVPlans) still exist."""

    run: RunContext
    spec: KVPlanSpec
    desired: Desired
    observed: Mapping[str, Observed]
    owners_alive: Mapping[str, bool] = field(default_factory=dict)


@dataclass(frozen=True)
class TargetPlan:
    """A target's writes (any stage) and notes for ``status.plan.notes``."""

    writes: tuple[Write, ...] = ()
    notes: tuple[str, ...] = ()


class Target(Protocol):
    """The interface every target implements (see the module docstring)."""

    name: str

    def names(self, spec: KVPlanSpec, run: RunContext) -> tuple[str, ...]:
        """The objects (in the KVPlan's namespace) this target reads and writes for ``spec``."""
        ...

    def read(self, kube: KubeApi, namespace: str, names: tuple[str, ...]) -> dict[str, dict[str, Any] | None]:
        """Read them (observe). Raises :class:`~kvplan_operator.kube.KubeError`."""
        ...

    def build(self, inp: BuildInput) -> TargetPlan:
        """Pure: the writes that bring the observed objects to ``inp.desired``. Raises :class:`TargetRefused`."""
        ...

    def write(self, kube: KubeApi, namespace: str, w: Write) -> None:
        """Send one write (apply). Raises :class:`~kvplan_operator.kube.KubeError`."""
        ...


def owner_conflict(kind: str, name: str, body: Mapping[str, Any] | None, inp: BuildInput) -> str | None:
    """A message when ``body`` names another KVPlan as its owner (``kvplan.io/owner``, or an ownerReference) and that
    KVPlan still exists."""
    owner = claimant(body, inp.run.namespace)
    if owner and owner != inp.run.owner and inp.owners_alive.get(owner, True):
        return f"{kind} {name} is managed by KVPlan {owner}"
    return None


def all_targets() -> tuple[Target, ...]:
    """The targets in build order (apply orders their writes by stage)."""
    from .deployment import DeploymentTarget
    from .httproute import HttpRouteTarget
    from .inferencepool import InferencePoolTarget
    from .llmisvc import LlmisvcTarget
    from .lws_target import LwsTarget
    from .router_configmap import RouterConfigMapTarget
    from .state_configmap import StateConfigMapTarget

    return (StateConfigMapTarget(), DeploymentTarget(), LlmisvcTarget(), LwsTarget(), RouterConfigMapTarget(),
            InferencePoolTarget(), HttpRouteTarget())
