"""The LeaderWorkerSets serving groups (target ``leaderworkerset``): one server-side apply per group whose
``groups[].workloadRef`` names one, built by :func:`.lws.build_lws_patch` (the fields it owns are listed there).

A missing LeaderWorkerSet is ``WorkloadMissing``, one another live KVPlan manages ``OwnedByOther``, a layout or
template the builder cannot express ``UnsupportedContainerLayout`` (the message names the field); then nothing is
applied. A layout wider than a node is priced by kvcore as if its pipeline stages shared one node (the inter-node
hand-off is not in kvcore's profile): each such group says so in ``status.plan.notes``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import conditions as C
from ..desired import ANN_LAYOUT, Stage, Write
from ..kube import KubeApi
from ..run import RunContext
from ..spec import KVPlanSpec
from . import BuildInput, TargetPlan, raise_refusals
from .container_drift import container_drift
from .deployment import gpu_resource, knob_values
from .lws import KIND, build_lws_patch, lws_shape
from .vllm_flags import PP_FLAG, TP_FLAG, Unexpressible, read_flags
from .workload import claimed_workload, lws_name

TARGET = "leaderworkerset"


def leader_template(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod template the leader runs (``leaderTemplate``, else ``workerTemplate``, which LWS then uses)."""
    lwt = (body.get("spec") or {}).get("leaderWorkerTemplate") or {}
    return lwt.get("leaderTemplate") or lwt.get("workerTemplate") or {}


def lws_view(body: Mapping[str, Any]) -> dict[str, Any]:
    """The LeaderWorkerSet in a Deployment's shape (its metadata, replicas, the leader's pod template and the groups
    updated so far, ``status.updatedReplicas``, which says whether a rollout is under way), so the observe and
    decide phases read its layout and flags as they read a Deployment's."""
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k != "generation"}
    status = body.get("status") or {}
    view: dict[str, Any] = {"metadata": meta, "spec": {"template": dict(leader_template(body))},
                            "status": {k: status[k] for k in ("replicas", "updatedReplicas") if k in status}}
    replicas = (body.get("spec") or {}).get("replicas")
    if isinstance(replicas, int):
        view["spec"]["replicas"] = replicas
    return view


def _drift(current: Mapping[str, Any], patch: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    ann = (current.get("metadata") or {}).get("annotations") or {}
    out += [f"metadata.annotations[{k}]" for k, v in patch["metadata"]["annotations"].items() if ann.get(k) != v]
    spec, cur = patch["spec"], current.get("spec") or {}
    if "replicas" in spec and cur.get("replicas") != spec["replicas"]:
        out.append("spec.replicas")
    lwt, cur_lwt = spec["leaderWorkerTemplate"], cur.get("leaderWorkerTemplate") or {}
    if cur_lwt.get("size") != lwt["size"]:
        out.append("spec.leaderWorkerTemplate.size")
    for key in ("leaderTemplate", "workerTemplate"):
        if key not in lwt:
            continue
        have = ((cur_lwt.get(key) or {}).get("spec") or {}).get("containers") or []
        for c in lwt[key]["spec"]["containers"]:
            now: Mapping[str, Any] = next((x for x in have if x.get("name") == c["name"]), {})
            out += container_drift(now, c, f"spec.leaderWorkerTemplate.{key}.", per_kind=False)
    return out


class LwsTarget:
    """Target ``leaderworkerset`` (see the module docstring)."""

    name = TARGET

    def names(self, spec: KVPlanSpec, run: RunContext) -> tuple[str, ...]:
        return tuple(n for g in spec.groups if (n := lws_name(g)) is not None)

    def read(self, kube: KubeApi, namespace: str, names: tuple[str, ...]) -> dict[str, dict[str, Any] | None]:
        return {n: kube.get_leaderworkerset(namespace, n) for n in names}

    def build(self, inp: BuildInput) -> TargetPlan:
        observed = inp.observed.get(self.name, {})
        refusals: dict[str, list[str]] = {}
        writes: list[Write] = []
        notes: list[str] = []
        for g in inp.spec.groups:
            name = lws_name(g)
            if name is None:
                continue
            body = claimed_workload(KIND, name, g, observed, inp, refusals)
            if body is None:
                continue
            target = inp.desired.groups[g.name]
            containers = (leader_template(body).get("spec") or {}).get("containers") or []
            leader: Mapping[str, Any] = next(
                (c for c in containers if g.container is None or c.get("name") == g.container), {})
            try:
                if target.scheduler_cls is not None:
                    raise Unexpressible("kvplan's vLLM plugin needs its reservation file mounted, which this "
                                        "target does not add")
                patch = build_lws_patch(body, target=target, gpus_per_node=g.node_pool.gpus_per_node,
                                        resource=gpu_resource(g), container=g.container,
                                        knobs=knob_values(read_flags(leader), target), owner=inp.run.owner,
                                        generation=inp.run.generation,
                                        manage_replicas=inp.desired.manage_replicas.get(g.name, True))
            except Unexpressible as exc:
                refusals.setdefault(C.UNSUPPORTED_CONTAINER_LAYOUT, []).append(f"{KIND} {name}: {exc}")
                continue
            if lws_shape(target.tp, target.pp, g.node_pool.gpus_per_node)[0] > 1:
                notes.append(f"group {g.name}: tp={target.tp} x pp={target.pp} spans nodes; kvcore prices it as if "
                             "its pipeline stages shared a node (the inter-node hand-off is not in its profile)")
            drift = _drift(body, patch)
            if drift:
                flags = read_flags(leader)
                runs = (int(flags[TP_FLAG] or 1), int(flags[PP_FLAG] or 1)) if all(
                    (v or "1").isdigit() for v in (flags[TP_FLAG], flags[PP_FLAG])) else None
                adopted = ANN_LAYOUT in ((body.get("metadata") or {}).get("annotations") or {})
                writes.append(Write(Stage.LAYOUT, self.name, KIND, name, "patch", patch, tuple(drift),
                                    relayout=adopted and runs != target.layout))
        raise_refusals(refusals, (C.OWNED_BY_OTHER, C.WORKLOAD_MISSING, C.UNSUPPORTED_CONTAINER_LAYOUT))
        return TargetPlan(tuple(writes), tuple(notes))

    def write(self, kube: KubeApi, namespace: str, w: Write) -> None:
        kube.patch_leaderworkerset(namespace, w.name, w.body)
