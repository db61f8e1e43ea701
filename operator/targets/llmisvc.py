"""KServe's LLMInferenceService (target ``llminferenceservice``): one JSON merge patch per group served by one.

A group is served by an LLMInferenceService when ``groups[].workloadRef`` names one, or when its Deployment's
controller ownerReference is one (KServe's single-node workload, ``<name>-kserve``). KServe's controller compares
the Deployment's pod template with what the LLMInferenceService renders on every reconcile and reverts any other
change, so kvplan never writes that Deployment: it writes the LLMInferenceService, and KServe rolls the Deployment.

Owned fields (everything else is kept; listed in ``kvplan.io/owned-fields``):

- ``spec.parallelism.tensor`` and ``spec.parallelism.pipeline`` = the planned TP and PP;
- the vLLM container of ``spec.template`` (named by ``groups[].container``, else the only one): its
  ``--tensor-parallel-size``/``--pipeline-parallel-size`` and the engine knobs (:mod:`.vllm_flags`, wherever the
  container passes them), and ``resources.limits/requests`` of the group's GPU resource = TP x PP;
- ``spec.template.nodeSelector`` (merged) and ``spec.template.tolerations`` (the user's kept, the pool's added);
- ``spec.replicas``, unless ``spec.scaling`` or an HPA/ScaledObject on the Deployment owns it;
- annotations ``kvplan.io/owner``, ``kvplan.io/generation``, ``kvplan.io/layout``, ``kvplan.io/owned-fields``
  (KServe propagates none of ``kvplan.io/`` to the Deployment, so they never roll pods).

The intent is sent with server-side apply as ``kvplan-operator``, as the Deployment target's is: the CRD's
``spec.template.containers`` is a list map keyed by name, so only the vLLM container's owned fields are sent and
every other field of it stays its writer's. What kvplan cannot express there is refused with a condition naming the
field, and nothing is written: ``spec.worker`` (multi-node), ``spec.prefill`` (prefill/decode disaggregation),
``spec.parallelism.data``/``dataLocal`` above 1 (data parallelism), a ``spec.template`` without the vLLM container
(the arguments then live in an LLMInferenceServiceConfig), and kvplan's vLLM plugin (its reservation file needs a
volume kvplan does not add here).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .. import conditions as C
from ..desired import ANN_GENERATION, ANN_LAYOUT, ANN_OWNED, ANN_OWNER, GroupTarget, Stage, Write
from ..kube import KubeApi
from ..run import RunContext
from ..spec import Group, KVPlanSpec
from . import BuildInput, TargetPlan, raise_refusals
from .container_drift import container_drift
from .deployment import gpu_resource, knob_values
from .workload import LLMISVC_GROUP, LLMISVC_KIND, claimed_workload, llmisvc_name
from .vllm_flags import PP_FLAG, TP_FLAG, Unexpressible, literal, read_flags, write_flags

KIND = LLMISVC_KIND
API_GROUP = LLMISVC_GROUP
#: The storage version of KServe v0.17 (v1alpha1 is served too, converted by KServe's webhook).
API_VERSION = "v1alpha2"
PLURAL = "llminferenceservices"
TARGET = "llminferenceservice"


def _template(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return (body.get("spec") or {}).get("template") or {}


def find_vllm_container(body: Mapping[str, Any], name: str | None) -> Mapping[str, Any] | None:
    """The named container of ``spec.template``; the only one when ``name`` is None; else None."""
    containers = _template(body).get("containers") or []
    if name is None:
        return containers[0] if len(containers) == 1 else None
    return next((c for c in containers if c.get("name") == name), None)


def pod_view(body: Mapping[str, Any], deployment: Mapping[str, Any] | None) -> dict[str, Any]:
    """The LLMInferenceService in a Deployment's shape (its metadata, ``spec.replicas`` and ``spec.template`` as
    the pod template; the owned Deployment's status, which says whether its pods run the current template), so the
    observe and decide phases read it as they read a Deployment. ``metadata.generation`` is left out: it counts the
    LLMInferenceService's versions, not the Deployment's."""
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k != "generation"}
    spec = body.get("spec") or {}
    view: dict[str, Any] = {"metadata": meta, "spec": {"template": {"spec": dict(_template(body))}},
                            "status": dict((deployment or {}).get("status") or {})}
    if isinstance(spec.get("replicas"), int):
        view["spec"]["replicas"] = spec["replicas"]
    return view


def unexpressible_fields(body: Mapping[str, Any]) -> list[str]:
    """The fields of an LLMInferenceService that make kvplan's plan inexpressible there (module docstring)."""
    spec = body.get("spec") or {}
    out = [f"spec.{k}" for k in ("worker", "prefill") if spec.get(k)]
    par = spec.get("parallelism") or {}
    out += [f"spec.parallelism.{k}" for k in ("data", "dataLocal") if isinstance(par.get(k), int) and par[k] > 1]
    return out


def _merge_tolerations(current: Iterable[Mapping[str, Any]], pool: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = [dict(t) for t in current]
    for t in pool:
        if dict(t) not in out:
            out.append(dict(t))
    return out


def build_llmisvc_patch(body: Mapping[str, Any], *, group: Group, target: GroupTarget, owner: str,
                        generation: int | None, manage_replicas: bool) -> dict[str, Any]:
    """kvplan's intent for one LLMInferenceService (fields in the module docstring), sent with server-side apply.

    Raises LookupError when ``spec.template`` has no vLLM container, :class:`Unexpressible` when its command/args
    cannot carry the flags."""
    container = find_vllm_container(body, group.container)
    if container is None:
        raise LookupError(f"{KIND} {body.get('metadata', {}).get('name')}: spec.template.containers has no "
                          + (f"container named {group.container!r}" if group.container else
                             "single vLLM container (set groups[].container)")
                          + "; kvplan does not write the LLMInferenceServiceConfig it would come from")
    flags = read_flags(container)
    command, args = write_flags(container, {TP_FLAG: str(target.tp), PP_FLAG: str(target.pp)}
                                | knob_values(flags, target))
    resource = gpu_resource(group)
    gpus = str(target.gpus_per_replica)
    name = container["name"]
    cpatch: dict[str, Any] = {"name": name, "args": args,
                              "resources": {"limits": {resource: gpus}, "requests": {resource: gpus}}}
    owned = ["spec.parallelism.tensor", "spec.parallelism.pipeline", f"spec.template.containers[{name}].args",
             f"spec.template.containers[{name}].resources.*[{resource}]", "spec.template.nodeSelector",
             "spec.template.tolerations"]
    if command != list(container.get("command") or []):
        cpatch["command"] = command
    if container.get("command"):
        owned.insert(2, f"spec.template.containers[{name}].command")
    pool, template = group.node_pool, _template(body)
    spec: dict[str, Any] = {"parallelism": {"tensor": target.tp, "pipeline": target.pp}, "template": {
        "containers": [cpatch],
        "nodeSelector": pool.selector(),
        "tolerations": _merge_tolerations(template.get("tolerations") or [], [
            t.model_dump(by_alias=True, exclude_none=True) for t in pool.tolerations])}}
    if manage_replicas:
        spec["replicas"] = target.replicas
        owned.append("spec.replicas")
    return {"metadata": {"annotations": {
        ANN_OWNER: owner, ANN_GENERATION: str(generation),
        ANN_LAYOUT: f"tp={target.tp},pp={target.pp},replicas={target.replicas}", ANN_OWNED: ",".join(owned)}},
        "spec": spec}


def llmisvc_drift(current: Mapping[str, Any], patch: Mapping[str, Any]) -> list[str]:
    """Owned fields of ``current`` that differ from ``patch`` (empty: nothing to send)."""
    out: list[str] = []
    ann = (current.get("metadata") or {}).get("annotations") or {}
    out += [f"metadata.annotations[{k}]" for k, v in patch["metadata"]["annotations"].items() if ann.get(k) != v]
    spec, cur = patch["spec"], current.get("spec") or {}
    par = cur.get("parallelism") or {}
    out += [f"spec.parallelism.{k}" for k, v in spec["parallelism"].items() if par.get(k) != v]
    if "replicas" in spec and cur.get("replicas") != spec["replicas"]:
        out.append("spec.replicas")
    tmpl, cur_tmpl = spec["template"], cur.get("template") or {}
    sel = cur_tmpl.get("nodeSelector") or {}
    if any(sel.get(k) != v for k, v in tmpl["nodeSelector"].items()):
        out.append("spec.template.nodeSelector")
    if (cur_tmpl.get("tolerations") or []) != tmpl["tolerations"]:
        out.append("spec.template.tolerations")
    for c in tmpl["containers"]:
        now: Mapping[str, Any] = next((x for x in cur_tmpl.get("containers") or [] if x.get("name") == c["name"]), {})
        out += container_drift(now, c, "spec.template.")
    return out


def _int(text: str | None) -> int | None:
    value = literal(text) if text is not None else None
    return int(value) if value is not None and value.isdigit() else None


def llmisvc_layout(body: Mapping[str, Any], container: str | None) -> tuple[int, int]:
    """(tp, pp) an LLMInferenceService runs: its container's flags, else ``spec.parallelism``, else 1."""
    flags = read_flags(find_vllm_container(body, container) or {})
    par = (body.get("spec") or {}).get("parallelism") or {}
    tp = _int(flags[TP_FLAG]) or (par.get("tensor") if isinstance(par.get("tensor"), int) else None) or 1
    pp = _int(flags[PP_FLAG]) or (par.get("pipeline") if isinstance(par.get("pipeline"), int) else None) or 1
    return tp, pp


class LlmisvcTarget:
    """Target ``llminferenceservice`` (see the module docstring). Its observed objects are keyed by the
    LLMInferenceService's name; :func:`kvplan_operator.observe.workloads.read_llmisvcs` adds those found through
    a Deployment's ownerReference to the ones ``workloadRef`` names."""

    name = TARGET

    def names(self, spec: KVPlanSpec, run: RunContext) -> tuple[str, ...]:
        return tuple(g.workload_ref.name for g in spec.groups
                     if g.workload_ref is not None and g.workload_ref.kind == KIND)

    def read(self, kube: KubeApi, namespace: str, names: tuple[str, ...]) -> dict[str, dict[str, Any] | None]:
        return {n: kube.get_llminferenceservice(namespace, n) for n in names}

    def build(self, inp: BuildInput) -> TargetPlan:
        observed = inp.observed.get(self.name, {})
        deployments = inp.observed.get("deployment", {})
        refusals: dict[str, list[str]] = {}
        writes: list[Write] = []
        notes: list[str] = []
        for g in inp.spec.groups:
            name = llmisvc_name(g, deployments.get(g.deployment))
            if name is None:
                continue
            body = claimed_workload(KIND, name, g, observed, inp, refusals)
            if body is None:
                continue
            fields = unexpressible_fields(body)
            target = inp.desired.groups[g.name]
            if target.scheduler_cls is not None:
                fields.append("spec.template.volumes (kvplan's vLLM plugin needs its reservation file mounted)")
            if fields:
                refusals.setdefault(C.UNSUPPORTED_WORKLOAD_FIELD, []).append(
                    f"{KIND} {name}: kvplan cannot express its plan with {', '.join(fields)} set")
                continue
            scaling = bool((body.get("spec") or {}).get("scaling"))
            if scaling:
                notes.append(f"group {g.name}: replicas left to {KIND} {name}'s spec.scaling "
                             f"(planned {target.replicas})")
            try:
                patch = build_llmisvc_patch(body, group=g, target=target, owner=inp.run.owner,
                                            generation=inp.run.generation,
                                            manage_replicas=inp.desired.manage_replicas.get(g.name, True)
                                            and not scaling)
            except LookupError as exc:
                refusals.setdefault(C.CONTAINER_NOT_FOUND, []).append(str(exc))
                continue
            except Unexpressible as exc:
                refusals.setdefault(C.UNSUPPORTED_CONTAINER_LAYOUT, []).append(f"{KIND} {name}: {exc}")
                continue
            drift = llmisvc_drift(body, patch)
            if drift:
                adopted = ANN_LAYOUT in ((body.get("metadata") or {}).get("annotations") or {})
                writes.append(Write(Stage.LAYOUT, self.name, KIND, name, "patch", patch, tuple(drift),
                                    relayout=adopted and llmisvc_layout(body, g.container) != target.layout))
        raise_refusals(refusals, (C.OWNED_BY_OTHER, C.WORKLOAD_MISSING, C.CONTAINER_NOT_FOUND,
                                  C.UNSUPPORTED_WORKLOAD_FIELD, C.UNSUPPORTED_CONTAINER_LAYOUT))
        return TargetPlan(tuple(writes), tuple(notes))

    def write(self, kube: KubeApi, namespace: str, w: Write) -> None:
        kube.patch_llminferenceservice(namespace, w.name, w.body)


__all__ = ["LlmisvcTarget", "build_llmisvc_patch", "llmisvc_drift",
           "llmisvc_layout", "llmisvc_name", "pod_view", "unexpressible_fields"]
