"""The history sources whose series carry a class label: ``kvplan``, ``llm-d``, ``envoy-ai-gateway``, ``custom``.

One query per source, ``sum by (le, <class label>) (increase({<metric>_bucket, <selector>}[W]))``; a class's
series are those whose label equals its ``history.classValue`` (default: the class name). Values of the label that
no class names (another team's classes) are read and ignored.

- ``kvplan``: kvplan's vLLM stat-logger plugin (``kvplan_vllm.stats``, docs/vllm-plugins.md) on every serving pod:
  ``kvplan_request_output_tokens{kvplan_class, model_name}``, buckets at most 10 % wide. Default selector: the
  namespace and the pods of this KVPlan's Deployments (``namespace`` alone when a group has its own
  ``metricsSelector``).
- ``llm-d``: the endpoint picker's ``llm_d_epp_request_output_tokens`` (labels ``model_name``,
  ``target_model_name``, ``fairness_id``, ``priority``; buckets 1, 8, 16, ..., 8192). The class label is yours to
  choose: ``fairness_id`` (the default: llm-d's per-tenant flow id), ``target_model_name`` (one LoRA adapter or
  model per class), ``priority``. Newer llm-d-router releases call it ``llm_d_router_epp_output_tokens``: set
  ``metric``. Default selector: the KVPlan's namespace (the picker usually runs beside its InferencePool).
- ``envoy-ai-gateway``: the gateway's OpenTelemetry histogram ``gen_ai_client_token_usage`` with
  ``gen_ai_token_type="output"`` (always added), buckets 1, 4, 16, ... The class comes from a request header the
  gateway copies into a metric attribute: with ``--metricsRequestHeaderAttributes=x-gateway-inference-objective:kvplan.class``
  (Helm: ``controller.metricsRequestHeaderAttributes``) the label is ``kvplan_class`` (the default). Default
  selector: none (the gateway usually runs in its own namespace).
- ``custom``: ``metric``, ``classLabel`` and ``selector`` from ``spec.historySources``.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcore import ENVOY_TOKEN_TYPE, ENVOY_TOKEN_USAGE, KVPLAN_CLASS_LABEL, KVPLAN_OUTPUT_TOKENS, LLMD_OUTPUT_TOKENS

from ...spec import HistorySource, KVPlanSpec
from . import SourceQuery, matcher, series_text, settings_of
from .vllm import pod_regex


@dataclass(frozen=True)
class LabelledSource:
    """A source whose series carry a class label (module docstring)."""

    name: str
    layout: str
    default_metrics: tuple[str, ...]
    default_label: str
    #: Matchers always added (the Envoy gateway's token type), whatever the selector.
    fixed: str = ""
    #: ``"pods"``: this KVPlan's Deployments; ``"namespace"``: the KVPlan's namespace; ``""``: none.
    scope: str = ""

    def metrics(self, settings: HistorySource | None) -> tuple[str, ...]:
        if settings is not None and settings.metric:
            return (settings.metric,)
        return self.default_metrics

    def class_label(self, settings: HistorySource | None) -> str | None:
        if settings is not None and settings.class_label:
            return settings.class_label
        return self.default_label

    def default_selector(self, spec: KVPlanSpec, namespace: str) -> str:
        if self.scope == "pods" and all(g.metrics_selector is None for g in spec.groups):
            return f'namespace="{namespace}", pod=~"{pod_regex([g.deployment for g in spec.groups])}"'
        if self.scope in ("pods", "namespace"):
            return f'namespace="{namespace}"'
        return ""

    def query(self, spec: KVPlanSpec, namespace: str, classes: tuple[int, ...], window_s: float) -> SourceQuery:
        settings = settings_of(spec, self.name)
        metrics, label = self.metrics(settings), self.class_label(settings)
        assert label is not None
        selector = settings.selector if settings is not None and settings.selector is not None else \
            self.default_selector(spec, namespace)
        keys: dict[str, list[str]] = {}
        where: dict[str, str] = {}
        for i in classes:
            c = spec.classes[i]
            value = c.history.class_value or c.name
            keys.setdefault(value, []).append(c.name)
            where[value] = f'class {c.name} ({label}="{value}")'
        full = ", ".join(p for p in (self.fixed, selector.strip()) if p)
        promql = f"sum by (le, {label}) (increase({matcher(metrics, full)}[{int(window_s)}s]))"
        return SourceQuery(self.name, promql, label, {k: tuple(v) for k, v in keys.items()},
                           series_text(metrics, full), full, where)


KVPLAN = LabelledSource("kvplan", "kvplan", (KVPLAN_OUTPUT_TOKENS,), KVPLAN_CLASS_LABEL, scope="pods")
LLMD = LabelledSource("llm-d", "llm-d", (LLMD_OUTPUT_TOKENS,), "fairness_id", scope="namespace")
ENVOY = LabelledSource("envoy-ai-gateway", "powers-of-4", (ENVOY_TOKEN_USAGE,), KVPLAN_CLASS_LABEL,
                       fixed=f'{ENVOY_TOKEN_TYPE[0]}="{ENVOY_TOKEN_TYPE[1]}"')
CUSTOM = LabelledSource("custom", "", (), "")
