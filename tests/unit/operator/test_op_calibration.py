"""Plan calibration in the operator: the realised query (scoped like the history queries, one per reconcile), its
answers and every bad one as a named reason (never an exception out of observe), the pure comparison of the plan in
force, ``status.calibration`` (fixed size at 256 classes), the detail document's per-class entries, the metrics
and their removal, and two reconciles end to end."""

from __future__ import annotations

import copy
import json
import math

import pytest

from kvcore import CalibrationVerdict
from kvplan_operator.observe.calibration import (
    NO_CLASS_SERIES, NO_QUERY, NO_REALISED, NOT_A_NUMBER, NOT_PER_CLASS, RealisedCalibration, RealisedClass,
    calibration_query, observe_calibration, realised_classes,
)
from kvplan_operator.observe.sources import plan_queries
from kvplan_operator.decide.calibration import Calibration
from kvplan_operator.prom import PromError, PrometheusUnavailable
from kvplan_operator.record.metrics import Metrics
from kvplan_operator.record.status import calibration_body, calibration_detail
from kvplan_operator.spec import parse_spec

NOW = 1700007200.0
GROUPS = [{"name": "a", "deployment": "vllm-a", "model": "llama-8b", "nodePool": {"gpuCount": 8},
           "layouts": [{"tp": 1}]},
          {"name": "b", "deployment": "vllm-b", "model": "llama-8b", "nodePool": {"gpuCount": 8},
           "layouts": [{"tp": 1}]}]


def _spec(classes: list[dict]) -> object:
    return parse_spec({"groups": copy.deepcopy(GROUPS), "classes": classes, "prometheus": {"url": "http://prom:9090"}})


def _cls(name: str, history: dict) -> dict:
    return {"name": name, "inputTokens": 200, "maxOutputTokens": 1024, "arrivalRate": 1.0, "history": history,
            "costs": {"preemption": 10, "waste": 1}}


KVPLAN_SPEC = [_cls("chat", {"source": "kvplan"}), _cls("batch", {"source": "kvplan", "classValue": "bulk"})]


def _vector(*samples: tuple[dict, str], at: float = NOW) -> dict:
    return {"resultType": "vector", "result": [{"metric": m, "value": [at, v]} for m, v in samples]}


def test_kvplan_query_uses_the_history_querys_selector_and_class_values() -> None:
    spec = _spec(KVPLAN_SPEC)
    q = calibration_query(spec, "demo", 300.0)
    assert q is not None
    history = plan_queries(spec, "demo", 300.0)[0]
    assert history.selector in q  # the same scope as the history query
    assert 'kvplan_request_preemptions_total' in q and 'kvplan_requests_total' in q
    assert q.count("[300s]") == 2 and "sum by (kvplan_class)" in q


@pytest.mark.parametrize("classes,expect", [
    pytest.param([_cls("solo", {"source": "vllm", "group": "a"})], {"solo": ""}, id="vllm-one-class-per-group"),
    pytest.param([_cls("x", {"source": "vllm", "group": "a"}), _cls("y", {"source": "vllm", "group": "a"})],
                 {"x": NOT_PER_CLASS, "y": NOT_PER_CLASS}, id="vllm-shared-group"),
    pytest.param([_cls("t", {"source": "llm-d"})], {"t": NO_CLASS_SERIES}, id="llm-d-has-no-preemptions"),
])
def test_per_source_preemption_series(classes: list[dict], expect: dict[str, str]) -> None:
    spec = _spec(classes)
    q = calibration_query(spec, "demo", 120.0)
    if all(expect.values()):
        assert q is None
        got = observe_calibration(_Prom({}), spec, "demo", now=NOW, window_s=120.0)
        assert got.reason == NO_QUERY
        assert {k: v.reason for k, v in got.classes.items()} == expect
        return
    assert q is not None and 'vllm:num_preemptions_total' in q and 'pod=~"vllm-a-[a-z0-9]+-[a-z0-9]+"' in q
    data = _vector(({"kvplan_key": "group/a", "kvplan_series": "preemptions"}, "3"),
                   ({"kvplan_key": "group/a", "kvplan_series": "requests"}, "60"))
    got = realised_classes(data, spec, at=NOW)
    assert got["solo"].per_request == pytest.approx(0.05)


def test_answers_per_class_and_bad_values_become_reasons() -> None:
    spec = _spec(KVPLAN_SPEC + [_cls("gone", {"source": "kvplan"})])
    data = _vector(({"kvplan_class": "chat", "kvplan_series": "preemptions"}, "12"),
                   ({"kvplan_class": "chat", "kvplan_series": "requests"}, "400"),
                   ({"kvplan_class": "bulk", "kvplan_series": "preemptions"}, "NaN"),
                   ({"kvplan_class": "bulk", "kvplan_series": "requests"}, "10"),
                   ({"kvplan_class": "other-team", "kvplan_series": "requests"}, "7"))
    got = realised_classes(data, spec, at=NOW)
    assert got["chat"] == RealisedClass(12.0, 400.0) and got["chat"].per_request == pytest.approx(0.03)
    assert got["batch"].reason == NOT_A_NUMBER
    assert got["gone"].reason == NO_REALISED
    assert RealisedClass(0.0, 0.0).per_request is None  # zero requests: unknown, not 0


class _Prom:
    def __init__(self, answer: dict | Exception) -> None:
        self.answer, self.calls = answer, 0

    def query(self, promql: str, *, at: float | None = None) -> dict:
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def query_range(self, *a: object, **k: object) -> dict:
        raise AssertionError("calibration asks no range query")


@pytest.mark.parametrize("answer,reason", [
    pytest.param(PrometheusUnavailable("down"), "PrometheusUnavailable", id="unavailable"),
    pytest.param({"resultType": "matrix", "result": []}, "PrometheusBadResponse", id="wrong-type"),
    pytest.param({"resultType": "vector", "result": [{"metric": {}}]}, "PrometheusBadResponse", id="no-value"),
    pytest.param(_vector(({"kvplan_class": "chat"}, "1"), at=NOW - 3600), "StaleSamples", id="stale"),
    pytest.param(RuntimeError("bug"), "CalibrationError", id="bug"),
])
def test_a_failed_query_is_a_reason_never_an_exception(answer: object, reason: str) -> None:
    prom = _Prom(answer)  # type: ignore[arg-type]
    got = observe_calibration(prom, _spec(KVPLAN_SPEC), "demo", now=NOW, window_s=300.0)
    assert (got.reason, prom.calls, dict(got.classes)) == (reason, 1, {})
    assert got.message


def _cal(n: int, *, drifting: int = 0) -> Calibration:
    verdicts = {f"class-{i:03d}-with-a-long-name": {
        "preemptions": CalibrationVerdict(0.1, 0.5 if i < drifting else 0.1, 4.0 if i < drifting else 1.0,
                                          i < drifting),
        "overflow": CalibrationVerdict(0.02, 0.02, 1.0, False)} for i in range(n)}
    return Calibration(300.0, verdicts, {k: 512.0 for k in verdicts}, {"a": 0.7}, 8000)


def test_status_summary_is_fixed_size_whatever_the_classes() -> None:
    small, big = calibration_body(_cal(1, drifting=1)), calibration_body(_cal(256, drifting=3))
    assert big is not None and small is not None
    assert (big["classes"], big["drifting"], big["worstQuantity"], big["worstRatio"]) == (256, 3, "preemptions", 4.0)
    assert big["worstClass"] == "class-000-with-a-long-name" and big["windowSeconds"] == 300
    assert len(json.dumps(big)) < 400 and abs(len(json.dumps(big)) - len(json.dumps(small))) < 8
    assert calibration_body(Calibration(300.0, reason="NoPlanInForce", message="x" * 5000))["message"].endswith(
        "(truncated)")


def test_detail_holds_every_class() -> None:
    d = calibration_detail(_cal(3, drifting=1))
    assert d is not None and set(d["classes"]) == {f"class-{i:03d}-with-a-long-name" for i in range(3)}
    one = d["classes"]["class-000-with-a-long-name"]
    assert one["preemptions"] == {"predicted": 0.1, "realised": 0.5, "ratio": 4.0, "drifting": True, "reason": ""}
    assert one["thresholdTokens"] == 512 and d["groups"] == {"a": {"kvCacheUsage": 0.7}}


def _series(m: Metrics, metric: str) -> dict[tuple[str, ...], float]:
    out = {}
    for fam in m.registry.collect():
        for s in fam.samples:
            if s.name == metric:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_metrics_set_and_remove_stale_series() -> None:
    m = Metrics()
    cal = _cal(2, drifting=1)
    m.calibration("ns", "fleet", cal.verdicts)
    ratios = _series(m, "kvplan_calibration_ratio")
    assert len(ratios) == 4
    assert _series(m, "kvplan_calibration_drifting") == {(("name", "fleet"), ("namespace", "ns")): 1.0}
    first = next(iter(cal.verdicts))
    m.calibration("ns", "fleet", {first: {"preemptions": CalibrationVerdict(None, 0.1, reason="NoPrediction"),
                                          "overflow": CalibrationVerdict(0.1, 0.1, 1.0, False)}})
    assert len(_series(m, "kvplan_calibration_ratio")) == 1
    assert _series(m, "kvplan_calibration_drifting") == {(("name", "fleet"), ("namespace", "ns")): 0.0}
    m.calibration("ns", "fleet", {})  # nothing compared: the count is unknown, not 0
    assert _series(m, "kvplan_calibration_ratio") == {} and _series(m, "kvplan_calibration_drifting") == {}
    m.calibration("ns", "fleet", cal.verdicts)
    m.forget("ns", "fleet")
    assert _series(m, "kvplan_calibration_ratio") == {} and _series(m, "kvplan_calibration_drifting") == {}


def test_two_reconciles_record_calibration_in_status_detail_and_metrics() -> None:
    from op_fakes import FakeKube, dep, kvplan  # type: ignore[import-not-found]
    from op_reconcile_world import deps  # type: ignore[import-not-found]
    from operator_checks import detail_document  # type: ignore[import-not-found]
    from op_targets_world import SPEC  # type: ignore[import-not-found]
    from kvplan_operator.reconcile import reconcile

    from dataclasses import replace

    kube = FakeKube({"vllm-big": dep("vllm-big"), "vllm-small": dep("vllm-small")})
    d = replace(deps(kube), metrics=Metrics())
    first = reconcile(kvplan(copy.deepcopy(SPEC), kube), d)
    assert first.ok, first.message
    assert kube.status["calibration"]["reason"] == "NoPlanInForce"
    second = reconcile(kvplan(copy.deepcopy(SPEC), kube), d)
    assert second.ok, second.message
    cal = kube.status["calibration"]
    # the world's classes read stock vLLM through per-class selectors: no per-class preemption series
    assert cal["reason"] in ("", "NothingCompared") and cal["windowSeconds"] > 0
    doc = detail_document(kube.configmaps.get)
    assert doc is not None and set(doc["calibration"]["classes"]) == {"chat", "code-gen"}
    assert doc["calibration"]["classes"]["chat"]["preemptions"]["reason"] == NO_CLASS_SERIES
    assert math.isfinite(doc["calibration"]["work"])
