"""Fault injection over the operator's Prometheus calls (issue 12; the Kubernetes and kill -9 matrices are in
test_op_faults.py, whose world, baseline and checks this uses): the real HTTP client against a scripted Prometheus
on 127.0.0.1 that refuses the connection, never answers, answers 4xx/5xx or a redirect to a metadata address, a
PromQL error body, malformed JSON, the wrong result type, an empty result, NaN / +Inf / 1e308 counts, reversed
buckets, or an empty/NaN/1e308 arrival-rate query.

For every scenario: no exception leaves ``reconcile``; the expected named reason is in the outcome and in status;
nothing but status is written; Degraded=True while Ready stays True (the last good plan in force); no response body
reaches status or events; no two objects disagree; the disruption budget holds; and once the fault is gone the
operator converges. Prints its counts (``pytest -s``)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from kvplan_operator import conditions as C
from op_fakes import Script, scripted_prometheus  # type: ignore[import-not-found]
from operator_checks import detail_document  # type: ignore[import-not-found]
from test_op_faults import (BUDGET, T0, World, baseline, busy, check,  # type: ignore[import-not-found]
                            recover, report, spec)
from test_op_faults import raw_client_must_not_be_called  # type: ignore[import-not-found]  # noqa: F401 - autouse
from test_op_history import tagged  # type: ignore[import-not-found]


# --- Prometheus ------------------------------------------------------------------------------------------------
def prom_answer(result_type: str, result: Any, status: int = 200) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/json"}, json.dumps(
        {"status": "success", "data": {"resultType": result_type, "result": result}}).encode()


def histogram(counts: dict[str, str]) -> list:
    return [{"metric": {"le": le}, "values": [[T0 - 3600, v], [T0, v]]} for le, v in counts.items()]


RANGE, INSTANT = "/api/v1/query_range", "/api/v1/query"
GOOD_RATE = prom_answer("vector", [{"metric": {}, "value": [T0, "2.0"]}])
PROM_FAULTS = {
    # name: (path, answer or "hang", expected reason)
    "connection-refused": (None, None, C.PROMETHEUS_UNAVAILABLE),
    "timeout": (RANGE, "hang", C.PROMETHEUS_UNAVAILABLE),
    "http-400": (RANGE, (400, {}, b"bad"), C.PROMETHEUS_REJECTED),
    "http-401": (RANGE, (401, {}, b"no"), C.PROMETHEUS_REJECTED),
    "http-403": (INSTANT, (403, {}, b"no"), C.PROMETHEUS_REJECTED),
    "http-404": (RANGE, (404, {}, b"no"), C.PROMETHEUS_REJECTED),
    "http-500": (RANGE, (500, {}, b"boom"), C.PROMETHEUS_UNAVAILABLE),
    "http-503": (INSTANT, (503, {}, b"busy"), C.PROMETHEUS_UNAVAILABLE),
    "redirect": (RANGE, (302, {"Location": "http://169.254.169.254/"}, b""), C.PROMETHEUS_REJECTED),
    "promql-error": (RANGE, (400, {}, json.dumps({"status": "error", "errorType": "bad_data",
                                                   "error": "parse error"}).encode()), C.PROMETHEUS_QUERY_ERROR),
    "execution-error": (INSTANT, (422, {}, json.dumps({"status": "error", "errorType": "execution",
                                                        "error": "x"}).encode()), C.PROMETHEUS_QUERY_ERROR),
    "malformed-json": (RANGE, (200, {}, b'{"status": "success", "data": {'), C.PROMETHEUS_BAD_RESPONSE),
    "wrong-result-type": (RANGE, prom_answer("vector", []), C.PROMETHEUS_BAD_RESPONSE),
    "empty-histogram": (RANGE, prom_answer("matrix", []), C.METRIC_ABSENT),
    "idle-histogram": (RANGE, prom_answer("matrix", [s for k in ("class/chat", "class/code-gen") for s in tagged(
        histogram({"10": "0", "+Inf": "0"}), "kvplan_key", k)]), C.TOO_FEW_SAMPLES),
    "inf-below-finite": (RANGE, prom_answer("matrix", histogram({"10": "1", "100": "90", "+Inf": "40"})),
                         C.INVALID_HISTOGRAM),
    "request-id-label": (RANGE, prom_answer("matrix", [
        {"metric": {"le": "+Inf", "kvplan_key": f"r{i}"}, "values": [[T0, "1"]]} for i in range(1100)]),
        C.TOO_MANY_SERIES),
    "nan-counts": (RANGE, prom_answer("matrix", histogram({"10": "1", "100": "NaN", "+Inf": "500"})),
                   C.INVALID_HISTOGRAM),
    "inf-counts": (RANGE, prom_answer("matrix", histogram({"10": "1", "100": "2", "+Inf": "+Inf"})),
                   C.INVALID_HISTOGRAM),
    "1e308-counts": (RANGE, prom_answer("matrix", histogram({"10": "1", "100": "2", "+Inf": "1e308"})),
                     C.INVALID_HISTOGRAM),
    "reversed-buckets": (RANGE, prom_answer("matrix", histogram({"10": "500", "100": "200", "+Inf": "60"})),
                         C.INVALID_HISTOGRAM),
    "empty-rate": (INSTANT, prom_answer("vector", []), C.NO_RATE_DATA),
    "nan-rate": (INSTANT, prom_answer("scalar", [T0, "NaN"]), C.INVALID_RATE),
    "1e308-rate": (INSTANT, prom_answer("vector", [{"metric": {}, "value": [T0, "1e308"]}]), C.INVALID_RATE),
}


@pytest.fixture
def prometheus_script() -> Iterator[tuple[Script, str]]:
    with scripted_prometheus() as served:
        yield served


@pytest.mark.slow
def test_prometheus_fault_matrix(prometheus_script):
    script, url = prometheus_script
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    good_answers = {RANGE: prom_answer("matrix", [s for k in ("class/chat", "class/code-gen")
                                                  for s in tagged(busy(), "kvplan_key", k)]), INSTANT: GOOD_RATE}
    failures: list[str] = []
    counts: Counter = Counter()
    for name, (path, answer, reason) in PROM_FAULTS.items():
        script.answers, script.hang = dict(good_answers), set()
        world = World(url, real_client=True)
        good = baseline(world)
        assert detail_document(world.kube.configmaps.get)["classes"]["chat"]["arrivalRate"] == 2.0
        if path is None:
            world.spec = spec(dead)
        elif answer == "hang":
            script.hang.add(path)
        else:
            script.answers[path] = answer
        counts["scenarios"] += 1
        try:
            out = world.reconcile(T0 + 60)
        except Exception as exc:
            counts["exceptions"] += 1
            failures.append(f"{name}: {type(exc).__name__} escaped reconcile: {exc}")
            continue
        counts[f"reason:{out.reason}"] += 1
        check(world, out, good, expect=reason, label=name, failures=failures)
        counts["disagreements"] += bool(world.disagreements())
        if [w for w in world.kube.writes if w != "status"]:
            failures.append(f"{name}: wrote {world.kube.writes} on a Prometheus failure")
        degraded = next(c for c in world.kube.status["conditions"] if c["type"] == "Degraded")
        ready = next(c for c in world.kube.status["conditions"] if c["type"] == "Ready")
        if (degraded["status"], ready["status"]) != ("True", "True"):
            failures.append(f"{name}: Degraded={degraded['status']} Ready={ready['status']} (last good plan in force)")
        text = json.dumps(world.kube.status) + json.dumps(world.kube.events)
        if "parse error" in text or "boom" in text:
            failures.append(f"{name}: a response body reached status or events")
        script.release.set()
        script.release.clear()
        script.answers, script.hang = dict(good_answers), set()
        world.spec = spec(url)
        recover(world, T0 + 60, failures, name)
        if world.restarts > BUDGET:
            counts["budget"] += 1
            failures.append(f"{name}: {world.restarts} restarts against a budget of {BUDGET}")
    report("prometheus faults", counts, failures)
    assert counts["scenarios"] == len(PROM_FAULTS)
    assert failures == [], "\n".join(failures)
