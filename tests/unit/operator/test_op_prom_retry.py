"""``Retry-After`` (issue 26, item 10; operator/prom/retry_after.py): a Prometheus (or the Mimir/Thanos/Cortex in front
of it) that answers 429 or 503 with ``Retry-After: 30`` was asked again after the backoff's first step (5-10 s).
Now the retry waits ``max(backoff, Retry-After)``, never past the backoff's cap. Every form of the header: delta
seconds, an HTTP-date (against the answer's own ``Date``, so no clock's skew counts; a fake clock otherwise), and
every malformed one (ignored: the ordinary backoff). Over real HTTP against a scripted server, and through the
reconcile's outcome (the handler's retry delay)."""

from __future__ import annotations

import json

import pytest

from kvplan_operator import conditions as C
from kvplan_operator.prom import PromClient, PromError
from kvplan_operator.record import Recorder
from kvplan_operator.prom.retry_after import retry_after_seconds
from kvplan_operator.run import Deps, Failure, RunContext
from op_fakes import FakeKube, scripted_prometheus  # type: ignore[import-not-found]

NOW = 1700000000.0  # Tue, 14 Nov 2023 22:13:20 GMT
DATE = "Tue, 14 Nov 2023 22:13:20 GMT"


@pytest.mark.parametrize(
    ("headers", "want"),
    [
        pytest.param({"Retry-After": "30"}, 30.0, id="delta-seconds"),
        pytest.param({"Retry-After": " 30 "}, 30.0, id="delta-seconds-padded"),
        pytest.param({"Retry-After": "0"}, 0.0, id="zero"),
        pytest.param({"Retry-After": "999999999999"}, 86400.0, id="huge-read-as-a-day"),
        pytest.param({"Retry-After": "Tue, 14 Nov 2023 22:14:20 GMT", "Date": DATE}, 60.0, id="date-vs-date-header"),
        pytest.param({"Retry-After": "Tue, 14 Nov 2023 22:14:20 GMT"}, 60.0, id="date-vs-clock"),
        pytest.param({"Retry-After": "Tue, 14 Nov 2023 22:14:20 GMT", "Date": "Tue, 14 Nov 2023 22:14:00 GMT"}, 20.0,
                     id="server-clock-ahead"),
        pytest.param({"Retry-After": "Tue, 14 Nov 2023 22:00:00 GMT", "Date": DATE}, 0.0, id="date-in-the-past"),
        pytest.param({"Retry-After": "Tuesday, 14-Nov-23 22:14:20 GMT", "Date": DATE}, 60.0, id="rfc850-date"),
        pytest.param({"Retry-After": "Tue, 14 Nov 2023 22:14:20 GMT", "Date": "garbage"}, 60.0,
                     id="bad-date-header-uses-the-clock"),
        pytest.param({}, None, id="absent"),
        pytest.param({"Retry-After": ""}, None, id="empty"),
        pytest.param({"Retry-After": "-5"}, None, id="negative"),
        pytest.param({"Retry-After": "30.5"}, None, id="fractional"),
        pytest.param({"Retry-After": "0x1e"}, None, id="hex"),
        pytest.param({"Retry-After": "30, 60"}, None, id="list"),
        pytest.param({"Retry-After": "soon"}, None, id="word"),
        pytest.param({"Retry-After": "\u0663\u0660"}, None, id="non-ascii-digits"),
        pytest.param({"Retry-After": "Tue, 14 Nov 2023 22:14:20"}, None, id="date-without-zone"),
        pytest.param({"Retry-After": "Tue, 99 Nov 2023 22:14:20 GMT"}, None, id="impossible-date"),
    ],
)
def test_retry_after_forms(headers, want):
    assert retry_after_seconds(headers, clock=lambda: NOW) == want


def _recorder(consecutive: int, base: float = 5.0, cap: float = 300.0) -> Recorder:
    body = {"metadata": {"name": "fleet", "namespace": "ns", "uid": "u", "generation": 1},
            "status": {"consecutiveFailures": consecutive}}
    deps = Deps(kube=FakeKube(), prom_factory=lambda c: None, planner=lambda *a, **k: None,  # type: ignore
                backoff_base_s=base, backoff_max_s=cap)
    return Recorder(RunContext.start(body, NOW), deps)


@pytest.mark.parametrize(
    ("consecutive", "asked", "want"),
    [
        pytest.param(0, None, 5.0, id="no-header-backoff"),
        pytest.param(0, 30.0, 30.0, id="longer-than-backoff"),
        pytest.param(0, 1.0, 5.0, id="shorter-than-backoff"),
        pytest.param(4, 30.0, 80.0, id="backoff-already-longer"),
        pytest.param(0, 86400.0, 300.0, id="capped"),
        pytest.param(0, 0.0, 5.0, id="zero"),
    ],
)
def test_the_retry_waits_what_the_server_asked_within_the_cap(consecutive, asked, want):
    out = _recorder(consecutive).failure(Failure("observe", C.PROMETHEUS_REJECTED, "HTTP 429", temporary=True,
                                                 degraded=True, retry_after_s=asked))
    assert out.retry_after == want


@pytest.mark.parametrize(
    ("status", "headers", "reason", "wait"),
    [
        pytest.param(429, {"Retry-After": "30"}, C.PROMETHEUS_REJECTED, 30.0, id="429"),
        pytest.param(503, {"Retry-After": "120"}, C.PROMETHEUS_UNAVAILABLE, 120.0, id="503"),
        pytest.param(503, {"Retry-After": "Tue, 14 Nov 2023 22:14:20 GMT", "Date": DATE}, C.PROMETHEUS_UNAVAILABLE,
                     60.0, id="503-date"),
        pytest.param(429, {"Retry-After": "later"}, C.PROMETHEUS_REJECTED, None, id="429-malformed"),
        pytest.param(500, {"Retry-After": "30"}, C.PROMETHEUS_UNAVAILABLE, None, id="500-has-no-wait"),
        pytest.param(404, {"Retry-After": "30"}, C.PROMETHEUS_REJECTED, None, id="404-has-no-wait"),
    ],
)
def test_the_client_reads_retry_after_over_http(status, headers, reason, wait):
    with scripted_prometheus() as (script, url):
        script.answers["/api/v1/query"] = (status, headers, json.dumps({"status": "x"}).encode())
        with pytest.raises(PromError) as info:
            PromClient(url, timeout_s=5).query("up", at=NOW)
    assert info.value.reason == reason and info.value.retry_after_s == wait
    assert ("Retry-After" in str(info.value)) == (wait is not None)
    if wait is not None:
        assert str(info.value).endswith(f"(Retry-After: {wait:.0f} s)")
    assert "later" not in str(info.value)
