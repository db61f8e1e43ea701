"""Run the history sources for one reconcile: one range query per source, every class's observation out.

For each source some class names (:func:`kvplan_operator.observe.sources.plan_queries`): one range query from
``now - (windows - 1) * W`` to ``now`` at step ``W = max(60 s, lookback / windows)``; the answer is checked and
regrouped per key (:func:`kvplan_operator.observe.history.windows_by_key`), every class's windows are binned by the one
adapter (:func:`kvplan_operator.observe.history.class_histories`), and its arrival rate is

- ``spec.classes[].arrivalRate`` when given;
- else ``arrivalRateQuery`` (one instant query per class that has one: the only queries beyond one per source);
- else the source's own count: the newest window's ``+Inf`` bucket over ``W`` (:func:`kvplan_operator.observe.history.newest_rate`).

``MetricAbsent`` (naming the metric and selector) when a source's query matches no series at all, or none for a
class (naming the class label value, or the group); every other bad answer raises the reasons of
:mod:`kvplan_operator.observe.history`. The absence of a source labelled by kvplan's own classification file
(:data:`FILE_LABELLED`: the stat logger's ``kvplan``) is raised last, after every other source answered, as
:class:`ClassesAbsent` naming its classes: the one failure the operator's bootstrap
(:mod:`kvplan_operator.decide.bootstrap`) can end by mounting that file.
"""

from __future__ import annotations

from ...prom.answer_time import check_range_times
from kvcore import History

from ... import budget
from ..history import ClassObservation, class_histories, newest_rate, newest_window, rate_value, windows_by_key
from ...prom import PromApi, PromError
from ...spec import KVPlanSpec
from ... import conditions as C
from . import SourceQuery, plan_queries


#: Sources whose class label comes from the classification file kvplan mounts into the serving pods: without the
#: file every request is the default class, so their absence may be kvplan's to end.
FILE_LABELLED = frozenset({"kvplan"})


class ClassesAbsent(PromError):
    """``MetricAbsent`` of a :data:`FILE_LABELLED` source, raised once every other source answered: ``classes``
    are the classes it left without a series; ``observed``: the observations of every other source's classes."""

    def __init__(self, message: str, classes: tuple[str, ...], observed: dict[str, ClassObservation]) -> None:
        super().__init__(C.METRIC_ABSENT, message)
        self.classes = classes
        self.observed = observed


#: Most samples the histories of one reconcile may hold (:mod:`kvplan_operator.budget`).
MAX_HISTORY_SAMPLES = budget.MAX_HISTORY_SAMPLES


def history_samples(history: History | None) -> int:
    """Samples a class's history holds (0 for none)."""
    return 0 if history is None else sum(len(w.values) for w in history.windows)


def window_seconds(spec: KVPlanSpec) -> float:
    """W, seconds: one history window (lookback / windows, at least a minute)."""
    return max(60.0, spec.prometheus.lookback_seconds / spec.prometheus.windows)


def _absent(q: SourceQuery, key: str | None, found: int) -> PromError:
    if key is None:
        return PromError(C.METRIC_ABSENT, f"source {q.source}: no series {q.metric} matches {q.selector or '(no selector)'} "
                         "in the lookback; is the exporter installed and scraped, and does the selector match its "
                         "labels?")
    if q.source == "vllm":
        return PromError(C.METRIC_ABSENT, f"source vllm: no series {q.metric} for {q.where[key]} in the lookback; "
                         f"selector {q.selector}")
    return PromError(C.METRIC_ABSENT, f"source {q.source}: no series {q.metric} for {q.where[key]} in the lookback "
                     f"(the query found {found} other value(s) of {q.key_label}); selector "
                     f"{q.selector or '(none)'}")


def observe_histories(prom: PromApi, spec: KVPlanSpec, namespace: str, *, now: float
                      ) -> dict[str, ClassObservation]:
    """Every class's observation (module docstring). Raises :class:`~kvplan_operator.prom.PromError`."""
    window_s = window_seconds(spec)
    windows = spec.prometheus.windows
    index = {c.name: i for i, c in enumerate(spec.classes)}
    out: dict[str, ClassObservation] = {}
    samples = 0
    deferred: list[tuple[PromError, tuple[str, ...]]] = []
    for q in plan_queries(spec, namespace, window_s):
        start = now - window_s * (windows - 1)
        data = prom.query_range(q.promql, start=start, end=now, step=window_s)
        by_key = windows_by_key(data, q.key_label, what=f"source {q.source} ({q.metric})", describe=q.where,
                                keep=set(q.keys), max_windows=windows)
        del data  # the compact windows are all that is kept of the answer
        check_range_times((ts for kw in by_key.values() for ts in kw.times), start=start, end=now, step=window_s,
                          what=f"source {q.source} ({q.metric})")
        none = not any(by_key.values())
        missing = list(q.keys) if none else [k for k in q.keys if k not in by_key]
        if none or missing:
            absent = _absent(q, None, 0) if none else _absent(q, missing[0], len(by_key))
            if q.source not in FILE_LABELLED:
                raise absent
            deferred.append((absent, tuple(n for k in missing for n in q.keys[k])))
            continue
        binned = {}
        for key, names in q.keys.items():  # one class's windows as dicts at a time: memory of one class
            for name in names:
                binned.update(class_histories({name: [dict(zip(b, c)) for _, b, c in by_key[key]]}, max_model_len={
                    name: float(spec.classes[index[name]].max_output_tokens)}))
                samples += history_samples(binned[name].history)
                if samples > MAX_HISTORY_SAMPLES:  # stop before holding what the planner would refuse
                    raise PromError(C.TOO_MANY_SERIES, f"source {q.source}: the histories up to class {name} hold "
                                    f"{samples:,} samples, more than the {MAX_HISTORY_SAMPLES:,} the planner can "
                                    "plan within its memory limit; use fewer windows, buckets or classes")
        for key, names in q.keys.items():
            for name in names:
                c, i = spec.classes[index[name]], index[name]
                what = f"class {name} (spec.classes[{i}])"
                if c.arrival_rate is not None:
                    rate, rate_from = float(c.arrival_rate), "spec"
                elif c.arrival_rate_query is not None:
                    rate = rate_value(prom.query(c.arrival_rate_query, at=now),
                                      what=f"class {name} spec.classes[{i}].arrivalRateQuery", at=now)
                    rate_from = "query"
                else:
                    rate = newest_rate(by_key[key], end=now, window_s=window_s,
                                       what=f"{what}: source {q.source}, {q.where[key]}")
                    rate_from = "source"
                b = binned[name]
                out[name] = ClassObservation(name, b.history, b.requests, b.windows, rate, q.source, rate_from,
                                             newest_window(by_key[key], end=now))
    if deferred:
        raise ClassesAbsent(str(deferred[0][0]), tuple(n for _, names in deferred for n in names), out)
    return out
