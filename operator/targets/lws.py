"""A layout wider than a node, as a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1): the pure builder. Pure.

One LeaderWorkerSet replica is one vLLM engine spread over ``size`` pods (a leader and ``size - 1`` workers, one
node each). For a layout of TP x PP on nodes of G GPUs: a layout that fits one node is one pod of TP x PP GPUs;
a wider one takes ``size = TP x PP / G`` pods of G GPUs each (TP within a node, PP stages across nodes; a TP wider
than a node is refused by the planner). vLLM must then start as one engine on every pod of the group, in one of the
two forms vLLM 0.33 supports (its ``ParallelConfig``: with ``--nnodes`` above 1 on CUDA the executor is
multiprocessing, and a world larger than the node's GPUs without it asks for ``--nnodes`` or Ray; ``--headless``
starts the engine without an API server):

- **multiprocessing** (``vllm serve`` in ``command``/``args``): every pod runs the same ``vllm serve`` with
  ``--nnodes <size> --master-addr $(LWS_LEADER_ADDRESS)``; the leader adds ``--node-rank 0`` and serves the API,
  each worker adds ``--node-rank $(LWS_WORKER_INDEX) --headless`` (LWS sets both variables in every container);
- **Ray** (the container starts vLLM's ``multi-node-serving.sh`` or passes ``--distributed-executor-backend ray``,
  as LWS's own vLLM example does): the leader's script starts the Ray head and ``vllm serve``, the workers' joins
  it, so only the leader's TP/PP flags are written and the workers' command is left as it is.

Owned fields: ``spec.replicas`` (unless an autoscaler owns it), ``spec.leaderWorkerTemplate.size``, and in the
vLLM container of ``leaderTemplate`` and ``workerTemplate``: the flags above, the engine knobs (leader), and
``resources.limits/requests`` of the GPU resource = GPUs per pod. The intent is sent with server-side apply, so
only these fields are kvplan's. What cannot be expressed raises :class:`~.vllm_flags.Unexpressible` naming the
field: a width that is not a whole number of nodes, a group of several pods without a ``leaderTemplate`` (leader
and workers start vLLM differently), a container that is not found, or a shell string in the multiprocessing form.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..desired import ANN_GENERATION, ANN_LAYOUT, ANN_OWNED, ANN_OWNER, GroupTarget
from .vllm_flags import EXECUTOR_FLAG, PP_FLAG, TP_FLAG, Unexpressible, has_switch, read_flags, set_flag, write_flags

KIND = "LeaderWorkerSet"
API_VERSION = "leaderworkerset.x-k8s.io/v1"
NNODES_FLAG = "--nnodes"
NODE_RANK_FLAG = "--node-rank"
MASTER_ADDR_FLAG = "--master-addr"
HEADLESS_SWITCH = "--headless"
#: Set by LWS in every container of a group: the leader pod's address and the pod's index in its group (leader 0).
LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"
WORKER_INDEX = "$(LWS_WORKER_INDEX)"
RAY_SCRIPT = "multi-node-serving.sh"


def lws_shape(tp: int, pp: int, gpus_per_node: int) -> tuple[int, int]:
    """(pods per group, GPUs per pod) of a TP x PP layout on nodes of ``gpus_per_node`` GPUs."""
    gpus = tp * pp
    if gpus <= gpus_per_node:
        return 1, gpus
    if tp > gpus_per_node or gpus % gpus_per_node:
        raise Unexpressible(f"tp={tp} x pp={pp} = {gpus} GPUs is not a whole number of {gpus_per_node}-GPU nodes "
                            "with TP inside one node")
    return gpus // gpus_per_node, gpus_per_node


def _container(template: Mapping[str, Any] | None, name: str | None, where: str) -> Mapping[str, Any]:
    containers = (((template or {}).get("spec") or {}).get("containers")) or []
    found: Mapping[str, Any] | None = (containers[0] if len(containers) == 1 else None) if name is None else next(
        (c for c in containers if c.get("name") == name), None)
    if found is None:
        raise Unexpressible(f"{where}.spec.containers: no " + (f"container named {name!r}" if name else
                                                               "single vLLM container (set groups[].container)"))
    return found


def is_ray_form(container: Mapping[str, Any]) -> bool:
    """Whether the container starts vLLM through Ray (vLLM's ``multi-node-serving.sh``, or the Ray backend)."""
    words = " ".join([*(container.get("command") or []), *(container.get("args") or [])])
    return RAY_SCRIPT in words or read_flags(container)[EXECUTOR_FLAG] == "ray"


def _mp_flags(container: Mapping[str, Any], values: Mapping[str, str | None], extra: Mapping[str, str], *,
              headless: bool, where: str) -> tuple[list[str], list[str]]:
    """(command, args) with the layout flags, then the multi-node flags set in the argv list itself."""
    command, args = write_flags(container, values)
    if command[:2] == ["sh", "-c"] or command[:2] == ["bash", "-c"]:
        raise Unexpressible(f"{where}: the multi-node flags ({', '.join(extra)}) need vllm serve's argv as a list, "
                            "not a shell string")
    target_is_args = bool(args) or not command
    argv = args if target_is_args else command
    for flag, value in extra.items():
        argv = set_flag(argv, flag, value)
    if headless and not has_switch({"command": command, "args": args}, HEADLESS_SWITCH):
        argv = [*argv, HEADLESS_SWITCH]
    return (command, argv) if target_is_args else (argv, args)


def _cpatch(container: Mapping[str, Any], command: list[str], args: list[str], resource: str, gpus: int
            ) -> dict[str, Any]:
    out: dict[str, Any] = {"name": container["name"], "args": args,
                           "resources": {"limits": {resource: str(gpus)}, "requests": {resource: str(gpus)}}}
    if command != list(container.get("command") or []):
        out["command"] = command
    return out


def build_lws_patch(body: Mapping[str, Any], *, target: GroupTarget, gpus_per_node: int, resource: str,
                    container: str | None, knobs: Mapping[str, str | None], owner: str, generation: int | None,
                    manage_replicas: bool) -> dict[str, Any]:
    """kvplan's intent for one LeaderWorkerSet (module docstring). ``knobs``: the engine flags to write on the
    leader (as :func:`~.deployment.knob_values` gives them). Raises :class:`Unexpressible`."""
    size, gpus = lws_shape(target.tp, target.pp, gpus_per_node)
    lwt = (body.get("spec") or {}).get("leaderWorkerTemplate") or {}
    leader_t = lwt.get("leaderTemplate")
    if size > 1 and not leader_t:
        raise Unexpressible("spec.leaderWorkerTemplate.leaderTemplate: a group of several pods needs its own leader "
                            "template (the leader serves the API, the workers do not)")
    layout = {TP_FLAG: str(target.tp), PP_FLAG: str(target.pp)}
    out_lwt: dict[str, Any] = {"size": size}
    owned = ["spec.leaderWorkerTemplate.size"]
    worker = _container(lwt.get("workerTemplate"), container, "spec.leaderWorkerTemplate.workerTemplate")
    if leader_t:
        leader = _container(leader_t, container, "spec.leaderWorkerTemplate.leaderTemplate")
        where = "spec.leaderWorkerTemplate.leaderTemplate"
        if is_ray_form(leader) or size == 1:
            command, args = write_flags(leader, layout | dict(knobs))
        else:
            command, args = _mp_flags(leader, layout | dict(knobs), {
                NNODES_FLAG: str(size), NODE_RANK_FLAG: "0", MASTER_ADDR_FLAG: LEADER_ADDRESS}, headless=False,
                where=where)
        out_lwt["leaderTemplate"] = {"spec": {"containers": [_cpatch(leader, command, args, resource, gpus)]}}
        owned += [f"{where}.containers[{leader['name']}].args", f"{where}.containers[{leader['name']}].resources"]
    where = "spec.leaderWorkerTemplate.workerTemplate"
    if not leader_t:  # one pod per group: the worker template is the leader's
        command, args = write_flags(worker, layout | dict(knobs))
    elif is_ray_form(worker):
        command, args = list(worker.get("command") or []), list(worker.get("args") or [])
    else:
        command, args = _mp_flags(worker, layout, {NNODES_FLAG: str(size), NODE_RANK_FLAG: WORKER_INDEX,
                                                   MASTER_ADDR_FLAG: LEADER_ADDRESS}, headless=True, where=where)
    out_lwt["workerTemplate"] = {"spec": {"containers": [_cpatch(worker, command, args, resource, gpus)]}}
    owned += [f"{where}.containers[{worker['name']}].args", f"{where}.containers[{worker['name']}].resources"]
    spec: dict[str, Any] = {"leaderWorkerTemplate": out_lwt}
    if manage_replicas:
        spec["replicas"] = target.replicas
        owned.append("spec.replicas")
    return {"metadata": {"annotations": {
        ANN_OWNER: owner, ANN_GENERATION: str(generation),
        ANN_LAYOUT: f"tp={target.tp},pp={target.pp},replicas={target.replicas}", ANN_OWNED: ",".join(owned)}},
        "spec": spec}
