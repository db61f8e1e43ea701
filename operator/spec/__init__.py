"""KVPlan custom resource -> validated, frozen :class:`KVPlanSpec`.

The apiserver's schema (``crds/kvplans.kvplan.io.yaml``) already enforces types, ranges, enums and the
cross-field CEL rules. This module re-checks everything (the operator may see objects written before a schema
change) and adds the rules the schema cannot express. :func:`parse_spec` returns every error at once, each with
its field path (``spec.groups[1].nodePool.gpuCount``), as :class:`InvalidSpec`. No I/O here.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from kvcore import GPU_CATALOGUE
from kvcore import HistorySource as SourceName

from .base import CONFIGMAP_KEY, DNS_SUBDOMAIN, HEADER_NAME, HEADER_VALUE, SpecModel, parse_duration
from .engine import class_rule_errors
from .prometheus import Prometheus, prometheus_errors
from .group import DEFAULT_NODE_SELECTORS as DEFAULT_NODE_SELECTORS, Group as Group, Layout as Layout
from .group import GpuSpec as GpuSpec, gpu_errors
from .group import ModelConfigRef as ModelConfigRef, NodePool as NodePool, Toleration as Toleration
from .group import WorkloadRef as WorkloadRef

#: A Prometheus metric name (a histogram family, without ``_bucket``) and a label name.
METRIC_NAME = r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"
LABEL_NAME = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
#: Sane bounds of the durations, seconds (the CRD's CEL rules say the same). A re-plan more often than every 10 s
#: would only re-read the same scrape; a lookback under 5 min has too few requests for a tail, over 30 d makes each
#: query scan a month of samples.
INTERVAL_BOUNDS = (10.0, 86400.0)
LOOKBACK_BOUNDS = (300.0, 30 * 86400.0)


class InvalidSpec(ValueError):
    """The spec is unusable. ``errors`` lists ``(field_path, message)``; nothing may be applied."""

    def __init__(self, errors: list[tuple[str, str]], *, reason: str = "InvalidSpec") -> None:
        self.errors = errors
        self.reason = reason
        super().__init__("; ".join(f"{path}: {msg}" for path, msg in errors))


class History(SpecModel):
    """Where a class's output-length history comes from (:mod:`kvplan_operator.observe.sources`)."""

    source: SourceName = Field("vllm", description="vllm (default: stock vLLM, one Deployment's traffic), kvplan, "
                               "llm-d, envoy-ai-gateway or custom.")
    group: str | None = Field(None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63,
                              description="vllm: the group whose Deployment's histogram is this class's history.")
    class_value: str | None = Field(None, min_length=1, max_length=256, pattern=HEADER_VALUE,
                                    description="The source's class label value for this class; default its name.")
    selector: str | None = Field(None, max_length=1024, description="vllm only: label matchers for the histogram "
                                 "(instead of the group's); kvplan 0.1's form, still read.")
    min_samples: int = Field(50, ge=1, description="Requests in the lookback below which the class is Degraded.")


class HistorySource(SpecModel):
    """Settings of one history source for this KVPlan (every field optional except for ``custom``)."""

    name: SourceName
    metric: str | None = Field(None, pattern=METRIC_NAME, max_length=200,
                               description="Histogram family name without _bucket; default the exporter's own.")
    class_label: str | None = Field(None, pattern=LABEL_NAME, max_length=200,
                                    description="Label naming the class; default kvplan_class (llm-d: fairness_id).")
    selector: str | None = Field(None, max_length=1024, description="Label matchers (no braces) replacing the "
                                 "source's default selector; empty matches every series of the metric.")


#: Largest cost, rate or capacity a spec may give (1e9): far above any real fleet, far below where float products in
#: the planner overflow (a 1e308 cost made it fail with an unexplained ValueError).
MAX_VALUE = 1e9
#: Longest prompt or output a spec may give, tokens (the CRD says the same).
MAX_TOKENS = 10_000_000


class Costs(SpecModel):
    preemption: float = Field(gt=0, le=MAX_VALUE, description="c_p, per under-reserved token.")
    waste: float = Field(gt=0, le=MAX_VALUE, description="c_w, per wasted reserved token.")


class Slo(SpecModel):
    mu: float = Field(gt=0, le=1000)
    sigma: float = Field(gt=0, le=1000)
    lambda_: float = Field(gt=1, le=1e12, alias="lambda")


class Robustness(SpecModel):
    policy: Literal["absolute", "fraction", "drift"] = "drift"
    eps: float | None = Field(None, ge=0, le=MAX_VALUE)
    frac: float | None = Field(None, ge=0, le=10)
    floor_scale: float | None = Field(None, ge=0, le=100)
    drift_z: float | None = Field(None, ge=0, le=100)

    @model_validator(mode="after")
    def _params(self) -> Robustness:
        if self.policy == "absolute" and self.eps is None:
            raise ValueError("policy absolute needs eps")
        if self.policy == "fraction" and self.frac is None:
            raise ValueError("policy fraction needs frac")
        if self.policy != "absolute" and self.eps is not None:
            raise ValueError("eps is only for policy absolute")
        if self.policy != "fraction" and self.frac is not None:
            raise ValueError("frac is only for policy fraction")
        if self.policy != "drift" and (self.floor_scale is not None or self.drift_z is not None):
            raise ValueError("floorScale and driftZ are only for policy drift")
        return self


class HeaderMatch(SpecModel):
    name: str = Field(pattern=HEADER_NAME, max_length=256, description="A request header the gateway matches on.")
    value: str = Field(min_length=1, max_length=256, pattern=r"^[ -~]+$")


class ClassMatch(SpecModel):
    """What names a request's class, as the ecosystem sends it (each set field is one rule of the reservation
    file's ``classify`` section, in this order; docs/operator.md, "Request classes")."""

    objective: str | None = Field(None, min_length=1, max_length=256, pattern=r"^[ -~]+$",
                                  description="x-gateway-inference-objective: an InferenceObjective's name.")
    fairness_id: str | None = Field(None, min_length=1, max_length=256, pattern=r"^[ -~]+$",
                                    description="x-gateway-inference-fairness-id: a tenant id.")
    model: str | None = Field(None, min_length=1, max_length=256, pattern=r"^[ -~]+$",
                              description="The served model or LoRA adapter the request names (body model).")
    header: HeaderMatch | None = None


class RequestClass(SpecModel):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    input_tokens: int = Field(ge=0, le=MAX_TOKENS)
    max_output_tokens: int = Field(ge=1, le=MAX_TOKENS)
    prefix_tokens: int = Field(0, ge=0, le=MAX_TOKENS)
    arrival_rate: float | None = Field(None, gt=0, le=MAX_VALUE)
    arrival_rate_query: str | None = None
    history: History = History()
    costs: Costs | None = None
    slo: Slo | None = None
    robustness: Robustness | None = None
    max_prompt_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS, description="Prompt-length rule for kvplan's "
                                          "plugins: a request naming no class, with at most this many prompt tokens, "
                                          "is this class (rules tried from the smallest up).")
    fleet_default: bool = Field(False, description="The class of requests that name none (or an unknown one) and "
                                "match no prompt-length rule; default: the first class.")
    match: ClassMatch | None = None


class FleetCosts(SpecModel):
    kappa: float = Field(0.2, ge=0, le=MAX_VALUE, description="Layout cost weight; the paper's 0.2.")
    c_slo: float = Field(5.0, ge=0, le=MAX_VALUE, description="Queueing-delay cost per request-second; the paper's "
                         "c_slo/c_w = 5.")
    c_rej: float = Field(5000.0, ge=0, le=MAX_VALUE, description="Rejection cost per request; the paper's "
                         "c_rej/c_w = 5000.")


#: The forms of the ConfigMap names a KVPlan derives from its own: ``<kvplan>-kvplan`` (state), ``<kvplan>-plan``
#: and ``<kvplan>-plan-<i>`` (the plan's detail). A router ConfigMap of such a name could be another KVPlan's.
GENERATED_CONFIGMAP_FORMS = (("state", re.compile(r"-kvplan$")), ("plan detail", re.compile(r"-plan(?:-[0-9]+)?$")))


def generated_configmap_form(name: str) -> str | None:
    """Which generated ConfigMap ``name`` has the form of (``"state"``, ``"plan detail"``), or None."""
    return next((what for what, form in GENERATED_CONFIGMAP_FORMS if form.search(name)), None)


class ConfigMapRef(SpecModel):
    name: str = Field(pattern=DNS_SUBDOMAIN, max_length=253)
    key: str = Field("routing.json", pattern=CONFIGMAP_KEY, max_length=253)
    format: Literal["kvplan.v1"] = "kvplan.v1"

    @field_validator("name")
    @classmethod
    def _not_generated(cls, name: str) -> str:
        """Issue 26: a router ConfigMap named like a KVPlan's state or detail ConfigMap overwrote another KVPlan's."""
        what = generated_configmap_form(name)
        if what is not None:
            raise ValueError(f"{name!r} has the form of a KVPlan's own {what} ConfigMap (<kvplan>-kvplan, "
                             "<kvplan>-plan, <kvplan>-plan-<n> are reserved); choose another name")
        return name


class HttpRouteRef(SpecModel):
    name: str = Field(pattern=DNS_SUBDOMAIN, max_length=253)
    class_header: str = Field("x-gateway-inference-objective", pattern=HEADER_NAME, max_length=256,
                              description="A rule matching this header with a class name is that class's rule; "
                              "default: the inference extension's objective header (an InferenceObjective "
                              "named like the class).")


class Router(SpecModel):
    config_map: ConfigMapRef | None = None
    http_route: HttpRouteRef | None = None
    min_weight_change: float = Field(0.01, ge=0, le=1, description="Routing hysteresis: weights move only when "
                                     "one moves by this much; 0.01 ignores re-plan noise, not traffic shifts.")


class Replan(SpecModel):
    interval: str = Field("5m", description="Re-plan period; 5 m follows traffic drift without churn.")
    min_improvement: float = Field(0.05, ge=0, le=1, description="Relative gain a re-layout must bring.")
    max_layout_changes_per_hour: int = Field(2, ge=0, le=60, description="Rolling restarts allowed per hour.")

    @property
    def interval_seconds(self) -> float:
        return parse_duration(self.interval)


class StepTimes(SpecModel):
    """Step times fitted from the running engines' own series (docs/model.md "Online step-time fit")."""

    from_engine: bool = Field(True, description="True: fit each group's step times (t0, t1, prefill rate) at its "
                              "running layout from vLLM's inter-token latency and iteration series, and scale the "
                              "profile of its other layouts by fitted / modelled; False: the profile only.")
    window_seconds: int = Field(60, ge=5, le=3600, description="One fit window, seconds (a range query step).")
    lookback_seconds: int = Field(1800, ge=60, le=86400, description="How far back the fit reads, seconds.")
    min_windows: int = Field(8, ge=4, le=1000, description="Fewest usable windows (engine x window with at least "
                             "50 decode tokens) for a fit; fewer keep the profile, with status saying so.")


class Capacity(SpecModel):
    """Where M(z), the KV capacity of a replica, and the step times come from."""

    from_engine: bool = Field(True, description="True: vLLM's own vllm:cache_config_info for the running layout, "
                              "the profile scaled by engine/profile for the others; False: the roofline profile (and "
                              "spec.profiles) only.")
    step_times: StepTimes = StepTimes()


class ProfileOverride(SpecModel):
    gpu_type: str = Field(min_length=1, max_length=63, description="A catalogue GPU type or a group's gpuSpec.name.")
    model: str
    tp: int = Field(ge=1, le=16)
    pp: int = Field(ge=1, le=16)
    kv_capacity_tokens: int = Field(ge=1, le=10**12)
    throughput_tokens_per_second: float = Field(gt=0, le=10**12)


class KVPlanSpec(SpecModel):
    mode: Literal["Apply", "DryRun"] = "Apply"
    groups: tuple[Group, ...] = Field(min_length=1, max_length=64)
    classes: tuple[RequestClass, ...] = Field(min_length=1, max_length=256)
    costs: FleetCosts = FleetCosts()
    robustness: Robustness = Robustness()
    profiles: tuple[ProfileOverride, ...] = ()
    prometheus: Prometheus
    history_sources: tuple[HistorySource, ...] = Field((), max_length=5)
    capacity: Capacity = Capacity()
    router: Router = Router()
    replan: Replan = Replan()


def _path(loc: tuple[int | str, ...]) -> str:
    out = "spec"
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _semantic_errors(spec: KVPlanSpec) -> list[tuple[str, str]]:
    """Rules spanning fields (the CEL rules again, plus those CEL cannot say)."""
    errs: list[tuple[str, str]] = []
    named: tuple[tuple[str, list[str]], ...] = (("groups", [g.name for g in spec.groups]),
                                                ("classes", [c.name for c in spec.classes]))
    for kind, names in named:
        seen: dict[str, int] = {}
        for i, name in enumerate(names):
            if name in seen:
                errs.append((f"spec.{kind}[{i}].name", f"duplicate of spec.{kind}[{seen[name]}].name {name!r}"))
            seen.setdefault(name, i)
    deps: dict[str, int] = {}
    for i, g in enumerate(spec.groups):
        if g.deployment in deps:
            errs.append((f"spec.groups[{i}].deployment", f"Deployment {g.deployment!r} is already spec.groups[{deps[g.deployment]}]"))
        deps.setdefault(g.deployment, i)
        if g.hf_config is not None and g.model_config_ref is not None:
            errs.append((f"spec.groups[{i}].modelConfigRef", "give modelConfig or modelConfigRef, not both"))
        seen_layouts: set[tuple[int, int]] = set()
        for j, lay in enumerate(g.layouts):
            if (lay.tp, lay.pp) in seen_layouts:
                errs.append((f"spec.groups[{i}].layouts[{j}]", f"duplicate layout tp={lay.tp} pp={lay.pp}"))
            seen_layouts.add((lay.tp, lay.pp))
    for i, c in enumerate(spec.classes):
        p = f"spec.classes[{i}]"
        if (c.costs is None) == (c.slo is None):
            errs.append((p, "exactly one of costs or slo is required"))
        if c.arrival_rate is not None and c.arrival_rate_query is not None:
            errs.append((p, "give at most one of arrivalRate or arrivalRateQuery (neither: the history source's "
                         "request count)"))
        if c.prefix_tokens > c.input_tokens:
            errs.append((f"{p}.prefixTokens", f"{c.prefix_tokens} exceeds inputTokens {c.input_tokens}"))
    errs += gpu_errors(spec.groups)
    own_gpus = {g.node_pool.gpu_spec.name for g in spec.groups if g.node_pool.gpu_spec is not None}
    for j, prof in enumerate(spec.profiles):
        if prof.gpu_type not in GPU_CATALOGUE and prof.gpu_type not in own_gpus:
            errs.append((f"spec.profiles[{j}].gpuType", f"unknown GPU type {prof.gpu_type!r}: give a catalogue type "
                         f"({', '.join(GPU_CATALOGUE)}) or a group's gpuSpec.name"))
    errs += _source_errors(spec)
    errs += class_rule_errors(spec.classes)
    for field, text, (low, high) in (("spec.prometheus.lookback", spec.prometheus.lookback, LOOKBACK_BOUNDS),
                                     ("spec.replan.interval", spec.replan.interval, INTERVAL_BOUNDS)):
        try:
            seconds = parse_duration(text)
        except ValueError as exc:
            errs.append((field, str(exc)))
            continue
        if not low <= seconds <= high:
            errs.append((field, f"{text} is outside [{_human(low)}, {_human(high)}]"))
    errs += prometheus_errors(spec.prometheus)
    if not errs and spec.prometheus.lookback_seconds / spec.prometheus.windows < 60:
        errs.append(("spec.prometheus.windows", "each sub-window must span at least 1m (lookback / windows)"))
    return errs


def _selector_errors(path: str, text: str | None) -> list[tuple[str, str]]:
    if text is not None and ("{" in text or "}" in text):
        return [(path, "give label matchers without braces, e.g. model_name=\"chat\"")]
    return []


def history_key(spec: KVPlanSpec, i: int) -> tuple[str, str]:
    """(source, key) of class ``i``'s series: classes with the same key read the same series. Assumes a valid spec
    (vllm: the explicit selector, else the group, else the only group)."""
    h = spec.classes[i].history
    if h.source != "vllm":
        return h.source, h.class_value or spec.classes[i].name
    if h.selector is not None:
        return "vllm", "selector:" + h.selector.strip()
    group = h.group or spec.groups[0].name
    return "vllm", "group:" + group


def _source_errors(spec: KVPlanSpec) -> list[tuple[str, str]]:
    """The rules of history sources (docs/operator.md, "History sources")."""
    errs: list[tuple[str, str]] = []
    settings: dict[str, int] = {}
    for j, src in enumerate(spec.history_sources):
        p = f"spec.historySources[{j}]"
        if src.name in settings:
            errs.append((f"{p}.name", f"duplicate of spec.historySources[{settings[src.name]}].name {src.name!r}"))
        settings.setdefault(src.name, j)
        errs += _selector_errors(f"{p}.selector", src.selector)
        if src.name == "vllm" and (src.class_label is not None or src.selector is not None):
            errs.append((p, "the vllm source has no class label and no source-wide selector: set "
                         "spec.groups[].metricsSelector or spec.classes[].history.selector"))
        if src.name == "custom" and (src.metric is None or src.class_label is None):
            errs.append((p, "the custom source needs metric and classLabel"))
    groups = {g.name for g in spec.groups}
    for k, g in enumerate(spec.groups):
        errs += _selector_errors(f"spec.groups[{k}].metricsSelector", g.metrics_selector)
    for i, c in enumerate(spec.classes):
        h, p = c.history, f"spec.classes[{i}].history"
        errs += _selector_errors(f"{p}.selector", h.selector)
        if h.source == "vllm":
            if h.class_value is not None:
                errs.append((f"{p}.classValue", "the vllm source has no class label (one Deployment's traffic is "
                             "one class): name the group instead"))
            if h.group is not None and h.selector is not None:
                errs.append((p, "give group or selector, not both"))
            elif h.group is not None and h.group not in groups:
                errs.append((f"{p}.group", f"no group named {h.group!r} (groups: {', '.join(sorted(groups))})"))
            elif h.group is None and h.selector is None and len(spec.groups) > 1:
                errs.append((f"{p}.group", "required with the vllm source when there are several groups: the "
                             "group whose Deployment serves this class"))
        else:
            for name in ("group", "selector"):
                if getattr(h, name) is not None:
                    errs.append((f"{p}.{name}", f"only for the vllm source; the {h.source} source reads every class "
                                 "in one query: set spec.historySources[name=" + h.source + "].selector"))
            if h.source == "custom" and "custom" not in settings:
                errs.append((f"{p}.source", "custom needs an entry in spec.historySources with name custom, metric "
                             "and classLabel"))
    if errs:
        return errs
    shared: dict[tuple[str, str], list[int]] = {}
    for i in range(len(spec.classes)):
        shared.setdefault(history_key(spec, i), []).append(i)
    for (source, key), members in shared.items():
        own = [i for i in members if spec.classes[i].arrival_rate is None
               and spec.classes[i].arrival_rate_query is None]
        if len(members) > 1 and own:
            names = ", ".join(spec.classes[i].name for i in members)
            errs.append((f"spec.classes[{own[0]}]", f"classes {names} read the same {source} series "
                         f"({key.partition(':')[2] or key}), so that series' request count is their total, not "
                         "each one's: give arrivalRate or arrivalRateQuery for each of them"))
    return errs


def _human(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def layout_errors(spec: KVPlanSpec) -> list[tuple[str, str]]:
    """Layouts that need more GPUs than one node of the pool has (a LeaderWorkerSet group: that are not whole nodes
    with TP inside one), or than the whole pool."""
    errs: list[tuple[str, str]] = []
    for i, g in enumerate(spec.groups):
        multi_node = g.workload_ref is not None and g.workload_ref.kind == "LeaderWorkerSet"
        per_node = g.node_pool.gpus_per_node
        for j, lay in enumerate(g.layouts):
            path = f"spec.groups[{i}].layouts[{j}]"
            if lay.gpus > per_node and not multi_node:
                errs.append((path, f"tp*pp = {lay.gpus} GPUs exceeds one node of the pool ({per_node} GPUs); a "
                                   "layout wider than a node needs groups[].workloadRef of kind LeaderWorkerSet"))
            elif lay.gpus > per_node and (lay.tp > per_node or lay.gpus % per_node):
                errs.append((path, f"tp*pp = {lay.gpus} GPUs is not a whole number of nodes of the pool ({per_node} "
                                   "GPUs) with TP inside one, as a LeaderWorkerSet group runs it"))
            elif lay.gpus > g.node_pool.gpu_count:
                errs.append((path, f"tp*pp = {lay.gpus} GPUs exceeds the group's gpuCount {g.node_pool.gpu_count}"))
    return errs


def parse_spec(raw: Any) -> KVPlanSpec:
    """Validate ``raw`` (the CR's ``spec`` dict). Raises :class:`InvalidSpec` listing every error with its path.

    A layout that does not fit one node is reported with reason ``LayoutExceedsNode``.
    """
    if not isinstance(raw, dict):
        raise InvalidSpec([("spec", "must be an object")])
    try:
        spec = KVPlanSpec.model_validate(raw)
    except ValidationError as exc:
        found = []
        for e in exc.errors():
            loc = tuple(x for x in e["loc"] if not (isinstance(x, str) and x.startswith(("function-", "literal["))))
            found.append((_path(loc), e["type"], e["msg"].removeprefix("Value error, ")))
        # A list reported "too short" only because its items failed is noise: keep the items' own errors.
        errors = [(path, msg) for path, kind, msg in found
                  if not (kind == "too_short" and any(o != path and o.startswith(path + "[") for o, _, _ in found))]
        raise InvalidSpec(errors) from None
    errs = _semantic_errors(spec)
    if errs:
        raise InvalidSpec(errs)
    lay = layout_errors(spec)
    if lay:
        raise InvalidSpec(lay, reason="LayoutExceedsNode")
    return spec
