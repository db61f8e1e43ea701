"""One serving group of a KVPlan (``spec.groups[]``): its Deployment or workload, its GPU node pool and layouts,
its model (a catalogue name, or a ``config.json`` inline or in a ConfigMap), its engine and plugin settings and who
owns its replicas. Validated with the rest of the spec by :func:`kvplan_operator.spec.parse_spec`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from kvcore import GPU_CATALOGUE, GpuType

from .base import DNS_SUBDOMAIN, SpecModel
from .engine import Engine, Plugin
from .replicas import ReplicaOwner

#: Default node selector per GPU type: the catalogue's node label (NVIDIA GPU feature discovery's
#: ``nvidia.com/gpu.product``, AMD's node labeller's ``amd.com/gpu.product-name``), kvcore.profiles.gpus.
DEFAULT_NODE_SELECTORS: dict[str, dict[str, str]] = {
    name: dict([g.node_label.split("=", 1)]) for name, g in GPU_CATALOGUE.items() if "=" in g.node_label}

class Toleration(SpecModel):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class NodePool(SpecModel):
    gpu_type: GpuType = "A100-80GB"
    gpu_count: int = Field(ge=1, le=4096, description="GPUs of the pool given to the group (G_k).")
    gpus_per_node: int = Field(8, ge=1, le=16, description="GPUs per node; 8 is the A100 HGX/DGX node.")
    node_selector: dict[str, str] = Field(default_factory=dict, description="Empty: DEFAULT_NODE_SELECTORS[gpuType].")
    tolerations: tuple[Toleration, ...] = ()

    def selector(self) -> dict[str, str]:
        """The effective node selector (the per-type default when none is given)."""
        return dict(self.node_selector) if self.node_selector else dict(DEFAULT_NODE_SELECTORS[self.gpu_type])


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
