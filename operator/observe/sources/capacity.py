"""Capacity from the engine: vLLM's own KV-cache size, usage and preemptions per group, in one instant query.

vLLM publishes its configuration as ``vllm:cache_config_info`` (a gauge at 1 per engine, one engine per replica
unless data-parallel) whose labels are every ``CacheConfig`` field: ``num_gpu_blocks`` and ``block_size`` give the
KV capacity of the running layout, ``num_gpu_blocks x block_size`` tokens; vLLM 0.33 also labels
``kv_cache_size_tokens``, the same capacity counted over every KV-cache group (preferred when it is a number: the
product over-counts hybrid models). ``vllm:kv_cache_usage_perc`` is the fraction in use (0..1) and
``vllm:num_preemptions_total`` counts preemptions. Per group (its series by ``metricsSelector``, else namespace +
pods, as for the ``vllm`` history source), one query reads all three:

    label_replace({__name__=~"vllm:cache_config_info|vllm:kv_cache_usage_perc|<vllm_ spellings>", <sel>},
                  "kvplan_key", "<group>", "", "")
    or label_replace(label_replace(rate({__name__=~"vllm:num_preemptions_total|...", <sel>}[W]), ...),
                     "kvplan_series", "preemptions", "", "")
    or ... (the next group)

:func:`engine_capacity` reads the answer: a group's capacity is the smallest any of its engines reports (they
should agree; a rolling re-layout mixes two layouts, and the smaller never over-commits memory), usage the mean,
preemptions the sum (per second). An engine that has not reported (no series yet, or ``num_gpu_blocks="None"``
before profiling) leaves the group on its profile, and status says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvcore import VLLM_CACHE_CONFIG_INFO, VLLM_KV_CACHE_USAGE, VLLM_PREEMPTIONS

from ..history import KEY_LABEL
from ...prom.instant import instant_samples
from ...spec import KVPlanSpec
from .vllm import group_selector

#: The label the query sets on the preemption rate (``rate()`` drops ``__name__``).
SERIES_LABEL = "kvplan_series"
#: Most series the capacity query may return (the CRD's 64 groups x 64 engines x 3 series, twice over).
MAX_SERIES = 24_576
#: Largest believable KV capacity of one engine, tokens (10^10: a thousand times an 8 x 141 GB replica's).
MAX_TOKENS = 1e10


@dataclass(frozen=True)
class EngineCapacity:
    """One group's engines as Prometheus shows them. ``kv_tokens`` (per replica) is None when no engine reported
    one, with ``reason`` saying why; ``spread`` = largest / smallest - 1 over the engines."""

    group: str
    kv_tokens: float | None
    engines: int
    usage: float | None
    preemptions_per_s: float | None
    reason: str = ""
    spread: float = 0.0
    block_size: float | None = None
    """The engines' KV block size (tokens, the smallest reported), None when none reported one."""


def _names(metric: str) -> str:
    return f"{metric}|{metric.replace(':', '_')}"


def capacity_query(spec: KVPlanSpec, namespace: str, window_s: float) -> str:
    """The one instant query (module docstring) for every group of ``spec``."""
    gauges = _names(VLLM_CACHE_CONFIG_INFO) + "|" + _names(VLLM_KV_CACHE_USAGE)
    preempt = _names(VLLM_PREEMPTIONS + "_total")
    branches = []
    for g in spec.groups:
        sel = group_selector(g, namespace)
        branches.append(f'label_replace({{__name__=~"{gauges}", {sel}}}, "{KEY_LABEL}", "{g.name}", "", "")')
        branches.append(f'label_replace(label_replace(rate({{__name__=~"{preempt}", {sel}}}[{int(window_s)}s]), '
                        f'"{KEY_LABEL}", "{g.name}", "", ""), "{SERIES_LABEL}", "preemptions", "", "")')
    return " or ".join(branches)


def _float(text: Any) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def engine_tokens(labels: Mapping[str, Any]) -> float | None:
    """One engine's KV capacity from its ``cache_config_info`` labels, tokens, or None if not a usable number."""
    tokens = _float(labels.get("kv_cache_size_tokens"))
    if tokens is None:
        blocks, size = _float(labels.get("num_gpu_blocks")), _float(labels.get("block_size"))
        tokens = blocks * size if blocks is not None and size is not None else None
    if tokens is None or not 0 < tokens <= MAX_TOKENS:
        return None
    return tokens


def engine_capacity(data: Mapping[str, Any], spec: KVPlanSpec, *, at: float | None = None
                    ) -> dict[str, EngineCapacity]:
    """The capacity query's answer -> per group :class:`EngineCapacity` (every group present). With ``at`` (the
    time asked), a sample stamped elsewhere is ``StaleSamples`` (:mod:`kvplan_operator.prom.answer_time`)."""
    tokens: dict[str, list[float]] = {}
    unset: dict[str, int] = {}
    usage: dict[str, list[float]] = {}
    blocks: dict[str, list[float]] = {}
    preempt: dict[str, list[float]] = {}
    for labels, raw in instant_samples(data, "capacity query", max_series=MAX_SERIES, at=at,
                                       too_many_hint="; narrow the groups' metricsSelector"):
        group = str(labels.get(KEY_LABEL, ""))
        name = str(labels.get("__name__", ""))
        name = "vllm:" + name[5:] if name.startswith("vllm_") else name
        value = _float(raw)
        if labels.get(SERIES_LABEL) == "preemptions":
            if value is not None and value >= 0:
                preempt.setdefault(group, []).append(value)
        elif name == VLLM_CACHE_CONFIG_INFO:
            t = engine_tokens(labels)
            size = _float(labels.get("block_size"))
            if size is not None and 0 < size <= 2**20:
                blocks.setdefault(group, []).append(size)
            if t is None:
                unset[group] = unset.get(group, 0) + 1
            else:
                tokens.setdefault(group, []).append(t)
        elif name == VLLM_KV_CACHE_USAGE and value is not None and 0 <= value <= 1:
            usage.setdefault(group, []).append(value)
    out: dict[str, EngineCapacity] = {}
    for g in spec.groups:
        got = tokens.get(g.name, [])
        u, p = usage.get(g.name), preempt.get(g.name)
        reason = ""
        if not got:
            reason = (f"{unset[g.name]} engine(s) report vllm:cache_config_info without a KV size yet" if g.name in unset
                      else "no vllm:cache_config_info series for the group's pods yet")
        out[g.name] = EngineCapacity(
            g.name, min(got) if got else None, len(got) + unset.get(g.name, 0), sum(u) / len(u) if u else None,
            sum(p) if p else None, reason, (max(got) / min(got) - 1.0) if got else 0.0,
            min(blocks[g.name]) if g.name in blocks else None)
    return out
