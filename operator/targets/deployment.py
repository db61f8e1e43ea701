"""The serving Deployments (target ``deployment``): one strategic-merge patch per group's Deployment.

Owned fields (everything else the user set is kept; listed in the annotation ``kvplan.io/owned-fields``):

- the vLLM container's ``--tensor-parallel-size``/``--pipeline-parallel-size``/``--max-num-seqs``, wherever the
  container passes them (``args``, ``command`` or a ``sh -c`` string; see :mod:`.vllm_flags`); a layout the
  container cannot express is refused (``UnsupportedContainerLayout``), never appended where it is ignored;
- the engine knobs ``--watermark``, ``--scheduling-policy`` and kvplan's ``--scheduler-cls`` (a knob equal to
  what the container runs already, vLLM's default when the flag is absent, is not written), and with the plugin
  the volume, mount and env of the group's own reservation file (:mod:`.plugin_mount`), also without the plugin
  when the stat logger must label requests (``GroupTarget.classification_file``); when neither holds any more they
  are removed;
- container ``resources.limits/requests["nvidia.com/gpu"]`` = DP_local x TP x PP (``--data-parallel-size-local``
  engines per pod, llm-d's layout; 1 without data parallelism; a value known only at run time is refused,
  ``UnsupportedContainerLayout``, and so is a pod larger than one node of the pool or than the group's ``gpuCount``,
  ``LayoutExceedsNode``);
- the env ``KVPLAN_RESERVE_<CLASS>`` that earlier releases set (read by nothing) is deleted (:mod:`.legacy_reserve`);
- pod ``nodeSelector`` (merged) and ``tolerations`` (the user's kept, the pool's added);
- ``spec.replicas`` unless an HPA or KEDA ScaledObject targets the Deployment;
- ``spec.strategy.rollingUpdate.maxUnavailable`` only while a rollout it starts could not finish otherwise on the
  group's full GPUs (:mod:`.rollout_room`; the user's value is kept in ``kvplan.io/rollout-max-unavailable`` and
  written back once the rollout is complete);
- annotations ``kvplan.io/owner``, ``kvplan.io/generation``, ``kvplan.io/layout``, ``kvplan.io/owned-fields`` on
  the Deployment (not the pod template: they never trigger a rollout). The reservations themselves are only in the
  state ConfigMap: a per-Deployment copy (``kvplan.io/reservations``, written by earlier releases and removed when
  found) changed with every reservation, so at 256 classes x 64 groups nearly every re-plan patched all 64
  Deployments for a value no pod reads.

A Deployment whose ``kvplan.io/owner`` names another KVPlan that still exists is refused (``OwnedByOther``); one
that another controller owns (a controller ownerReference: KServe, production-stack's VLLMRuntime, any operator) is
refused (``OwnedByController``, naming the owner), unless :data:`.workload_owner.OWNER_TARGETS` has a target for
the owner's kind among the targets that ran (then that target acts on the owner and this one leaves the group). A
group served by a KServe LLMInferenceService or a LeaderWorkerSet (:mod:`.workload`) is left to their targets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


from .. import conditions as C
from ..desired import (ANN_GENERATION, ANN_LAYOUT, ANN_OWNED, ANN_OWNER, ANN_RESERVATIONS, ANN_ROLLOUT,
                       GroupTarget, Stage, Write)
from ..kube import KubeApi
from ..run import RunContext
from ..spec import Group, KVPlanSpec
from . import BuildInput, TargetPlan, owner_conflict, raise_refusals
from .container_drift import container_drift
from .legacy_reserve import legacy_env
from .rollout_room import DEFAULT, hold, nodes_of, read_hold, strategy_drift
from .workload import served_by_deployment
from .plugin_mount import is_plugin_scheduler, mount_conflict, plugin_drift, plugin_patch
from .workload_owner import controller_ref, owner_target, refusal
from .vllm_argv import scan
from .vllm_view import view
from .vllm_flags import (ACTIVE_SEQS_FLAG, DP_FLAG, DP_LOCAL_FLAG, DP_RANK_FLAG, POLICY_FLAG, PP_FLAG, SCHEDULER_FLAG,
                         SEQS_FLAG, TP_FLAG, WATERMARK_FLAG, UnreadableConfig, Unexpressible, dp_local, literal,
                         read_flags, remove_flags, running, write_flags)

DP_FLAGS = (DP_FLAG, DP_LOCAL_FLAG, DP_RANK_FLAG)


def gpu_resource(group: Group) -> str:
    """The device resource of the group's GPU type (``nvidia.com/gpu``; ``amd.com/gpu`` for MI300X; a
    ``gpuSpec``'s own ``resource``)."""
    return group.node_pool.gpu().resource


def find_container(deployment: Mapping[str, Any], name: str | None) -> Mapping[str, Any] | None:
    """The named container of the pod template; the only one when ``name`` is None; else None."""
    containers = deployment.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []) or []
    if name is None:
        return containers[0] if len(containers) == 1 else None
    return next((c for c in containers if c.get("name") == name), None)


def _int(text: str | None) -> int | None:
    value = literal(text) if text is not None else None
    return int(value) if value is not None and value.isdigit() else None


def read_layout(body: Mapping[str, Any] | None, container: str | None
                ) -> tuple[tuple[int, int] | None, bool, int | None]:
    """(layout, adopted, max_num_seqs) of a Deployment: kvplan's annotation first (adopted), else the flags the
    container passes (default TP = PP = 1)."""
    if body is None:
        return None, False, None
    flags = read_flags(find_container(body, container) or {})
    seqs = _int(flags[SEQS_FLAG])
    ann = (body.get("metadata", {}).get("annotations") or {}).get(ANN_LAYOUT)
    if ann:
        parts = dict(p.split("=", 1) for p in ann.split(",") if "=" in p)
        try:
            return (int(parts["tp"]), int(parts["pp"])), True, seqs
        except (KeyError, ValueError):
            pass
    return (_int(flags[TP_FLAG]) or 1, _int(flags[PP_FLAG]) or 1), False, seqs


def read_dp_local(body: Mapping[str, Any] | None, container: str | None) -> int | None:
    """vLLM engines per pod of a Deployment (data parallelism, :func:`.vllm_flags.dp_local`): 1 when it is missing
    or its vLLM argv has no data-parallel flag (as TP and PP read 1 when absent); None when a data-parallel flag is
    there and its value, or a later word, is known only at run time."""
    c = find_container(body, container) if body is not None else None
    if c is None:
        return 1
    n = dp_local(read_flags(c))
    if n is None and not any(scan(view(c).argv, DP_FLAGS)[0].values()):
        return 1
    return n


def flags_layout(body: Mapping[str, Any] | None, container: str | None) -> tuple[int, int] | None:
    """(tp, pp) the container's flags give vLLM (what really runs), ignoring kvplan's annotation."""
    if body is None:
        return None
    flags = read_flags(find_container(body, container) or {})
    return _int(flags[TP_FLAG]) or 1, _int(flags[PP_FLAG]) or 1


def pod_gpus(body: Mapping[str, Any], container: Mapping[str, Any], *, resource: str) -> int:
    """GPUs one pod of the Deployment holds now: the container's limit of ``resource``, else DP_local x TP x PP
    from its flags."""
    limit = str((container.get("resources") or {}).get("limits", {}).get(resource, ""))
    if limit.isdigit():
        return int(limit)
    tp, pp = flags_layout(body, container.get("name")) or (1, 1)
    return (read_dp_local(body, container.get("name")) or 1) * tp * pp


def _merge_tolerations(current: Iterable[Mapping[str, Any]], pool: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = [dict(t) for t in current]
    for t in pool:
        if dict(t) not in out:
            out.append(dict(t))
    return out


def build_deployment_patch(deployment: Mapping[str, Any], *, group: Group, target: GroupTarget,
                           owner: str, generation: int | None, state_configmap: str, manage_replicas: bool,
                           stale_env: Iterable[str] = ()) -> dict[str, Any]:
    """Strategic-merge patch for one group's Deployment (fields listed in the module docstring).

    Raises LookupError when the container is not found, :class:`Unexpressible` when its command/args cannot carry
    the flags."""
    container = find_container(deployment, group.container)
    if container is None:
        raise LookupError(f"Deployment {group.deployment!r} has no container " + (
            f"named {group.container!r}" if group.container else "(set groups[].container: it has several)"))
    plugin = target.scheduler_cls is not None
    flags = read_flags(container)
    edited: Mapping[str, Any] = container
    if not plugin and is_plugin_scheduler(literal(flags[SCHEDULER_FLAG] or "")):
        command0, args0 = remove_flags(container, [SCHEDULER_FLAG])
        edited = {**container, "command": command0, "args": args0}  # the env too: it decides what $NAME holds
    command, args = write_flags(edited, {TP_FLAG: str(target.tp), PP_FLAG: str(target.pp)} | knob_values(
        flags, target))
    gpus = str(target.gpus_per_replica)
    resource = gpu_resource(group)
    volumes, mounts, plugin_env = plugin_patch(deployment, container, on=target.mounts_file,
                                               state_configmap=state_configmap, group=group.name)
    env: list[dict[str, Any]] = [{"name": name, "$patch": "delete"} for name in stale_env] + plugin_env
    name = container["name"]
    pod_current = deployment.get("spec", {}).get("template", {}).get("spec", {})
    owned = [f"containers[{name}].args", f"containers[{name}].resources.*[{resource}]", "nodeSelector", "tolerations"]
    if target.mounts_file:
        owned += [f"containers[{name}].env[KVPLAN_RESERVATIONS_FILE]", f"containers[{name}].volumeMounts[kvplan]",
                  "volumes[kvplan-reservations]"]
    cpatch: dict[str, Any] = {"name": name, "args": args,
                              "resources": {"limits": {resource: gpus}, "requests": {resource: gpus}},
                              "env": env}
    if mounts:
        cpatch["volumeMounts"] = mounts
    if command != list(container.get("command") or []):
        cpatch["command"] = command
    if container.get("command"):
        owned.insert(0, f"containers[{name}].command")
    spec: dict[str, Any] = {"template": {"spec": {
        "nodeSelector": group.node_pool.selector(),
        "tolerations": _merge_tolerations(pod_current.get("tolerations") or [], [
            t.model_dump(by_alias=True, exclude_none=True) for t in group.node_pool.tolerations]),
        "containers": [cpatch]}}}
    if volumes:
        spec["template"]["spec"]["volumes"] = volumes
    if manage_replicas:
        spec["replicas"] = target.replicas
        owned.append("replicas")
    annotations: dict[str, str | None] = {
        ANN_OWNER: owner,
        ANN_GENERATION: str(generation),
        ANN_LAYOUT: f"tp={target.tp},pp={target.pp},replicas={target.replicas}",
        ANN_OWNED: ",".join(owned),
    }
    if ANN_RESERVATIONS in (deployment.get("metadata", {}).get("annotations") or {}):
        annotations[ANN_RESERVATIONS] = None  # an older operator's copy of the reservations
    return {"metadata": {"annotations": annotations}, "spec": spec}


def hold_room(body: Mapping[str, Any], patch: dict[str, Any], container: Mapping[str, Any], *, group: Group,
              target: GroupTarget, manage_replicas: bool, rolls: bool) -> str | None:
    """Adds to ``patch`` (in place) the ``maxUnavailable`` a rollout needs on the group's full GPUs, or the user's
    value back once it is complete (:mod:`.rollout_room`). ``rolls``: the patch changes the pod template. Returns
    the note for ``status.plan.notes`` while a hold is in force (None: none)."""
    strategy = hold(body, rolls=rolls, old_gpus=pod_gpus(body, container, resource=gpu_resource(group)),
                    new_replicas=target.replicas if manage_replicas else int(body.get("spec", {}).get("replicas", 1)),
                    new_gpus=target.gpus_per_replica,
                    nodes=nodes_of(group.node_pool.gpu_count, group.node_pool.gpus_per_node))
    held = strategy.annotation.get(ANN_ROLLOUT)
    if held:  # held for this re-layout
        annotations = patch["metadata"]["annotations"]
        annotations[ANN_OWNED] += ",strategy.rollingUpdate.maxUnavailable"
    strategy.apply(patch)
    return hold_note(group.name, group.deployment, held) if held else None


def hold_note(group: str, deployment: str, annotation: str) -> str | None:
    """What a hold in force (the annotation's ``{"user", "held"}``) means, for the user; None when unreadable."""
    doc = read_hold(annotation)
    if doc is None:
        return None
    held, user = doc["held"], doc["user"]
    yours = f"the default {DEFAULT}" if user is None else f"your {user}"
    return (f"group {group}: while Deployment {deployment} rolls out its new layout, kvplan holds maxUnavailable at "
            f"{held}, then gives back {yours} (annotation {ANN_ROLLOUT}): with {yours} the new pods would stay "
            "Pending for want of free GPUs on the pool")


def knob_values(flags: Mapping[str, str | None], target: GroupTarget) -> dict[str, str | None]:
    """The engine knobs to write: each planned value the container does not run already (None: left alone)."""
    out: dict[str, str | None] = {}
    for flag, value in ((SEQS_FLAG, target.max_num_seqs), (ACTIVE_SEQS_FLAG, target.max_num_active_seqs),
                        (WATERMARK_FLAG, target.watermark),
                        (POLICY_FLAG, target.scheduling_policy), (SCHEDULER_FLAG, target.scheduler_cls)):
        text = None if value is None else f"{value:g}" if isinstance(value, float) else str(value)
        out[flag] = None if text is None or running(flags, flag) == text else text
    return out


def _container(body: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for c in body.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []) or []:
        if c.get("name") == name:
            return dict(c)
    return {}


def deployment_drift(current: Mapping[str, Any], patch: Mapping[str, Any]) -> list[str]:
    """Owned fields of ``current`` that differ from ``patch`` (empty: nothing to send)."""
    out: list[str] = []
    ann = current.get("metadata", {}).get("annotations") or {}
    for k, v in patch.get("metadata", {}).get("annotations", {}).items():
        if ann.get(k) != v:
            out.append(f"metadata.annotations[{k}]")
    spec, cur_spec = patch.get("spec", {}), current.get("spec", {})
    if "replicas" in spec and cur_spec.get("replicas") != spec["replicas"]:
        out.append("spec.replicas")
    pod, cur_pod = spec["template"]["spec"], cur_spec.get("template", {}).get("spec", {})
    sel = cur_pod.get("nodeSelector") or {}
    if any(sel.get(k) != v for k, v in pod["nodeSelector"].items()):
        out.append("nodeSelector")
    if (cur_pod.get("tolerations") or []) != pod["tolerations"]:
        out.append("tolerations")
    for c in pod["containers"]:
        out += container_drift(_container(current, c["name"]), c, "")
    return out


def plugin_changes(current: Mapping[str, Any], patch: Mapping[str, Any], container: Mapping[str, Any], *,
                   state_configmap: str, group: str) -> list[str]:
    """The plugin pieces (volume, mount, env) of ``current`` that differ from ``patch``'s."""
    on = any(v.get("name") == "kvplan-reservations" and "$patch" not in v
             for v in patch["spec"]["template"]["spec"].get("volumes") or [])
    return plugin_drift(current, container, on=on, state_configmap=state_configmap, group=group)


class DeploymentTarget:
    """Target ``deployment`` (see the module docstring)."""

    name = "deployment"

    def names(self, spec: KVPlanSpec, run: RunContext) -> tuple[str, ...]:
        return tuple(g.deployment for g in spec.groups)

    def read(self, kube: KubeApi, namespace: str, names: tuple[str, ...]) -> dict[str, dict[str, Any] | None]:
        return {n: kube.get_deployment(namespace, n) for n in names}

    def build(self, inp: BuildInput) -> TargetPlan:
        observed = inp.observed.get(self.name, {})
        refusals: dict[str, list[str]] = {}
        writes: list[Write] = []
        notes: list[str] = []
        for g in inp.spec.groups:
            body = observed.get(g.deployment)
            if not served_by_deployment(g, body):
                continue  # targets llminferenceservice and leaderworkerset write these groups
            if body is None:
                refusals.setdefault(C.DEPLOYMENT_MISSING, []).append(
                    f"Deployment {g.deployment} not found in namespace {inp.run.namespace}")
                continue
            conflict = owner_conflict("Deployment", g.deployment, body, inp)
            if conflict:
                refusals.setdefault(C.OWNED_BY_OTHER, []).append(conflict)
                continue
            ref = controller_ref(body)
            if ref is not None:
                if owner_target(ref, frozenset(inp.observed)) is None:
                    refusals.setdefault(C.OWNED_BY_CONTROLLER, []).append(refusal(g.deployment, ref, body))
                continue
            container = find_container(body, g.container)
            if container is None:
                refusals.setdefault(C.CONTAINER_NOT_FOUND, []).append(
                    f"Deployment {g.deployment}: vLLM container not found (set groups[].container)")
                continue
            stale = legacy_env(container)
            target = inp.desired.groups[g.name]
            dp = read_dp_local(body, g.container)
            if dp is None:
                refusals.setdefault(C.UNSUPPORTED_CONTAINER_LAYOUT, []).append(
                    f"Deployment {g.deployment}: its data-parallel size is known only at run time, so kvplan cannot "
                    "count the pod's GPUs (set --data-parallel-size-local literally)")
                continue
            room = min(g.node_pool.gpus_per_node, g.node_pool.gpu_count)
            if target.gpus_per_replica > room:
                where = (f"one node of the pool ({g.node_pool.gpus_per_node} GPUs)" if room == g.node_pool.gpus_per_node
                         else f"the group's gpuCount {g.node_pool.gpu_count}")
                refusals.setdefault(C.LAYOUT_EXCEEDS_NODE, []).append(
                    f"Deployment {g.deployment}: {target.dp_local} data-parallel engines x tp={target.tp} x "
                    f"pp={target.pp} = {target.gpus_per_replica} GPUs per pod exceeds {where}; list only layouts "
                    "that fit in spec.groups[].layouts")
                continue
            clash = mount_conflict(body, container) if target.mounts_file else None
            if clash:
                refusals.setdefault(C.UNSUPPORTED_CONTAINER_LAYOUT, []).append(
                    f"Deployment {g.deployment}: {clash}; kvplan's plugin needs it for the reservation file")
                continue
            try:
                patch = build_deployment_patch(
                    body, group=g, target=target, owner=inp.run.owner,
                    generation=inp.run.generation, state_configmap=inp.run.state_configmap,
                    manage_replicas=inp.desired.manage_replicas.get(g.name, True), stale_env=stale)
            except UnreadableConfig as exc:
                refusals.setdefault(C.UNREADABLE_ENGINE_CONFIG, []).append(f"Deployment {g.deployment}: {exc}")
                continue
            except Unexpressible as exc:
                refusals.setdefault(C.UNSUPPORTED_CONTAINER_LAYOUT, []).append(f"Deployment {g.deployment}: {exc}")
                continue
            plugin = plugin_changes(body, patch, container, state_configmap=inp.run.state_configmap, group=g.name)
            held = hold_room(body, patch, container, group=g, target=target,
                             manage_replicas=inp.desired.manage_replicas.get(g.name, True),
                             rolls=any(not d.startswith(("metadata.", "spec.replicas"))
                                       for d in deployment_drift(body, patch) + plugin))
            if held:
                notes.append(held)
            drift = deployment_drift(body, patch) + strategy_drift(body, patch) + plugin
            if drift:
                adopted = read_layout(body, g.container)[1]
                moves = flags_layout(body, g.container) != target.layout
                writes.append(Write(Stage.LAYOUT, self.name, "Deployment", g.deployment, "patch", patch,
                                    tuple(drift), relayout=adopted and moves))
        raise_refusals(refusals, (C.OWNED_BY_OTHER, C.OWNED_BY_CONTROLLER, C.DEPLOYMENT_MISSING,
                                  C.CONTAINER_NOT_FOUND, C.UNREADABLE_ENGINE_CONFIG, C.UNSUPPORTED_CONTAINER_LAYOUT,
                                  C.LAYOUT_EXCEEDS_NODE))
        return TargetPlan(tuple(writes), tuple(notes))

    def write(self, kube: KubeApi, namespace: str, w: Write) -> None:
        kube.patch_deployment(namespace, w.name, w.body)
