"""Plan calibration, the realised side: per class, preemptions per finished request over the re-plan window W, in
one instant query; the realised overflow share comes from the history query's newest window (no query of its own:
:attr:`~kvplan_operator.observe.history.ClassObservation.newest`), the KV-cache usage from the capacity query.

Per class, by its history source:

- ``kvplan`` (kvplan's vLLM stat logger): ``kvplan_request_preemptions_total`` and ``kvplan_requests_total`` by the
  source's class label (``kvplan_class``), with the source's selector (``spec.historySources`` or its default,
  exactly the history query's: :meth:`~kvplan_operator.observe.sources.labelled.LabelledSource.default_selector`);
- ``vllm`` (stock vLLM, one class per Deployment): the group's ``vllm:num_preemptions_total`` and
  ``vllm:request_success_total`` (the group's selector, as its history query), for a group that is the history of
  exactly one class (otherwise its preemptions cannot be told apart: ``NotPerClass``);
- other sources (llm-d, Envoy AI Gateway, custom): no per-class preemption series (``NoClassSeries``); their
  overflow share is still compared.

    label_replace(sum by (kvplan_class) (increase({__name__="kvplan_request_preemptions_total", <sel>}[W])),
                  "kvplan_series", "preemptions", "", "")
    or label_replace(sum by (kvplan_class) (increase({__name__="kvplan_requests_total", <sel>}[W])), ...)
    or label_replace(label_replace(sum(increase({__name__=~"vllm:num_preemptions_total|...", <group sel>}[W])),
                  "kvplan_key", "group/<g>", "", ""), "kvplan_series", "preemptions", "", "")
    or ... (requests, the next group)

Nothing here fails the reconcile: :func:`observe_calibration` turns every Prometheus error into
:attr:`RealisedCalibration.reason` (the error's own reason, e.g. ``PrometheusUnavailable``), and a class whose
numbers are missing, NaN or negative gets a reason of its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvcore import KVPLAN_CLASS_LABEL, VLLM_PREEMPTIONS

from ..prom import PromApi, PromError
from ..prom.instant import instant_samples
from ..spec import KVPlanSpec
from .history import KEY_LABEL
from .sources import settings_of
from .sources.capacity import SERIES_LABEL
from .sources.labelled import KVPLAN
from .sources.vllm import group_selector

KVPLAN_PREEMPTIONS_TOTAL = "kvplan_request_preemptions_total"
KVPLAN_REQUESTS_TOTAL = "kvplan_requests_total"
#: vLLM's finished-request counter (label ``finished_reason``), summed.
VLLM_REQUEST_SUCCESS = "vllm:request_success_total"
#: Most series the calibration query may return (the CRD's 256 classes x 2, and 64 groups x 2, with room).
MAX_SERIES = 4096

# Reasons (status.calibration.reason and per class).
NO_CLASS_SERIES = "NoClassSeries"
NOT_PER_CLASS = "NotPerClass"
NO_REALISED = "NoRealisedData"
NOT_A_NUMBER = "NotANumber"
NO_QUERY = "NoCalibrationQuery"


@dataclass(frozen=True)
class RealisedClass:
    """One class over the window: preemptions and finished requests (None: unknown, with ``reason``)."""

    preemptions: float | None = None
    requests: float | None = None
    reason: str = ""

    @property
    def per_request(self) -> float | None:
        if self.preemptions is None or self.requests is None or self.requests <= 0:
            return None
        return self.preemptions / self.requests


@dataclass(frozen=True)
class RealisedCalibration:
    """The realised side of one reconcile: per class, the window W (seconds), and why nothing could be read
    (``reason``, ``message``; empty when the query answered)."""

    window_s: float
    classes: Mapping[str, RealisedClass] = field(default_factory=dict)
    reason: str = ""
    message: str = ""


def _names(metric: str) -> str:
    return f"{metric}|{metric.replace(':', '_')}"


def _keys(spec: KVPlanSpec) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(kvplan class value -> class, group key -> class, class -> reason it has no preemption series)."""
    labelled: dict[str, str] = {}
    per_group: dict[str, list[str]] = {}
    none: dict[str, str] = {}
    for c in spec.classes:
        src = c.history.source
        if src == "kvplan":
            labelled[c.history.class_value or c.name] = c.name
        elif src == "vllm" and c.history.selector is None:
            g = c.history.group or spec.groups[0].name
            per_group.setdefault(g, []).append(c.name)
        else:
            none[c.name] = NO_CLASS_SERIES
    groups: dict[str, str] = {}
    for g, names in per_group.items():
        if len(names) == 1:
            groups[g] = names[0]
        else:
            none.update({n: NOT_PER_CLASS for n in names})
    return labelled, groups, none


def calibration_query(spec: KVPlanSpec, namespace: str, window_s: float) -> str | None:
    """The one instant query (module docstring), or None when no class has per-class preemption series."""
    labelled, groups, _ = _keys(spec)
    w = f"[{int(window_s)}s]"
    branches = []
    if labelled:
        settings = settings_of(spec, "kvplan")
        label = KVPLAN.class_label(settings) or KVPLAN_CLASS_LABEL
        sel = settings.selector if settings is not None and settings.selector is not None else \
            KVPLAN.default_selector(spec, namespace)
        extra = (", " + sel.strip()) if sel.strip() else ""
        for series, metric in (("preemptions", KVPLAN_PREEMPTIONS_TOTAL), ("requests", KVPLAN_REQUESTS_TOTAL)):
            branches.append(f'label_replace(sum by ({label}) (increase({{__name__="{metric}"{extra}}}{w})), '
                            f'"{SERIES_LABEL}", "{series}", "", "")')
    by_name = {g.name: g for g in spec.groups}
    for g in groups:
        sel = group_selector(by_name[g], namespace)
        for series, metric in (("preemptions", VLLM_PREEMPTIONS + "_total"), ("requests", VLLM_REQUEST_SUCCESS)):
            branches.append(f'label_replace(label_replace(sum(increase({{__name__=~"{_names(metric)}", {sel}}}{w})), '
                            f'"{KEY_LABEL}", "group/{g}", "", ""), "{SERIES_LABEL}", "{series}", "", "")')
    return " or ".join(branches) if branches else None


def _value(point: Any) -> float | None:
    try:
        v = float(point)
    except (TypeError, ValueError):
        return None
    return v


def realised_classes(data: Mapping[str, Any], spec: KVPlanSpec, *, at: float | None = None
                     ) -> dict[str, RealisedClass]:
    """The calibration query's answer -> per class :class:`RealisedClass` (every class present). Raises
    :class:`PromError` (``PrometheusBadResponse``, ``TooManySeries``, ``StaleSamples``) on an answer that is not
    one; a NaN or negative count is the class's ``NotANumber``, a missing one its ``NoRealisedData``."""
    labelled, groups, none = _keys(spec)
    label = KVPLAN.class_label(settings_of(spec, "kvplan")) or KVPLAN_CLASS_LABEL
    got: dict[str, dict[str, float]] = {}
    for labels, raw in instant_samples(data, "calibration query", max_series=MAX_SERIES, at=at):
        key = str(labels.get(KEY_LABEL, ""))
        name = groups.get(key.removeprefix("group/")) if key.startswith("group/") else labelled.get(
            str(labels.get(label, "")))
        series = str(labels.get(SERIES_LABEL, ""))
        value = _value(raw)
        if name is None or series not in ("preemptions", "requests"):
            continue  # another team's class on a shared label
        got.setdefault(name, {})[series] = value if value is not None else float("nan")
    out: dict[str, RealisedClass] = {}
    for c in spec.classes:
        if c.name in none:
            out[c.name] = RealisedClass(reason=none[c.name])
            continue
        v = got.get(c.name, {})
        p, r = v.get("preemptions"), v.get("requests")
        if p is None or r is None:
            out[c.name] = RealisedClass(p, r, NO_REALISED)
        elif not (math.isfinite(p) and math.isfinite(r)) or p < 0 or r < 0:
            out[c.name] = RealisedClass(None, None, NOT_A_NUMBER)
        else:
            out[c.name] = RealisedClass(p, r)
    return out


def observe_calibration(prom: PromApi, spec: KVPlanSpec, namespace: str, *, now: float, window_s: float
                        ) -> RealisedCalibration:
    """Ask the calibration query once; never raises (a failed query is the result's ``reason``)."""
    promql = calibration_query(spec, namespace, window_s)
    if promql is None:
        return RealisedCalibration(window_s, {c.name: RealisedClass(reason=_keys(spec)[2].get(c.name, NO_CLASS_SERIES))
                                              for c in spec.classes}, NO_QUERY,
                                   "no class has per-class preemption series (history sources kvplan or vllm)")
    try:
        return RealisedCalibration(window_s, realised_classes(prom.query(promql, at=now), spec, at=now))
    except PromError as exc:
        return RealisedCalibration(window_s, {}, exc.reason, str(exc))
    except Exception as exc:  # a bug must not fail the plan; the type is enough to find it
        return RealisedCalibration(window_s, {}, "CalibrationError", f"{type(exc).__name__} reading the calibration "
                                   "query")
