"""The operator's Prometheus access (operator/prom.py): which URLs a KVPlan may make the operator call (syntax in the
spec; link-local and metadata addresses, names resolving to them, the operator's allowed-host list), and a client
that sends its bearer token only to that host (redirects are not followed), maps every failure to a named reason
with an HTTP status code and a fixed short reason, and never copies a response body into its message. The client is
exercised over real HTTP against a scripted server on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from kvplan_operator import conditions as C
from kvplan_operator.prom import PromClient, PromError, UrlPolicy, check_url
from op_fakes import SECRET_BODY, Script, scripted_prometheus  # type: ignore[import-not-found]

def resolver(table: dict[str, list[str]]):
    return lambda host: table.get(host, ["10.1.2.3"])


@pytest.mark.parametrize(
    ("url", "allowed", "table", "needle"),
    [
        pytest.param("http://169.254.169.254/latest", (), {}, "link-local", id="aws-metadata-ip"),
        pytest.param("http://[fe80::1]:9090", (), {}, "link-local", id="ipv6-link-local"),
        pytest.param("http://[fd00:ec2::254]/", (), {}, "link-local", id="aws-ipv6-metadata"),
        pytest.param("http://metadata.google.internal/computeMetadata/v1", (), {}, "metadata host", id="gcp-name"),
        pytest.param("http://prom.example:9090", (), {"prom.example": ["169.254.169.254"]}, "resolves to",
                     id="name-resolving-to-metadata"),
        pytest.param("http://user:pw@prom:9090", (), {}, "userinfo", id="userinfo"),
        pytest.param("http://prom:9090/#", (), {}, "fragment", id="fragment"),
        pytest.param("http://prom:9090/?x=1", (), {}, "query", id="query"),
        pytest.param("http://evil.example:9090", ("prometheus.monitoring.svc", "*.monitoring.svc:9090"), {},
                     "not in the operator's allowed", id="outside-allowed-list"),
        pytest.param("ftp://prom", (), {}, "http", id="scheme"),
    ],
)
def test_refused_urls(url, allowed, table, needle):
    reason = check_url(url, UrlPolicy(tuple(allowed)), resolve=resolver(table))
    assert reason is not None and needle in reason and reason.startswith("spec.prometheus.url")


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        pytest.param("http://127.0.0.1:9090", (), id="loopback"),
        pytest.param("https://prometheus.monitoring.svc:9090/prom", (), id="in-cluster-with-path-prefix"),
        pytest.param("http://prometheus.monitoring.svc:9090", ("prometheus.monitoring.svc",), id="allowed-by-name"),
        pytest.param("http://thanos.monitoring.svc:9090", ("*.monitoring.svc:9090",), id="allowed-by-pattern-port"),
        pytest.param("http://169.254.10.10:9090", ("169.254.10.10",), id="link-local-allowed-explicitly"),
    ],
)
def test_allowed_urls(url, allowed):
    assert check_url(url, UrlPolicy(tuple(allowed)), resolve=resolver({})) is None


def test_policy_from_environment(monkeypatch):
    monkeypatch.setenv("KVPLAN_PROMETHEUS_ALLOWED_HOSTS", " Prom.Monitoring.svc , *.obs.svc ")
    assert UrlPolicy.from_environment().allowed_hosts == ("prom.monitoring.svc", "*.obs.svc")


@pytest.fixture
def servers() -> Iterator[tuple[Script, str, Script, str]]:
    with scripted_prometheus() as (a, url_a), scripted_prometheus() as (b, url_b):
        yield a, url_a, b, url_b


def ok(result: object) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


def test_token_goes_only_to_the_configured_host(servers):
    a, url_a, b, url_b = servers
    a.answers["/api/v1/query"] = (302, {"Location": f"{url_b}/api/v1/query?query=up"}, b"")
    b.answers["/api/v1/query"] = (200, {}, ok([]))
    client = PromClient(url_a, timeout_s=5, token="s3cret")
    with pytest.raises(PromError) as info:
        client.query("up", at=1.0)
    assert info.value.reason == C.PROMETHEUS_REJECTED and "HTTP 302" in str(info.value)
    assert a.seen == [("/api/v1/query", "Bearer s3cret")]
    assert b.seen == []  # the redirect was not followed: the other host never saw a request, let alone the token


@pytest.mark.parametrize(
    ("status", "body", "reason", "message"),
    [
        pytest.param(401, b"unauthorized " + SECRET_BODY.encode(), C.PROMETHEUS_REJECTED,
                     "instant query: HTTP 401 Unauthorized", id="401"),
        pytest.param(403, SECRET_BODY.encode(), C.PROMETHEUS_REJECTED, "instant query: HTTP 403 Forbidden", id="403"),
        pytest.param(500, SECRET_BODY.encode(), C.PROMETHEUS_UNAVAILABLE,
                     "instant query: HTTP 500 Internal Server Error", id="500"),
        pytest.param(503, SECRET_BODY.encode(), C.PROMETHEUS_UNAVAILABLE,
                     "instant query: HTTP 503 Service Unavailable", id="503"),
        pytest.param(400, json.dumps({"status": "error", "errorType": "bad_data", "error": SECRET_BODY}).encode(),
                     C.PROMETHEUS_QUERY_ERROR, "instant query: Prometheus answered HTTP 400 status=error (bad_data)",
                     id="promql-error"),
        pytest.param(422, json.dumps({"status": "error", "errorType": SECRET_BODY, "error": "x"}).encode(),
                     C.PROMETHEUS_QUERY_ERROR, "instant query: Prometheus answered HTTP 422 status=error",
                     id="unknown-error-type-not-quoted"),
        pytest.param(200, b"{not json " + SECRET_BODY.encode(), C.PROMETHEUS_BAD_RESPONSE,
                     "instant query: HTTP 200 but the body is not JSON", id="malformed-json"),
        pytest.param(200, json.dumps({"status": "success", "data": SECRET_BODY}).encode(), C.PROMETHEUS_BAD_RESPONSE,
                     "instant query: HTTP 200 but not a Prometheus API answer", id="not-the-api"),
    ],
)
def test_failures_are_named_and_never_quote_the_body(servers, status, body, reason, message):
    a, url_a, _, _ = servers
    a.answers["/api/v1/query"] = (status, {"Content-Type": "application/json"}, body)
    with pytest.raises(PromError) as info:
        PromClient(url_a, timeout_s=5).query("up", at=1.0)
    assert (info.value.reason, str(info.value)) == (reason, message)
    assert SECRET_BODY not in str(info.value)


@pytest.mark.slow
def test_connection_refused_and_timeout(servers):
    a, url_a, _, _ = servers
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(PromError) as info:
        PromClient(dead, timeout_s=2).query_range("up", start=0, end=60, step=60)
    assert info.value.reason == C.PROMETHEUS_UNAVAILABLE and "failed" in str(info.value)
    a.hang.add("/api/v1/query")
    with pytest.raises(PromError) as info:  # the server never answers; the client's timeout ends the wait
        PromClient(url_a, timeout_s=0.5).query("up")
    assert info.value.reason == C.PROMETHEUS_UNAVAILABLE and "timed out" in str(info.value)


def test_success_returns_the_data_object(servers):
    a, url_a, _, _ = servers
    a.answers["/api/v1/query_range"] = (200, {}, json.dumps(
        {"status": "success", "data": {"resultType": "matrix", "result": []}}).encode())
    assert PromClient(url_a, timeout_s=5).query_range("up", start=0, end=60, step=60) == \
        {"resultType": "matrix", "result": []}
