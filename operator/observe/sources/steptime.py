"""Step times from the engines: vLLM 0.33's own series per engine, in one range query per re-plan, fitted per group.

Over ``spec.capacity.stepTimes.lookbackSeconds`` at a step of ``windowSeconds`` (W), one query reads six series
per engine (``vllm:`` names, or their ``vllm_`` spellings; docs/model.md "Online step-time fit"), for all the groups
on the default selector at once (namespace + the pods of every such group's Deployment, told apart by pod name),
and per group with its own ``metricsSelector`` (labelled ``kvplan_key``), so that the query stays six branches
long at 64 groups:

    label_replace(min_over_time({__name__=~"vllm:num_requests_running|...", namespace="<ns>",
                                 pod=~"(<d1>|<d2>)-[a-z0-9]+-[a-z0-9]+"}[W]), "kvplan_series", "busy", "", "")
    or ... itl_count (rate of vllm:inter_token_latency_seconds_count), steps (rate of
       vllm:iteration_tokens_total_count), step_tokens (rate of vllm:iteration_tokens_total_sum), generated (rate
       of vllm:generation_tokens_total), usage (avg_over_time of vllm:kv_cache_usage_perc)
    or ... (the next group)

:func:`group_windows` turns each engine's six values at each step into a :class:`kvcore.StepWindow` (the ratios of
the rates are the ratios of the window's increases). Only a window in which the engine had a running request at
every scrape counts: it stepped all the time, so its mean step is W over its steps (``1 / rate(steps)``), each
step weighted once, as the regressors are. (The inter-token latency is not used: it weights each step by its
decoding sequences, and a step that prefills has fewer of them, which biases the prefill term low by up to a
fifth at small batches.) The KV tokens in use are the usage times the group's engine capacity from the capacity
query, less half a block per decoding sequence. :func:`observe_step_fits` fits each
group whose layout is known and settled on the windows since its last re-layout (:func:`kvcore.fit_step_law`,
scaling the layout's measured model when the windows do not pin the law). Nothing here fails the reconcile: a
Prometheus error, an unknown or rolling layout, too few windows or a poor fit is that group's ``reason``, and the
group keeps its profile.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from kvcore import InputError, StepFit, StepWindow, fit_step_law, layout_model

from ... import conditions as C
from ...prom import PromApi, PromError
from ...prom.stream import Points
from ...spec import Group, KVPlanSpec
from ..history import KEY_LABEL
from .capacity import SERIES_LABEL, EngineCapacity
from .vllm import POD_SUFFIX, group_selector, pod_regex

ITL = "vllm:inter_token_latency_seconds"
ITERATION_TOKENS = "vllm:iteration_tokens_total"
GENERATION = "vllm:generation_tokens_total"
USAGE = "vllm:kv_cache_usage_perc"
RUNNING = "vllm:num_requests_running"

SERIES: dict[str, tuple[str, str]] = {
    "busy": ("min_over_time", RUNNING),
    "itl_count": ("rate", ITL + "_count"),
    "steps": ("rate", ITERATION_TOKENS + "_count"),
    "step_tokens": ("rate", ITERATION_TOKENS + "_sum"),
    "generated": ("rate", GENERATION),
    "usage": ("avg_over_time", USAGE),
}
"""Series of the query: name -> (range function, metric)."""
#: Most series the query may return (64 groups x 64 engines x 6 series).
MAX_SERIES = 24_576
#: Block size assumed when the capacity query gave none (vLLM's default on CUDA), tokens.
DEFAULT_BLOCK = 16.0

# Reasons a group keeps its profile (besides kvcore's TooFewWindows / Underdetermined / PoorFit).
LAYOUT_UNKNOWN = "LayoutUnknown"
LAYOUT_ROLLING = "LayoutRolling"
NO_KV_CAPACITY = "NoEngineCapacity"
NO_MODEL = "NoModel"
DISABLED = "Disabled"


def steptime_query(spec: KVPlanSpec, namespace: str, window_s: float) -> str:
    """The one range query (module docstring) for every group of ``spec``: six branches for all the groups on the
    default selector together (their pods by one regex; :func:`pod_groups` tells them apart), six more per group
    with its own ``metricsSelector`` (labelled with the group)."""
    w = int(window_s)
    default = [g.deployment for g in spec.groups if g.metrics_selector is None]
    selectors: list[tuple[str | None, str]] = []
    if default:
        selectors.append((None, f'namespace="{namespace}", pod=~"{pod_regex(default)}"'))
    selectors += [(g.name, group_selector(g, namespace)) for g in spec.groups if g.metrics_selector is not None]
    branches = []
    for group, sel in selectors:
        for name, (fn, metric) in SERIES.items():
            expr = f'{fn}({{__name__=~"{metric}|{metric.replace(":", "_")}", {sel}}}[{w}s])'
            if group is not None:
                expr = f'label_replace({expr}, "{KEY_LABEL}", "{group}", "", "")'
            branches.append(f'label_replace({expr}, "{SERIES_LABEL}", "{name}", "", "")')
    return " or ".join(branches)


def pod_groups(spec: KVPlanSpec) -> list[tuple[re.Pattern[str], str]]:
    """For the groups on the default selector: (their Deployment's pod names, the group), as the query matches
    them (``<deployment>-<pod-template-hash>-<suffix>``)."""
    return [(re.compile(re.escape(g.deployment) + POD_SUFFIX), g.name) for g in spec.groups
            if g.metrics_selector is None]


def _value(text: Any) -> float | None:
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v >= 0 else None


def _points(series: Mapping[str, Any]) -> list[tuple[float, float | None]]:
    raw = series.get("values") or []
    if isinstance(raw, Points):  # the streaming client's packed points
        return [(t, _value(v)) for t, v in zip(raw.t, raw.v) if math.isfinite(t)]
    out = []
    for point in raw:
        if isinstance(point, (list, tuple)) and len(point) == 2 and _value(point[0]) is not None:
            out.append((float(point[0]), _value(point[1])))
    return out


def group_windows(data: Mapping[str, Any], kv_tokens: Mapping[str, float | None], window_s: float, *,
                  since: Mapping[str, float] | None = None, block_size: Mapping[str, float | None] | None = None,
                  pods: Sequence[tuple[re.Pattern[str], str]] = ()) -> dict[str, list[StepWindow]]:
    """The query's answer -> per group its engines' windows (oldest first per engine), each window ending after
    ``since[group]`` plus a window (seconds). A series names its group by ``kvplan_key``, else by its ``pod``
    label (``pods``: :func:`pod_groups`). ``kv_tokens``: per group the engine's KV capacity (tokens); a group
    without one gets no context, so no windows. Raises :class:`PromError` for an answer that is not a matrix or
    holds more than :data:`MAX_SERIES` series."""
    if data.get("resultType") not in (None, "matrix") or not isinstance(data.get("result", []), list):
        raise PromError(C.PROMETHEUS_BAD_RESPONSE, "step-time query: expected a matrix")
    result = data.get("result", [])
    if len(result) > MAX_SERIES:
        raise PromError(C.TOO_MANY_SERIES, f"step-time query: {len(result)} series (more than {MAX_SERIES}); narrow "
                        "the groups' metricsSelector")
    values: dict[tuple[str, frozenset[tuple[str, str]]], dict[float, dict[str, float | None]]] = {}
    for series in result:
        metric = (series.get("metric") or {}) if isinstance(series, Mapping) else {}
        name = str(metric.get(SERIES_LABEL, ""))
        if name not in SERIES:
            continue
        pod = str(metric.get("pod", ""))
        group = str(metric.get(KEY_LABEL) or next((g for pat, g in pods if pat.fullmatch(pod)), ""))
        if not group:
            continue
        engine = frozenset((str(k), str(v)) for k, v in metric.items() if k not in ("__name__", SERIES_LABEL))
        at = values.setdefault((group, engine), {})
        for ts, v in _points(series):
            at.setdefault(ts, {})[name] = v
    out: dict[str, list[StepWindow]] = {}
    for (group, _), points in sorted(values.items(), key=lambda kv: sorted(kv[0][1])):
        cap = kv_tokens.get(group)
        block = (block_size or {}).get(group) or DEFAULT_BLOCK
        start = (since or {}).get(group, -math.inf) + window_s
        for ts in sorted(points):
            p = points[ts]
            if ts < start or cap is None or any(p.get(k) is None for k in SERIES):
                continue
            steps, itl_n = p["steps"] or 0.0, p["itl_count"] or 0.0
            if steps <= 0 or itl_n <= 0 or (p["busy"] or 0.0) < 1:  # idle at some scrape: W / steps is no step
                continue
            decode = itl_n / steps
            prefill = max(0.0, (p["step_tokens"] or 0.0) - (p["generated"] or 0.0)) / steps
            context = max(0.0, (p["usage"] or 0.0) * cap - decode * (block + 1) / 2)
            out.setdefault(group, []).append(StepWindow(1.0 / steps, decode, prefill, context, itl_n * window_s))
    return out


def _fit_group(g: Group, windows: list[StepWindow], layout: tuple[int, int], spec: KVPlanSpec,
               models: Mapping[str, Mapping[str, Any]], gpus: Mapping[str, Mapping[str, Any]]) -> StepFit:
    try:
        model = layout_model(g.node_pool.gpu_name, g.model, layout[0], layout[1], models=models, gpus=gpus)
    except InputError as exc:
        return StepFit("", len(windows), 0.0, reason=NO_MODEL, message=f"no step-time model to scale: {exc}")
    return fit_step_law(windows, model=model, min_windows=spec.capacity.step_times.min_windows)


def observe_step_fits(prom: PromApi, spec: KVPlanSpec, namespace: str, *, now: float,
                      engines: Mapping[str, EngineCapacity] | None,
                      layouts: Mapping[str, tuple[int, int] | None], unsettled: Mapping[str, str | None],
                      since: Mapping[str, float], models: Mapping[str, Mapping[str, Any]],
                      gpus: Mapping[str, Mapping[str, Any]],
                      profile_kv: Mapping[str, float | None] | None = None) -> dict[str, StepFit]:
    """Per group its :class:`kvcore.StepFit` (module docstring); empty when ``spec.capacity.stepTimes.fromEngine``
    is false (no query). An engine's KV capacity (tokens) is the capacity query's, else ``profile_kv[group]`` (the
    profile's at the running layout: ``spec.capacity.fromEngine: false`` sends no capacity query)."""
    st = spec.capacity.step_times
    if not st.from_engine:
        return {}
    w = float(st.window_seconds)
    steps = max(1, int(st.lookback_seconds // st.window_seconds))
    kv = {g.name: e.kv_tokens if (e := (engines or {}).get(g.name)) is not None and e.kv_tokens is not None
          else (profile_kv or {}).get(g.name) for g in spec.groups}
    blocks = {g: e.block_size for g, e in (engines or {}).items()}
    try:
        data = prom.query_range(steptime_query(spec, namespace, w), start=now - (steps - 1) * w, end=now, step=w)
        windows = group_windows(data, kv, w, since=since, block_size=blocks, pods=pod_groups(spec))
    except PromError as exc:
        return {g.name: StepFit("", 0, 0.0, reason=exc.reason, message=f"step-time query: {exc}")
                for g in spec.groups}
    out: dict[str, StepFit] = {}
    for g in spec.groups:
        got = windows.get(g.name, [])
        layout = layouts.get(g.name)
        if layout is None:
            out[g.name] = StepFit("", len(got), 0.0, reason=LAYOUT_UNKNOWN,
                                  message="the Deployment's layout is unknown")
        elif unsettled.get(g.name):
            out[g.name] = StepFit("", len(got), 0.0, reason=LAYOUT_ROLLING,
                                  message=f"layout not known to run ({unsettled[g.name]})")
        elif kv.get(g.name) is None:
            out[g.name] = StepFit("", 0, 0.0, reason=NO_KV_CAPACITY,
                                  message="no engine KV capacity to turn KV-cache usage into context tokens")
        else:
            out[g.name] = _fit_group(g, got, layout, spec, models, gpus)
    return out
