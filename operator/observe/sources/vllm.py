"""The ``vllm`` history source: stock vLLM's ``vllm:request_generation_tokens`` histogram, one class per Deployment.

vLLM labels the histogram with ``model_name`` (the first ``--served-model-name``) and ``engine`` only; the scrape
adds ``namespace``, ``pod`` and the like. Nothing in it says which class a request was, so with stock vLLM alone a
class is **one Deployment's traffic** (``history.group``): the group's histogram is the class's history and its
``+Inf`` count the class's arrival rate. Several classes naming one group all get that group's mix (and must give
their own ``arrivalRate`` or ``arrivalRateQuery``, since the count is their total); a plan that routes a class's
traffic to other groups changes what the group's histogram measures. For real per-class histories use the
``kvplan`` source (kvplan's vLLM stat-logger plugin), ``llm-d`` or ``envoy-ai-gateway``.

A group's series are found by its ``metricsSelector``, or by default by the namespace and the pod names of its
Deployment (``<deployment>-<replicaset hash>-<pod id>``), the ``namespace`` and ``pod`` labels every Kubernetes
scrape configuration (Prometheus Operator's PodMonitor/ServiceMonitor, the Helm chart's ``kubernetes-pods`` job)
adds. A class may instead give its own ``history.selector`` (kvplan 0.1's form). One query serves every key: one
``label_replace(sum by (le) (increase(...)), "kvplan_key", "<key>", "", "")`` branch per distinct selector.
"""

from __future__ import annotations

import re

from kvcore import VLLM_GENERATION_TOKENS, VLLM_GENERATION_TOKENS_ESCAPED

from ..history import KEY_LABEL
from ...spec import Group, HistorySource, KVPlanSpec
from . import SourceQuery, matcher, series_text, settings_of

#: A Deployment's pods: ``<deployment>-<pod-template-hash>-<5 characters>``; the two dashes keep ``vllm-a`` from
#: matching ``vllm-a-canary``'s pods.
POD_SUFFIX = "-[a-z0-9]+-[a-z0-9]+"


def pod_regex(deployments: list[str]) -> str:
    """A PromQL regex (RE2, fully anchored) for the pods of ``deployments``, ready for a double-quoted string."""
    names = [re.sub(r"([.])", r"\\\\\1", d) for d in deployments]
    alt = names[0] if len(names) == 1 else "(" + "|".join(names) + ")"
    return alt + POD_SUFFIX


def group_selector(group: Group, namespace: str) -> str:
    """The label matchers of one group's vLLM series (its ``metricsSelector``, else namespace + pods)."""
    if group.metrics_selector is not None:
        return group.metrics_selector.strip()
    return f'namespace="{namespace}", pod=~"{pod_regex([group.deployment])}"'


class VllmSource:
    name = "vllm"
    layout = "vllm"

    def metrics(self, settings: HistorySource | None) -> tuple[str, ...]:
        if settings is not None and settings.metric:
            return (settings.metric,)
        return (VLLM_GENERATION_TOKENS, VLLM_GENERATION_TOKENS_ESCAPED)

    def class_label(self, settings: HistorySource | None) -> str | None:
        return None

    def default_selector(self, spec: KVPlanSpec, namespace: str) -> str:
        return group_selector(spec.groups[0], namespace)

    def query(self, spec: KVPlanSpec, namespace: str, classes: tuple[int, ...], window_s: float) -> SourceQuery:
        metrics = self.metrics(settings_of(spec, self.name))
        groups = {g.name: g for g in spec.groups}
        selectors: dict[str, str] = {}
        keys: dict[str, list[str]] = {}
        where: dict[str, str] = {}
        for i in classes:
            c = spec.classes[i]
            if c.history.selector is not None:
                key, sel = f"class/{c.name}", c.history.selector.strip()
                where[key] = f"class {c.name} (spec.classes[{i}].history.selector)"
            else:
                g = groups[c.history.group] if c.history.group else spec.groups[0]
                key, sel = f"group/{g.name}", group_selector(g, namespace)
                where[key] = f"group {g.name} (Deployment {g.deployment})"
            selectors[key] = sel
            keys.setdefault(key, []).append(c.name)
        branches = [f'label_replace(sum by (le) (increase({matcher(metrics, sel)}[{int(window_s)}s])), '
                    f'"{KEY_LABEL}", "{key}", "", "")' for key, sel in selectors.items()]
        shown = "; ".join(f"{where[k]}: {sel}" for k, sel in selectors.items())
        return SourceQuery(self.name, " or ".join(branches), KEY_LABEL, {k: tuple(v) for k, v in keys.items()},
                           series_text(metrics, ""), shown, where)


VLLM = VllmSource()
