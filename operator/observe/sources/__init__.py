"""History sources: where each class's output-length histogram comes from, behind one small protocol.

A class names its source in ``spec.classes[].history.source``; ``spec.historySources`` may override a source's
metric, class label and selector. Each :class:`Source` knows its metric names (every spelling), its class label,
its bucket layout (a name in :data:`kvcore.history.series.SOURCE_LAYOUTS`) and its default selector, and turns the classes
that name it into **one** range query (:class:`SourceQuery`):

    sum by (le, <class label>) (increase({__name__=~"<metric>_bucket", <selector>}[W]))

over the lookback at step W (= lookback / windows), whatever the number of classes. Stock vLLM has no class label;
its query is one ``label_replace(sum by (le) (...), "kvplan_key", "<key>", "", "")`` branch per Deployment (or
legacy per-class selector), joined with ``or``: still one query.

| source | metric (``_bucket``) | class label | layout | default selector |
|---|---|---|---|---|
| ``vllm`` | ``vllm:request_generation_tokens`` (or ``vllm_``) | none: one class per Deployment | ``vllm`` (1-2-5) | the group's ``metricsSelector``, else ``namespace`` + the Deployment's ``pod`` names |
| ``kvplan`` | ``kvplan_request_output_tokens`` | ``kvplan_class`` | ``kvplan`` (<= 10 % wide) | ``namespace`` + every group's ``pod`` names |
| ``llm-d`` | ``llm_d_epp_request_output_tokens`` | ``fairness_id`` (any: ``target_model_name``, ...) | ``llm-d`` (1, 8, 16, ..., 8192) | ``namespace`` |
| ``envoy-ai-gateway`` | ``gen_ai_client_token_usage`` + ``gen_ai_token_type="output"`` | ``kvplan_class`` (a header copied by ``metricsRequestHeaderAttributes``) | ``powers-of-4`` | none |
| ``custom`` | given | given | any | given (or none) |

The answer is checked and binned by :mod:`kvplan_operator.observe.history`; :func:`observe_histories` runs the queries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from ...spec import HistorySource, KVPlanSpec


@dataclass(frozen=True)
class SourceQuery:
    """One source's query for one re-plan: its PromQL, the label whose value is a key in the answer, each key's
    classes, and how to name the series in messages (``metric`` + ``selector``, and per key ``where``)."""

    source: str
    promql: str
    key_label: str
    keys: Mapping[str, tuple[str, ...]]
    metric: str
    selector: str
    where: Mapping[str, str]


class Source(Protocol):
    """A history source (module docstring)."""

    @property
    def name(self) -> str:
        """The source's name in ``spec.classes[].history.source``."""
        ...

    @property
    def layout(self) -> str:
        """The bucket layout its exporter uses (:data:`kvcore.history.series.SOURCE_LAYOUTS`; empty for ``custom``)."""
        ...

    def metrics(self, settings: HistorySource | None) -> tuple[str, ...]:
        """Histogram family names (without ``_bucket``), every spelling the exporter may use."""
        ...

    def class_label(self, settings: HistorySource | None) -> str | None:
        """The label naming the class, or None (stock vLLM)."""
        ...

    def default_selector(self, spec: KVPlanSpec, namespace: str) -> str:
        """Label matchers (no braces) used when ``spec.historySources`` gives none."""
        ...

    def query(self, spec: KVPlanSpec, namespace: str, classes: tuple[int, ...], window_s: float) -> SourceQuery:
        """The one range query for ``classes`` (indexes into ``spec.classes``)."""
        ...


def settings_of(spec: KVPlanSpec, name: str) -> HistorySource | None:
    """``spec.historySources`` entry for ``name``, if any."""
    return next((s for s in spec.history_sources if s.name == name), None)


def matcher(metrics: tuple[str, ...], *parts: str) -> str:
    """``{__name__=~"a_bucket|b_bucket", <parts>}`` (empty parts dropped)."""
    names = "|".join(f"{m}_bucket" for m in metrics)
    return "{" + ", ".join([f'__name__=~"{names}"'] + [p.strip() for p in parts if p and p.strip()]) + "}"


def series_text(metrics: tuple[str, ...], selector: str) -> str:
    """How messages name the series: ``kvplan_request_output_tokens_bucket{namespace="demo"}``."""
    return " or ".join(f"{m}_bucket" for m in metrics) + "{" + selector.strip() + "}"


def registry() -> dict[str, Source]:
    """Every source by name (exactly ``kvcore.catalogue.HISTORY_SOURCES``)."""
    from .labelled import CUSTOM, ENVOY, KVPLAN, LLMD
    from .vllm import VLLM

    return {s.name: s for s in (VLLM, KVPLAN, LLMD, ENVOY, CUSTOM)}


def plan_queries(spec: KVPlanSpec, namespace: str, window_s: float) -> list[SourceQuery]:
    """One :class:`SourceQuery` per source that some class names, in the order of first use."""
    used: dict[str, list[int]] = {}
    for i, c in enumerate(spec.classes):
        used.setdefault(c.history.source, []).append(i)
    sources = registry()
    return [sources[name].query(spec, namespace, tuple(idx), window_s) for name, idx in used.items()]


from .observe import observe_histories  # noqa: E402  (re-exported; it imports the names above)

__all__ = ["Source", "SourceQuery", "matcher", "observe_histories", "plan_queries", "registry", "series_text",
           "settings_of"]
