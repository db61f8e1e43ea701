"""InferencePools named by ``groups[].inferencePool`` (target ``inferencepool``; Gateway API Inference Extension,
``inference.networking.k8s.io/v1``): read only.

kvplan routes to a pool by setting the weight of the HTTPRoute backendRef of kind ``InferencePool`` that names it
(see :mod:`.httproute`; one pool per group, weights across pools). A weight is only right if the pool really is
the group: so each named pool must exist in the KVPlan's namespace and its ``spec.selector.matchLabels`` must
select the group's Deployment's pods (be a subset of the pod template's labels). Otherwise nothing is applied
(``RouterTargetInvalid``): a weight on a missing pool is a share of 5xx answers, one on a pool of other pods sends
the class where the plan did not size anything. Pools are only read when ``router.httpRoute`` is set.
"""

from __future__ import annotations

from typing import Any

from .. import conditions as C
from ..desired import Write
from ..kube import KubeApi
from ..run import RunContext
from ..spec import KVPlanSpec
from . import BuildInput, TargetPlan, TargetRefused


class InferencePoolTarget:
    """Target ``inferencepool`` (see the module docstring)."""

    name = "inferencepool"

    def names(self, spec: KVPlanSpec, run: RunContext) -> tuple[str, ...]:
        if spec.router.http_route is None:
            return ()
        return tuple(g.inference_pool for g in spec.groups if g.inference_pool)

    def read(self, kube: KubeApi, namespace: str, names: tuple[str, ...]) -> dict[str, dict[str, Any] | None]:
        return {n: kube.get_inferencepool(namespace, n) for n in names}

    def build(self, inp: BuildInput) -> TargetPlan:
        pools = inp.observed.get(self.name, {})
        deployments = inp.observed.get("deployment", {})
        problems: list[str] = []
        for i, g in enumerate(inp.spec.groups):
            if not g.inference_pool or g.inference_pool not in pools:
                continue
            pool = pools[g.inference_pool]
            if pool is None:
                problems.append(f"spec.groups[{i}].inferencePool: InferencePool {g.inference_pool} not found in "
                                f"namespace {inp.run.namespace}")
                continue
            selector = dict((pool.get("spec", {}).get("selector") or {}).get("matchLabels") or {})
            dep = deployments.get(g.deployment) or {}
            labels = dict(dep.get("spec", {}).get("template", {}).get("metadata", {}).get("labels") or {})
            if dep and (not selector or any(labels.get(k) != v for k, v in selector.items())):
                problems.append(f"spec.groups[{i}].inferencePool: InferencePool {g.inference_pool} selects "
                                f"{selector} but Deployment {g.deployment}'s pods are labelled {labels}")
        if problems:
            raise TargetRefused(C.ROUTER_TARGET_INVALID, "; ".join(problems))
        return TargetPlan()

    def write(self, kube: KubeApi, namespace: str, w: Write) -> None:  # pragma: no cover - it builds no write
        raise AssertionError("the inferencepool target writes nothing")

