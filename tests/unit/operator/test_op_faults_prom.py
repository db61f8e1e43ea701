"""Fault injection over the operator's Prometheus calls (issue 12; the Kubernetes and kill -9 matrices are in
test_op_faults.py, whose world, baseline and checks this uses): the real HTTP client against a scripted Prometheus
on 127.0.0.1 that refuses the connection, never answers, answers 4xx/5xx or a redirect to a metadata address, a
PromQL error body, malformed JSON, the wrong result type, an empty result, NaN / +Inf / 1e308 counts, reversed
buckets, or an empty/NaN/1e308 arrival-rate query; and (issue 26) samples from other times than asked (two hours
older than the window, in the future, off the step, a stale instant sample), 429/503 with ``Retry-After`` (the
retry waits that long), answer text in every field a message could quote (a value, an ``le`` label, a foreign
class-label value, a result type), and a bearer-token Secret with a trailing newline or a character no header
can carry.

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
from op_fakes import SECRET_BODY, Script, scripted_prometheus  # type: ignore[import-not-found]
from operator_checks import detail_document  # type: ignore[import-not-found]
from op_faults_world import (BUDGET, T0, World, baseline, busy, check,  # type: ignore[import-not-found]
                            recover, report, spec)
from op_faults_world import raw_client_must_not_be_called  # type: ignore[import-not-found]  # noqa: F401 - autouse
from op_history_world import tagged  # type: ignore[import-not-found]


# --- Prometheus ------------------------------------------------------------------------------------------------
def prom_answer(result_type: str, result: Any, status: int = 200) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/json"}, json.dumps(
        {"status": "success", "data": {"resultType": result_type, "result": result}}).encode()


def histogram(counts: dict[str, str], shift: float = 0.0) -> list:
    return [{"metric": {"le": le}, "values": [[T0 - 3600 + shift, v], [T0 + shift, v]]} for le, v in counts.items()]


def shifted(series: list, by: float) -> list:
    return [{**s, "values": [[t + by, v] for t, v in s["values"]]} for s in series]


def keyed(series: list, *keys: str) -> list:
    return [s for k in (keys or ("class/chat", "class/code-gen")) for s in tagged(series, "kvplan_key", k)]


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
    # issue 26: samples of other times than asked
    "samples-2h-older": (RANGE, prom_answer("matrix", keyed(shifted(busy(), -7200))),
                         C.STALE_SAMPLES),
    "samples-3h-older": (RANGE, prom_answer("matrix", keyed(shifted(busy(), -10800))),
                         C.STALE_SAMPLES),
    "samples-in-the-future": (RANGE, prom_answer("matrix", keyed(shifted(busy(), 3600))),
                              C.STALE_SAMPLES),
    "samples-off-the-step": (RANGE, prom_answer("matrix", keyed(shifted(busy(), -1800))),
                             C.STALE_SAMPLES),
    "stale-rate-sample": (INSTANT, prom_answer("vector", [{"metric": {}, "value": [T0 - 7200, "2.0"]}]),
                          C.STALE_SAMPLES),
    "stale-rate-scalar": (INSTANT, prom_answer("scalar", [T0 - 7200, "2.0"]), C.STALE_SAMPLES),
    # issue 26: Retry-After (WAITS below says how long the retry must wait)
    "http-429-retry-after": (RANGE, (429, {"Retry-After": "30"}, b"slow down"), C.PROMETHEUS_REJECTED),
    "http-503-retry-after-date": (INSTANT, (503, {"Retry-After": "Tue, 14 Nov 2023 22:14:20 GMT",
                                                  "Date": "Tue, 14 Nov 2023 22:13:20 GMT"}, b"busy"),
                                  C.PROMETHEUS_UNAVAILABLE),
    "http-429-retry-after-a-day": (RANGE, (429, {"Retry-After": "86400"}, b"no"), C.PROMETHEUS_REJECTED),
    # issue 26: no text of an answer in status or events, wherever in the answer it is
    "text-as-a-value": (RANGE, prom_answer("matrix", keyed(histogram({"10": SECRET_BODY, "+Inf": "5"}))),
                        C.PROMETHEUS_BAD_RESPONSE),
    "text-as-a-timestamp": (RANGE, prom_answer("matrix", keyed([{"metric": {"le": "+Inf"},
                                                                 "values": [[SECRET_BODY, "1"]]}])),
                            C.PROMETHEUS_BAD_RESPONSE),
    "text-as-le": (RANGE, prom_answer("matrix", keyed(histogram({SECRET_BODY: "1", "+Inf": "5"}))),
                   C.INVALID_HISTOGRAM),
    "number-spelt-oddly-as-le": (RANGE, prom_answer("matrix", keyed(histogram({"1_0": "9", "+Inf": "5"}))),
                                 C.INVALID_HISTOGRAM),
    "foreign-class-label-value": (RANGE, prom_answer("matrix", keyed(busy()) + keyed(
        histogram({"10": "NaN", "+Inf": "5"}), SECRET_BODY)), C.INVALID_HISTOGRAM),
    "text-as-result-type": (RANGE, prom_answer(SECRET_BODY, []), C.PROMETHEUS_BAD_RESPONSE),
    "text-as-rate": (INSTANT, prom_answer("scalar", [T0, SECRET_BODY]), C.PROMETHEUS_BAD_RESPONSE),
    "text-as-rate-result-type": (INSTANT, prom_answer(SECRET_BODY, [T0, "1"]), C.PROMETHEUS_BAD_RESPONSE),
}
#: name -> the least the retry must wait, s (the server's Retry-After; capped at Deps.backoff_max_s, 300 s)
WAITS = {"http-429-retry-after": 30.0, "http-503-retry-after-date": 60.0, "http-429-retry-after-a-day": 300.0}
#: Text of an answer that must never reach status or events (SECRET_BODY's start: a message that cut it to 20
#: characters leaked too).
LEAKS = ("parse error", "boom", SECRET_BODY[:11], "slow down", "busy", "1_0")


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
        if any(leak in text for leak in LEAKS):
            failures.append(f"{name}: text of the answer reached status or events")
        if name in WAITS and (out.retry_after is None or not WAITS[name] <= out.retry_after <= 300.0):
            failures.append(f"{name}: retried after {out.retry_after} s, the server asked for {WAITS[name]} s")
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


# --- the bearer token's Secret (issue 26, item 8) ----------------------------------------------------------------
#: name -> (the Secret's token value, the reason expected (None: planned) and the Authorization header sent, if any)
CREDENTIAL_FAULTS = {
    "trailing-newline": ("t0k3n\n", None, "Bearer t0k3n"),
    "trailing-crlf": ("t0k3n\r\n", None, "Bearer t0k3n"),
    "surrounding-whitespace": (" \tt0k3n \n\n", None, "Bearer t0k3n"),
    "newline-inside": ("t0k\n3n", C.PROMETHEUS_AUTH_REFUSED, None),
    "header-injection": ("t0k3n\r\nX-Evil: 1", C.PROMETHEUS_AUTH_REFUSED, None),
    "space-inside": ("t0k 3n", C.PROMETHEUS_AUTH_REFUSED, None),
    "nul": ("t0k3n\x00", C.PROMETHEUS_AUTH_REFUSED, None),
    "delete-char": ("t0k3n\x7f", C.PROMETHEUS_AUTH_REFUSED, None),
    "non-ascii": ("t\u00f6k3n", C.PROMETHEUS_AUTH_REFUSED, None),
    "not-utf8": ("t0k3n\udcff", C.PROMETHEUS_AUTH_REFUSED, None),
    "only-whitespace": ("\n", C.PROMETHEUS_AUTH_REFUSED, None),
}


@pytest.mark.slow
def test_bearer_token_secret_matrix(prometheus_script):
    script, url = prometheus_script
    good_answers = {RANGE: prom_answer("matrix", keyed(busy())), INSTANT: GOOD_RATE}
    failures: list[str] = []
    counts: Counter = Counter()
    for name, (token, reason, sent) in CREDENTIAL_FAULTS.items():
        script.answers, script.hang = dict(good_answers), set()
        world = World(url, real_client=True)
        good = baseline(world)
        world.kube.secrets[("prom-token", "token")] = token
        script.seen.clear()
        counts["scenarios"] += 1
        try:
            out = world.reconcile(T0 + 60)
        except Exception as exc:
            counts["exceptions"] += 1
            failures.append(f"{name}: {type(exc).__name__} escaped reconcile: {exc}")
            continue
        counts[f"reason:{out.reason}"] += 1
        check(world, out, good, expect=reason, label=name, failures=failures)
        auth = sorted({a for _, a in script.seen})
        if auth != ([sent] if sent else []):
            failures.append(f"{name}: Authorization sent {auth}, expected {[sent] if sent else 'no request'}")
        if reason is not None:
            message = next(c for c in world.kube.status["conditions"] if c["type"] == "Degraded")["message"]
            if "Secret/prom-token[token]" not in message or "spec.prometheus.authSecretRef" not in message:
                failures.append(f"{name}: the message does not name the Secret key and the field: {message}")
            if "t0k" in json.dumps(world.kube.status) + json.dumps(world.kube.events):
                failures.append(f"{name}: the token reached status or events")
            if out.retry_after is None:
                failures.append(f"{name}: not retried (a fixed Secret must be picked up)")
        world.kube.secrets[("prom-token", "token")] = "t0k3n"
        recover(world, T0 + 60, failures, name)
    report("bearer-token secrets", counts, failures)
    assert counts["scenarios"] == len(CREDENTIAL_FAULTS)
    assert failures == [], "\n".join(failures)
