"""The demo's Prometheus history, in exactly the shape the real exporters produce.

The bundled Azure 2023 conversation trace (58 minutes, 19,366 requests) is played once per hour over the last six
hours (so each hour has the trace's own rates and mix) through the fleet of ``examples/vllm-deployments.yaml`` as
it runs before kvplan: the hand-written router ConfigMap sends chat and code to the interactive Deployment (2
pods), batch to the batch Deployment (1 pod); each Deployment's requests go round-robin over its pods. A request's
class is its prompt length, as the kvplan plugin's ``promptLengthRules`` would set it (:data:`CLASS_SPLIT`).

Per pod, as a Kubernetes scrape of the pod sees it (labels ``namespace``, ``pod``, ``job``, ``instance``,
``container`` added by the scrape):

- stock vLLM 0.33: ``vllm:request_generation_tokens{model_name="llama-70b", engine="0"}`` (``model_name`` is the
  Deployment's ``--served-model-name``; buckets 1-2-5 up to ``--max-model-len``), ``vllm:cache_config_info``
  (a gauge at 1 labelled with the cache configuration), ``vllm:kv_cache_usage_perc`` and
  ``vllm:num_preemptions_total``;
- kvplan's stat-logger plugin: ``kvplan_request_output_tokens{kvplan_class, model_name}``, buckets
  ``kvcore.history.series.kvplan_buckets(max_model_len)``, one series per class the pod served.

Nothing is labelled per class except by the plugin: no ``model_name="<model>-<class>"`` series exist.

Stand-ins, since no GPU runs here: each engine reports ``num_gpu_blocks`` = :data:`ENGINE_FRACTION` of kvcore's
roofline KV capacity for the layout its Deployment runs (TP=8) in blocks of 16, a constant KV usage, and a
constant preemption rate (:data:`ENGINE_STATE`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvcore import roofline
from kvcore import (KVPLAN_CLASS_LABEL, KVPLAN_OUTPUT_TOKENS, VLLM_CACHE_CONFIG_INFO, VLLM_GENERATION_TOKENS,
                    VLLM_KV_CACHE_USAGE, VLLM_PREEMPTIONS, kvplan_buckets, vllm_buckets)
from kvplan_dev.openmetrics import AnySeries, HistogramSeries, ScalarSeries, Window

NAMESPACE = "demo"
MODEL = "llama-70b"
"""The Deployments' ``--served-model-name``: vLLM's ``model_name`` label."""
MAX_MODEL_LEN = 8192
"""The Deployments' ``--max-model-len``: the top of vLLM's and the plugin's buckets."""
HOURS = 6
"""Hours of history, one play of the trace each; the example's ``prometheus.lookback: 6h``."""
CLASS_SPLIT: tuple[tuple[str, int, int | None], ...] = (
    ("chat", 0, 1000),
    ("code", 1000, 2000),
    ("batch", 2000, None),
)
"""(class, lowest prompt length, first prompt length not included), tokens. Documented in examples/kvplan-70b.yaml."""
ROUTING = {"chat": "vllm-llama70b-interactive", "code": "vllm-llama70b-interactive", "batch": "vllm-llama70b-batch"}
"""Class -> Deployment, as the hand-written router ConfigMap of examples/vllm-deployments.yaml routes them."""
PODS = {
    "vllm-llama70b-interactive": ("vllm-llama70b-interactive-6c9f8d7b5-k2x8p", "vllm-llama70b-interactive-6c9f8d7b5-w7q4n"),
    "vllm-llama70b-batch": ("vllm-llama70b-batch-58d4c6f9b7-t3m9z",),
}
"""Each Deployment's pods (its ``replicas`` in examples/vllm-deployments.yaml), named as a ReplicaSet names them."""
LAYOUT = (8, 1)
"""The layout both Deployments run before kvplan (``--tensor-parallel-size=8``)."""
ENGINE_FRACTION = 0.9
"""Stand-in: the engines' KV capacity as a fraction of kvcore's roofline for :data:`LAYOUT` (no GPU to profile)."""
BLOCK_SIZE = 16
ENGINE_STATE = {"vllm-llama70b-interactive": (0.62, 0.02), "vllm-llama70b-batch": (0.41, 0.0)}
"""Stand-ins per Deployment: (KV cache usage 0..1, preemptions per second per engine)."""


def class_of(input_tokens: int) -> str:
    """The example class of a request with this prompt length (see :data:`CLASS_SPLIT`)."""
    for name, low, high in CLASS_SPLIT:
        if input_tokens >= low and (high is None or input_tokens < high):
            return name
    raise ValueError(f"input_tokens: {input_tokens} is negative")


def scrape_labels(deployment: str, pod: str, index: int, namespace: str = NAMESPACE) -> dict[str, str]:
    """What a Prometheus Operator PodMonitor named ``vllm`` adds to every series of ``pod``."""
    return {"namespace": namespace, "pod": pod, "job": f"{namespace}/vllm", "container": "vllm",
            "instance": f"10.42.{list(PODS).index(deployment)}.{index + 10}:8000"}


def engine_blocks() -> int:
    """``num_gpu_blocks`` the demo's engines report (:data:`ENGINE_FRACTION` of the roofline, blocks of 16)."""
    return math.floor(ENGINE_FRACTION * roofline("A100-80GB", MODEL, *LAYOUT).kv_capacity_tokens / BLOCK_SIZE)


@dataclass
class _Pod:
    deployment: str
    name: str
    index: int
    arrivals: list[float]
    outputs: list[int]
    by_class: dict[str, tuple[list[float], list[int]]]


def fleet_series(rows: Sequence[Any], window: Window, *, namespace: str = NAMESPACE,
                 plugin: bool = True) -> tuple[list[AnySeries], dict[str, int]]:
    """Every series of the fleet in ``namespace`` over ``window`` (module docstring) from trace ``rows``
    (``arrival_s``, ``input_tokens``, ``output_tokens``), and the requests per class in one play of the trace.
    ``plugin=False``: stock vLLM's series only (no kvplan plugin installed)."""
    first = min(r.arrival_s for r in rows)
    span = max(r.arrival_s for r in rows) - first
    hours = int(window.duration_s // 3600)
    if span >= 3600 or hours < 1:
        raise ValueError(f"trace spans {span:.0f} s: it must fit in one hour of a window of >= 1 h")
    pods = {d: [_Pod(d, name, i, [], [], {}) for i, name in enumerate(names)] for d, names in PODS.items()}
    served = {d: 0 for d in PODS}
    per_class: dict[str, int] = {name: 0 for name, _, _ in CLASS_SPLIT}
    ordered = sorted(rows, key=lambda r: r.arrival_s)
    for hour in range(hours):
        for r in ordered:
            cls = class_of(int(r.input_tokens))
            if hour == 0:
                per_class[cls] += 1
            dep = ROUTING[cls]
            pod = pods[dep][served[dep] % len(pods[dep])]
            served[dep] += 1
            t = hour * 3600.0 + (r.arrival_s - first)
            pod.arrivals.append(t)
            pod.outputs.append(int(r.output_tokens))
            ts, outs = pod.by_class.setdefault(cls, ([], []))
            ts.append(t)
            outs.append(int(r.output_tokens))
    stock: list[AnySeries] = []
    classes: list[AnySeries] = []
    engine: list[AnySeries] = []
    info = {"block_size": str(BLOCK_SIZE), "num_gpu_blocks": str(engine_blocks()), "num_gpu_blocks_override": "None",
            "kv_cache_size_tokens": str(engine_blocks() * BLOCK_SIZE), "gpu_memory_utilization": "0.9",
            "enable_prefix_caching": "True", "cache_dtype": "auto", "engine": "0"}
    for dep, group in pods.items():
        usage, preempt = ENGINE_STATE[dep]
        for pod in group:
            scrape = scrape_labels(dep, pod.name, pod.index, namespace)
            vllm = scrape | {"model_name": MODEL, "engine": "0"}
            stock.append(HistogramSeries(labels=vllm, output_tokens=pod.outputs, arrival_s=pod.arrivals,
                                         buckets=tuple(float(b) for b in vllm_buckets(MAX_MODEL_LEN)),
                                         metric=VLLM_GENERATION_TOKENS))
            for cls, (ts, outs) in sorted(pod.by_class.items()) if plugin else ():
                classes.append(HistogramSeries(labels=scrape | {KVPLAN_CLASS_LABEL: cls, "model_name": MODEL},
                                              output_tokens=outs, arrival_s=ts, metric=KVPLAN_OUTPUT_TOKENS,
                                              buckets=tuple(float(b) for b in kvplan_buckets(MAX_MODEL_LEN))))
            engine.append(ScalarSeries(VLLM_CACHE_CONFIG_INFO, scrape | info))
            engine.append(ScalarSeries(VLLM_KV_CACHE_USAGE, vllm, value=usage))
            engine.append(ScalarSeries(VLLM_PREEMPTIONS, vllm, kind="counter", value=0.0, rate_per_s=preempt))
    return [*stock, *classes, *engine], per_class
