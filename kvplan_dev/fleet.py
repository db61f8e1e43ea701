"""A fleet at the scale the operator is measured at (the CRD's caps: 256 classes x 64 groups): the KVPlan, its
Deployments and the Prometheus history the real exporters would hold, for ``benchmarks/replan.py --fleet`` and
``tests/integration/test_operator_fleet.py``.

**Groups and classes** are kvcore's seeded fleet instance (:func:`kvcore.planner.synthetic_fleet.generate_fleet`,
the one ``kvcore bench fleet`` plans): node pools of A100-80GB or A100-40GB nodes (8 GPUs each) serving llama-70b
or llama-8b, and classes that are stretches of the vendored real traces with heterogeneous rates (lognormal
shares of a busy fleet's capacity), lengths, prefix shares and costs. As a KVPlan: one Deployment ``vllm-g<k>``
per group with ``nodePool {gpuType, gpuCount}``, the model and the first :data:`CONFIGS` layouts (all within one
node); one class ``c<i>`` per class with ``inputTokens``, ``prefixTokens``, ``maxOutputTokens`` (its L_max),
``costs {preemption: rho, waste: 1}`` and ``history.source: kvplan``; rates from the source (no extra query).

**Series**, in the shape the real exporters produce (:mod:`kvplan_dev.demo_series` for the demo's three classes):
every class is served by ``pods_per_class`` groups' pods (one pod per Deployment, named as a ReplicaSet names
them), its requests split evenly; per pod and class the kvplan plugin's ``kvplan_request_output_tokens
{kvplan_class, model_name}`` histogram with :func:`kvcore.history.series.kvplan_buckets` buckets up to
:data:`MAX_MODEL_LEN`, and per pod vLLM's ``cache_config_info``, ``kv_cache_usage_perc`` and
``num_preemptions_total``, each with the labels a Kubernetes scrape adds. Counts are drawn, not replayed (the
fleet serves thousands of requests a second): per scrape interval a Poisson number of requests at the class's
rate, spread over the buckets multinomially with the shares of the class's own trace outputs; ``_sum`` adds each
bucket's mean output. ``numpy.random.default_rng(seed)``: the same arguments give the same series.

Stand-ins (no GPU, no kubelet): one pod per Deployment whatever its replicas; the engines' ``num_gpu_blocks`` is
:data:`ENGINE_FRACTION` of kvcore's roofline for the layout its Deployment runs (the group's first feasible one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from kvcore import Instance
from kvcore import resolve_profile as resolve
from kvcore import (KVPLAN_CLASS_LABEL, KVPLAN_OUTPUT_TOKENS, VLLM_CACHE_CONFIG_INFO, VLLM_KV_CACHE_USAGE,
                    VLLM_PREEMPTIONS, kvplan_buckets)
from kvplan_dev.openmetrics import AnySeries, CountedHistogramSeries, ScalarSeries, Window

MAX_MODEL_LEN = 8192
"""Every Deployment's ``--max-model-len``: the top of the plugin's buckets (the classes' L_max is at most this)."""
CONFIGS = 9
"""Layouts per group: the first nine of kvcore's fleet layouts, every one within an 8-GPU node (the operator
refuses a layout wider than a node)."""
ENGINE_FRACTION = 0.9
BLOCK_SIZE = 16
RS_HASH = "7d9c5b8f4"
"""The ReplicaSet hash in the stand-in pod names (``<deployment>-<hash>-<id>``, what the default selectors match)."""


@dataclass(frozen=True)
class Fleet:
    """One fleet: ``classes`` x ``groups`` from kvcore's generator with ``seed``, in ``namespace``."""

    classes: int
    groups: int
    seed: int = 0
    namespace: str = "fleet"
    samples: int = 2000
    pods_per_class: int = 2

    @cached_property
    def instance(self) -> Instance:
        from kvcore import generate_fleet

        return generate_fleet(self.classes, self.groups, CONFIGS, self.samples, seed=self.seed)

    def group_name(self, k: int) -> str:
        return f"g{k}"

    def deployment_name(self, k: int) -> str:
        return f"vllm-g{k}"

    def pod(self, k: int) -> str:
        return f"{self.deployment_name(k)}-{RS_HASH}-p{k:04d}"[:63]

    def serving(self, i: int) -> list[int]:
        """The groups whose pods served class ``i`` (seeded, distinct)."""
        rng = np.random.default_rng([self.seed, i])
        n = min(self.pods_per_class, self.groups)
        return [int(k) for k in rng.choice(self.groups, size=n, replace=False)]

    def spec(self, prom_url: str, *, classes: int | None = None, knobs: str = "Auto", **prometheus: Any
             ) -> dict[str, Any]:
        """The KVPlan spec (the first ``classes`` classes, default all; every group's ``engine.knobs``)."""
        inst = self.instance
        groups = []
        for k, g in enumerate(inst.groups):
            groups.append({"name": self.group_name(k), "deployment": self.deployment_name(k), "container": "vllm",
                           "model": g.model, "nodePool": {"gpuType": g.gpu_type, "gpuCount": g.gpus,
                                                          "gpusPerNode": g.gpus_per_node},
                           "layouts": [{"tp": lay.tp, "pp": lay.pp} for lay in g.layouts]}
                          | ({"engine": {"knobs": knobs}} if knobs != "Auto" else {}))
        out = []
        for c in inst.classes[:classes]:
            out.append({"name": c.name, "inputTokens": int(round(c.input_tokens)),
                        "prefixTokens": int(round(c.prefix_tokens)), "maxOutputTokens": int(c.lmax),
                        "costs": {"preemption": float(c.cp), "waste": float(c.cw)},
                        "history": {"source": "kvplan", "minSamples": 50}})
        return {"groups": groups, "classes": out,
                "prometheus": {"url": prom_url, "lookback": "6h", "windows": 6} | prometheus,
                "router": {"configMap": {"name": "llm-router"}}}

    def running(self, k: int) -> tuple[int, int]:
        """The layout group ``k``'s Deployment runs before kvplan: its first feasible one."""
        g = self.instance.groups[k]
        return next(((lay.tp, lay.pp) for lay in g.layouts if resolve(g.gpu_type, g.model, lay.tp, lay.pp).feasible),
                    (g.layouts[-1].tp, g.layouts[-1].pp))

    def deployments(self) -> list[dict[str, Any]]:
        """One vLLM Deployment per group (replicas 1; the operator sets layout and replicas)."""
        out = []
        for k, g in enumerate(self.instance.groups):
            name = self.deployment_name(k)
            tp, pp = self.running(k)
            args = ["--model", g.model, "--max-model-len", str(MAX_MODEL_LEN), "--tensor-parallel-size", str(tp),
                    "--pipeline-parallel-size", str(pp)]
            out.append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                                 "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                                     {"name": "vllm", "image": "vllm/vllm-openai:v0.33.0", "args": args}]}}}})
        return out

    def scrape(self, k: int) -> dict[str, str]:
        return {"namespace": self.namespace, "pod": self.pod(k), "job": f"{self.namespace}/vllm",
                "container": "vllm", "instance": f"10.{40 + k // 250}.{k % 250}.10:8000"}

    def series(self, window: Window, *, classes: int | None = None) -> list[AnySeries]:
        """Every series over ``window`` (module docstring), for the first ``classes`` classes (default all)."""
        rng = np.random.default_rng(self.seed)
        bounds = np.array([float(b) for b in kvplan_buckets(MAX_MODEL_LEN)])
        times = window.scrape_times()
        steps = np.diff(np.array([window.start_unix_s, *times]))
        steps[0] = 0.0  # the first scrape opens the window: nothing counted yet
        out: list[AnySeries] = []
        for i, c in enumerate(self.instance.classes[:classes]):
            values = np.asarray(c.history.windows[0].values)
            weights = np.asarray(c.history.windows[0].weights)
            index = np.searchsorted(bounds, values, side="left")  # bucket of each output; len(bounds): +Inf
            share = np.bincount(index, weights=weights, minlength=len(bounds) + 1)
            mean = np.bincount(index, weights=weights * values, minlength=len(bounds) + 1)
            mean = np.divide(mean, share, out=np.zeros_like(mean), where=share > 0)
            share = share / share.sum()
            pods = self.serving(i)
            for k in pods:
                n = rng.poisson(c.arrival_rate * steps / len(pods))
                per = np.array([rng.multinomial(int(m), share) for m in n])
                cumulative = np.cumsum(np.cumsum(per, axis=0), axis=1)
                sums = np.cumsum(per @ mean)
                labels = self.scrape(k) | {KVPLAN_CLASS_LABEL: c.name, "model_name": self.instance.groups[k].model}
                out.append(CountedHistogramSeries(labels=labels, buckets=tuple(bounds), counts=cumulative.tolist(),
                                                  sums=sums.tolist(), metric=KVPLAN_OUTPUT_TOKENS))
        for k, g in enumerate(self.instance.groups):
            blocks = math.floor(ENGINE_FRACTION * resolve(g.gpu_type, g.model, *self.running(k)).kv_capacity_tokens
                                / BLOCK_SIZE)
            info = {"block_size": str(BLOCK_SIZE), "num_gpu_blocks": str(blocks), "num_gpu_blocks_override": "None",
                    "kv_cache_size_tokens": str(blocks * BLOCK_SIZE), "gpu_memory_utilization": "0.9",
                    "enable_prefix_caching": "True", "cache_dtype": "auto", "engine": "0"}
            vllm = self.scrape(k) | {"model_name": g.model, "engine": "0"}
            out.append(ScalarSeries(VLLM_CACHE_CONFIG_INFO, self.scrape(k) | info))
            out.append(ScalarSeries(VLLM_KV_CACHE_USAGE, vllm, value=0.5))
            out.append(ScalarSeries(VLLM_PREEMPTIONS, vllm, kind="counter", value=0.0, rate_per_s=0.01))
        return out
