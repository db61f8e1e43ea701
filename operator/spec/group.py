"""One serving group of a KVPlan (``spec.groups[]``): its Deployment or workload, its GPU node pool and layouts,
its model (a catalogue name, or a ``config.json`` inline or in a ConfigMap), its engine and plugin settings and who
owns its replicas. Validated with the rest of the spec by :func:`kvplan_operator.spec.parse_spec`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from kvcore import GPU_CATALOGUE, GpuFigures, GpuType, InputError, gpu_from_spec

from .base import DNS_SUBDOMAIN, SpecModel
from .engine import Engine, Plugin
from .replicas import ReplicaOwner

#: Default node selector per GPU type: the catalogue's node label (NVIDIA GPU feature discovery's
#: ``nvidia.com/gpu.product``, AMD's node labeller's ``amd.com/gpu.product-name``), kvcore.profiles.gpus.
def label_selector(label: str) -> dict[str, str]:
    """``key=value`` as a node selector; ``{}`` for no label."""
    return dict([label.split("=", 1)]) if "=" in label else {}


DEFAULT_NODE_SELECTORS: dict[str, dict[str, str]] = {
    name: label_selector(g.node_label) for name, g in GPU_CATALOGUE.items() if "=" in g.node_label}

class Toleration(SpecModel):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class GpuSpec(SpecModel):
    """A GPU type the catalogue does not have, by its datasheet figures (``nodePool.gpuSpec``; the same keys and
    units as kvcore's :func:`~kvcore.profiles.gpus.gpu_from_spec`). Bytes, bytes/s and dense FLOP/s."""

    name: str = Field(pattern=r"^[A-Za-z0-9]([-._A-Za-z0-9]*[A-Za-z0-9])?$", max_length=63,
                      description="The type's name (not a catalogue name); groups giving one name give one spec.")
    memory_bytes: float = Field(gt=0, le=1e13, description="Device memory, bytes (80 GB: 8.0e10).")
    hbm_bytes_per_second: float = Field(gt=0, le=1e15, description="Memory bandwidth, bytes/s.")
    bf16_flops: float = Field(gt=0, le=1e18, description="Dense bf16 tensor FLOP/s (without sparsity).")
    fp8_flops: float = Field(0.0, ge=0, le=1e18, description="Dense fp8 FLOP/s; 0: no fp8 (weights or KV cache).")
    interconnect: Literal["nvlink", "pcie", "xgmi"] = "pcie"
    interconnect_bytes_per_second: float = Field(32e9, gt=0, le=1e14,
                                                 description="One GPU's bandwidth to its peers, one direction.")
    family: Literal["a100", "h100"] = Field("a100", description="Whose measured kernel efficiencies apply: a100 "
                                                                "(Ampere, Ada, CDNA) or h100 (Hopper, Blackwell).")
    resource: str = Field("nvidia.com/gpu", pattern=r"^[a-z0-9.-]+/[a-z0-9.-]+$", max_length=253,
                          description="The device resource the pods request.")
    node_label: str = Field("", pattern=r"^([^=]+=.*)?$", max_length=317,
                            description="key=value selecting the pool's nodes when nodeSelector is empty.")
    device_name: str = Field("", max_length=253, description="torch.cuda.get_device_name(), which vLLM's batch "
                                                             "defaults read (an A100 by name keeps 256 sequences).")

    def figures(self) -> GpuFigures:
        """The spec as kvcore's GPU type (raises :class:`InputError` naming the key, relative to ``gpuSpec``)."""
        return gpu_from_spec(self.model_dump(by_alias=True, exclude={"name"}), field="gpuSpec", name=self.name)


class NodePool(SpecModel):
    gpu_type: GpuType = "A100-80GB"
    gpu_spec: GpuSpec | None = Field(None, description="A GPU the catalogue does not have; given, it replaces "
                                                       "gpuType (which the CRD defaults).")
    gpu_count: int = Field(ge=1, le=4096, description="GPUs of the pool given to the group (G_k).")
    gpus_per_node: int = Field(8, ge=1, le=16, description="GPUs per node; 8 is the A100 HGX/DGX node.")
    node_selector: dict[str, str] = Field(default_factory=dict, description="Empty: DEFAULT_NODE_SELECTORS[gpuType].")
    tolerations: tuple[Toleration, ...] = ()

    @property
    def gpu_name(self) -> str:
        """The GPU type's name: the user's spec's, else the catalogue's ``gpuType``."""
        return self.gpu_spec.name if self.gpu_spec is not None else self.gpu_type

    def gpu(self) -> GpuFigures:
        """The pool's GPU: the user's spec, else the catalogue entry."""
        return self.gpu_spec.figures() if self.gpu_spec is not None else GPU_CATALOGUE[self.gpu_type]

    def selector(self) -> dict[str, str]:
        """The effective node selector (the GPU's node label when none is given)."""
        if self.node_selector:
            return dict(self.node_selector)
        if self.gpu_spec is not None:
            return label_selector(self.gpu_spec.node_label)
        return dict(DEFAULT_NODE_SELECTORS[self.gpu_type])


def gpu_errors(groups: tuple["Group", ...]) -> list[tuple[str, str]]:
    """The user-given GPU specs' cross-field rules: not a catalogue name, a node selector or label to place the
    pool, one spec per name, figures kvcore accepts. (``gpuType`` beside a ``gpuSpec`` is not an error: the CRD
    defaults it on every object, so the spec wins.)"""
    errs: list[tuple[str, str]] = []
    named: dict[str, tuple[int, GpuSpec]] = {}
    for i, g in enumerate(groups):
        spec, p = g.node_pool.gpu_spec, f"spec.groups[{i}].nodePool"
        if spec is None:
            continue
        if spec.name in GPU_CATALOGUE:
            errs.append((f"{p}.gpuSpec.name", f"{spec.name!r} is a catalogue GPU type: use gpuType, or another name"))
        if not spec.node_label and not g.node_pool.node_selector:
            errs.append((f"{p}.gpuSpec.nodeLabel", "give nodeLabel or nodePool.nodeSelector: without either the "
                                                   "pool's pods could land on any node"))
        if spec.name in named and named[spec.name][1] != spec:
            errs.append((f"{p}.gpuSpec", f"differs from spec.groups[{named[spec.name][0]}].nodePool.gpuSpec of the "
                                         f"same name {spec.name!r}"))
        named.setdefault(spec.name, (i, spec))
        try:
            spec.figures()
        except InputError as exc:
            errs.append((f"{p}.{exc.field}", exc.message))
    return errs


class Layout(SpecModel):
    tp: Literal[1, 2, 4, 8, 16]
    pp: int = Field(1, ge=1, le=16)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp


_DEFAULT_LAYOUTS = (Layout(tp=1), Layout(tp=2), Layout(tp=4), Layout(tp=8))

class WorkloadRef(SpecModel):
    """The object kvplan plans and patches for a group instead of its Deployment (:mod:`kvplan_operator.targets`)."""

    kind: Literal["LLMInferenceService", "LeaderWorkerSet"] = Field(
        description="LLMInferenceService (serving.kserve.io): kvplan patches its parallelism, replicas and vLLM args, "
                    "never the Deployment KServe owns. LeaderWorkerSet (leaderworkerset.x-k8s.io): kvplan writes the "
                    "layout as pods per group, GPUs per pod and the leader's and workers' vLLM argv, so layouts "
                    "wider than a node are allowed (whole nodes, TP within one).")
    name: str = Field(pattern=DNS_SUBDOMAIN, max_length=253)


class ModelConfigRef(SpecModel):
    """A ConfigMap in the KVPlan's namespace holding the model's Hugging Face ``config.json`` (read each cycle)."""

    name: str = Field(pattern=DNS_SUBDOMAIN, max_length=253)
    key: str = Field("config.json", pattern=r"^[-._a-zA-Z0-9]+$", max_length=253,
                     description="The ConfigMap key holding the JSON; default config.json.")

    def cr_path(self, index: int) -> str:
        """The CR path of group ``index``'s ConfigMap-held config, naming the ConfigMap and key."""
        return f"spec.groups[{index}].modelConfigRef[{self.name}/{self.key}]"


class Group(SpecModel):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    deployment: str = Field(pattern=r"^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$", max_length=253)
    container: str | None = None
    service: str | None = Field(None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    inference_pool: str | None = Field(None, pattern=DNS_SUBDOMAIN, max_length=253,
                                       description="InferencePool standing for this group in HTTPRoute backendRefs.")
    metrics_selector: str | None = Field(None, max_length=1024, description="PromQL label matchers (no braces) for "
                                         "this group's vLLM series; default: namespace and pod of its Deployment.")
    model: str = Field(min_length=1, max_length=63)
    hf_config: dict[str, Any] | None = Field(
        None, alias="modelConfig", description="The model's Hugging Face config.json fields (issue 22): the "
                                               "group's model is planned from its shape instead of the catalogue's.")
    model_config_ref: ModelConfigRef | None = Field(
        None, description="Instead of modelConfig: a ConfigMap in this namespace whose key holds the model's "
                          "config.json (kubectl create configmap NAME --from-file=config.json).")
    workload_ref: WorkloadRef | None = Field(
        None, description="The workload kvplan patches instead of the Deployment; default: the Deployment, or the "
                          "LLMInferenceService that is its controller (ownerReference).")
    node_pool: NodePool
    layouts: tuple[Layout, ...] = Field(_DEFAULT_LAYOUTS, min_length=1)
    engine: Engine = Engine()
    plugin: Plugin = Plugin()
    replica_owner: ReplicaOwner = ReplicaOwner()

    @property
    def service_name(self) -> str:
        return self.service or self.deployment
