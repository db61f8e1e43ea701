"""One catalogue of the names kvplan accepts: GPU types, models, radius kinds, history sources, router targets.

Every other place takes its names from here: :mod:`kvcore.profiles` keys its profile tables by :data:`GPU_TYPES`
and :data:`MODELS` (and checks at import that they agree), :class:`kvcore.reservation.radius.RadiusPolicy` types ``kind`` as
:data:`RadiusKind`, and the operator's history sources and router targets (issues 12 and 14) register under
:data:`HISTORY_SOURCES` and :data:`ROUTER_TARGETS`. ``tests/unit/kvcore/test_catalogue.py`` checks the CRD's enums
(``crds/kvplans.kvplan.io.yaml`` and the chart's copy) against this module, so a name the CRD accepts is one kvcore
knows, and the reverse.
"""

from __future__ import annotations

from typing import Literal, get_args

GpuType = Literal["A100-80GB", "A100-40GB", "H100-SXM", "H100-PCIe", "H200", "B200", "L40S", "L4", "A10G", "MI300X"]
GPU_TYPES: tuple[str, ...] = get_args(GpuType)
"""GPU types with a profile (:data:`kvcore.profiles.gpus.CATALOGUE`, datasheet figures; :data:`kvcore.profiles.GPUS`
for the planner's profiles): the CRD's ``nodePool.gpuType`` enum."""

Model = Literal["llama-70b", "llama-8b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b",
                "llama-3.3-70b", "qwen2.5-7b", "qwen2.5-72b", "qwen3-8b", "qwen3-32b", "qwen3-30b-a3b",
                "qwen3-235b-a22b", "mistral-7b", "mixtral-8x7b", "mixtral-8x22b", "deepseek-v3", "gpt-oss-120b",
                "gpt-oss-20b"]
MODELS: tuple[str, ...] = get_args(Model)
"""Model shapes with a profile (:data:`kvcore.profiles.models.CONFIGS`, each a config.json with provenance;
:data:`kvcore.profiles.MODELS` for the planner's profiles): what ``groups[].model`` may name."""

RadiusKind = Literal["absolute", "fraction", "drift"]
RADIUS_KINDS: tuple[str, ...] = get_args(RadiusKind)
"""Rules choosing the Wasserstein radius (:data:`kvcore.reservation.radius.RULES`): the CRD's radius ``kind`` enum."""

HistorySource = Literal["vllm", "kvplan", "llm-d", "envoy-ai-gateway", "custom"]
HISTORY_SOURCES: tuple[str, ...] = get_args(HistorySource)
"""Where a class's output-length history comes from (docs/operator.md, "History sources"): vLLM's own
``vllm:request_generation_tokens`` histogram; kvplan's fine-bucket histogram (``kvcore.history.series``, exported by the
``kvplan_vllm`` stat logger); llm-d's and Envoy AI Gateway's token metrics; ``custom`` for a PromQL the user gives."""

RouterTarget = Literal["configmap", "httproute", "inferencepool"]
ROUTER_TARGETS: tuple[str, ...] = get_args(RouterTarget)
"""Where routing weights are written: the kvplan router ConfigMap, Gateway API HTTPRoute backendRef weights, and
HTTPRoute backendRefs of kind InferencePool (one pool per group)."""

CRD_ROUTER_KEYS: dict[str, RouterTarget] = {"configMap": "configmap", "httpRoute": "httproute",
                                            "inferencePool": "inferencepool"}
"""The CRD's ``spec.router`` keys (camelCase, Kubernetes style) and the router target each one selects."""
