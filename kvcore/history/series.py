"""The metric series kvplan reads and exports: names, class labels and histogram bucket layouts.

One place for what two sides must agree on. The operator's history sources read these series from Prometheus;
kvplan's vLLM stat-logger plugin (``kvplan_vllm``) exports the ``kvplan_*`` ones; the evaluation harness bins raw
traces in the same layouts to train policies on what the operator would see. Pure: no I/O, no client libraries.

Bucket layouts are lists of finite upper bounds ``le`` in tokens, increasing; Prometheus adds ``+Inf``.
"""

from __future__ import annotations

import math

from kvcore.errors import InputError

#: vLLM's per-request output-length histogram (labels ``model_name``, ``engine``); no class label.
VLLM_GENERATION_TOKENS = "vllm:request_generation_tokens"
#: The same name as ``prometheus_client`` >= 0.23 may store it (``:`` escaped); queries accept both.
VLLM_GENERATION_TOKENS_ESCAPED = "vllm_request_generation_tokens"
#: vLLM's KV-cache configuration (labels include ``num_gpu_blocks`` and ``block_size``), value 1.
VLLM_CACHE_CONFIG_INFO = "vllm:cache_config_info"
#: vLLM's KV-cache usage, fraction 0..1.
VLLM_KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
#: vLLM's preemption counter.
VLLM_PREEMPTIONS = "vllm:num_preemptions"

#: kvplan's plugin: per-class output tokens per finished request (histogram, :func:`kvplan_buckets` layout).
KVPLAN_OUTPUT_TOKENS = "kvplan_request_output_tokens"
#: kvplan's plugin: finished requests per class (counter; Prometheus name gains ``_total``).
KVPLAN_REQUESTS = "kvplan_requests"
#: kvplan's plugin: preemptions per class, summed over finished requests (counter; ``_total`` added).
KVPLAN_PREEMPTIONS = "kvplan_request_preemptions"
#: The class label on every ``kvplan_*`` series.
KVPLAN_CLASS_LABEL = "kvplan_class"
#: The class a request gets when nothing names one.
KVPLAN_DEFAULT_CLASS = "default"

#: vLLM's KV-cache configuration labels that give its capacity: per engine (one replica), ``num_gpu_blocks`` x
#: ``block_size`` tokens; vLLM 0.33 also labels ``kv_cache_size_tokens`` (capacity counted over every KV-cache group,
#: which differs from the product for hybrid models). Values are strings; ``"None"`` before the engine profiled.
VLLM_CACHE_LABELS = ("num_gpu_blocks", "block_size", "kv_cache_size_tokens")

#: llm-d's endpoint picker: output tokens per request (labels ``model_name``, ``target_model_name``,
#: ``fairness_id``, ``priority``; :func:`llm_d_buckets` layout). Newer llm-d-router releases rename it
#: :data:`LLMD_ROUTER_OUTPUT_TOKENS`; older ones (and the upstream Inference Extension) export the deprecated
#: ``inference_objective_output_tokens`` without ``fairness_id``.
LLMD_OUTPUT_TOKENS = "llm_d_epp_request_output_tokens"
#: The same histogram in newer llm-d-router releases (subsystem ``llm_d_router_epp``).
LLMD_ROUTER_OUTPUT_TOKENS = "llm_d_router_epp_output_tokens"
#: Envoy AI Gateway's OpenTelemetry token histogram; output tokens carry ``gen_ai_token_type="output"``
#: (:func:`powers_of_4_buckets` layout). A request header becomes a label through the gateway controller's
#: ``--metricsRequestHeaderAttributes=<header>:<attribute>``; Prometheus spells the attribute with ``_`` for ``.``.
ENVOY_TOKEN_USAGE = "gen_ai_client_token_usage"
#: The label (and value) selecting output tokens in :data:`ENVOY_TOKEN_USAGE`.
ENVOY_TOKEN_TYPE = ("gen_ai_token_type", "output")

#: Largest relative bucket width of :func:`kvplan_buckets`: a bucket ``(lo, hi]`` has ``hi <= lo * (1 + w)``.
KVPLAN_MAX_RELATIVE_WIDTH = 0.10


def _check_max(max_value: int | float, field: str) -> int:
    if not isinstance(max_value, (int, float)) or not math.isfinite(max_value) or max_value < 1:
        raise InputError(field, f"must be a finite number of tokens >= 1, got {max_value!r}")
    return int(max_value)


def vllm_buckets(max_value: int) -> list[int]:
    """vLLM's 1-2-5 layout for token histograms: 1, 2, 5, 10, 20, 50, ... up to and including ``max_value``
    (vLLM passes max_model_len)."""
    top = _check_max(max_value, "max_value")
    out: list[int] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exponent
            if v > top:
                return out
            out.append(v)
        exponent += 1


def powers_of_4_buckets(max_value: int) -> list[int]:
    """The Envoy AI Gateway's token layout: 1, 4, 16, 64, ... up to and including ``max_value``."""
    top = _check_max(max_value, "max_value")
    out = [1]
    while out[-1] * 4 <= top:
        out.append(out[-1] * 4)
    return out


def kvplan_buckets(max_value: int, *, relative_width: float = KVPLAN_MAX_RELATIVE_WIDTH) -> list[int]:
    """kvplan's fine layout: integer bounds 1, 2, 3, ... while a one-token bucket is already finer than
    ``relative_width``, then geometric with ``hi = floor(lo * (1 + relative_width))``, ending exactly at
    ``max_value``. Every bucket ``(lo, hi]`` holds only integers in ``lo + 1 .. hi``, and ``(hi - lo) / lo <=
    relative_width`` for ``lo >= 1``. 8,192 tokens take 86 buckets at 10 %."""
    top = _check_max(max_value, "max_value")
    if not (0.0 < relative_width <= 1.0) or not math.isfinite(relative_width):
        raise InputError("relative_width", f"must be in (0, 1], got {relative_width!r}")
    out = [1]
    while out[-1] < top:
        lo = out[-1]
        hi = max(lo + 1, math.floor(lo * (1.0 + relative_width)))
        out.append(min(hi, top))
    return out


def llm_d_buckets(max_value: int) -> list[int]:
    """llm-d's endpoint-picker token layout: 1, then powers of 2 from 8 (8, 16, 32, ...) up to and including
    ``max_value``; llm-d fixes the top at 8192 (``llm_d_epp_request_output_tokens``)."""
    top = _check_max(max_value, "max_value")
    out = [1]
    b = 8
    while b <= top:
        out.append(b)
        b *= 2
    return out


#: Bucket layouts by name (the names ``kvcore evaluate --observe`` and the history sources use).
LAYOUTS = {"vllm": vllm_buckets, "powers-of-4": powers_of_4_buckets, "kvplan": kvplan_buckets}
#: Every exporter's layout by name, as the history sources use them: :data:`LAYOUTS` plus llm-d's.
SOURCE_LAYOUTS = {**LAYOUTS, "llm-d": llm_d_buckets}
