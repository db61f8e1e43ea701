"""Prometheus as teams run it (operator/prom/__init__.py's PromConnection, observe.connection): basic auth and custom
headers on the wire (scripted server on 127.0.0.1), the credential kept on the configured host, answers cut at the
size limit, requests counted; the credential, CA bundle and token file read from Secrets, a ConfigMap or an
allowed file with a named reason for each thing missing or refused (and no request sent then); a CA bundle that is
not PEM is ``PrometheusTLSError`` naming where it came from; the spec rules (one credential, no Authorization or
CR/LF in headers, tls only for https, one CA source, not with insecureSkipVerify). TLS itself is tested against
the real Prometheus (tests/integration/test_prometheus_tls.py)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
import pytest
from kvplan_operator import conditions as C
from kvplan_operator import prom as P
from kvplan_operator.observe import CredentialRefused, connection
from kvplan_operator.prom import PromClient, PromConnection, PromError, UrlPolicy
from kvplan_operator.reconcile import Deps, reconcile
from kvplan_operator.spec import InvalidSpec, parse_spec
from op_fakes import FakeKube, Script, dep, kvplan, scripted_prometheus  # type: ignore[import-not-found]
from op_targets_world import SPEC  # type: ignore[import-not-found]
from op_prom_auth_world import (EMPTY, _spec, server)  # noqa: F401 - fixtures are found by name


def test_basic_auth_and_headers_on_the_wire(server):
    script, url = server
    client = PromClient.connect(PromConnection(url, 5, basic_auth=("kv", "pa:ss"),
                                               headers=(("X-Scope-OrgID", "tenant-a"),)))
    client.query("up", at=1.0)
    client.query("up", at=2.0)
    assert client.requests_sent == 2
    sent = script.headers[0]
    assert sent["Authorization"] == "Basic a3Y6cGE6c3M="  # base64("kv:pa:ss")
    assert sent["X-Scope-OrgID"] == "tenant-a" and sent["Accept"] == "application/json"


def test_answers_above_the_limit_are_cut(server, monkeypatch):
    script, url = server
    monkeypatch.setattr(P, "MAX_BODY_BYTES", 64)
    script.answers["/api/v1/query"] = (200, {}, b"{" + b" " * 200 + b"}")
    with pytest.raises(PromError) as info:
        PromClient(url, timeout_s=5).query("up")
    assert info.value.reason == C.PROMETHEUS_BAD_RESPONSE and "larger than" in str(info.value)


def test_a_ca_bundle_that_is_not_pem_is_a_tls_error():
    with pytest.raises(PromError) as info:
        PromClient.connect(PromConnection("https://prom:9090", 5, ca_pem="not a certificate",
                                          ca_origin="ConfigMap/prom-ca[ca.crt]"))
    assert info.value.reason == C.PROMETHEUS_TLS_ERROR and "ConfigMap/prom-ca[ca.crt]" in str(info.value)


@pytest.mark.parametrize(
    ("prometheus", "kube", "policy", "reason", "needle"),
    [
        pytest.param({"basicAuth": {"secretRef": {"name": "prom-basic"}}}, {"secrets": {("prom-basic", "username"): "u"}},
                     UrlPolicy(), C.AUTH_SECRET_MISSING, "prom-basic[password]", id="basic-auth-key-missing"),
        pytest.param({"tls": {"caConfigMapRef": {"name": "prom-ca"}}}, {}, UrlPolicy(), C.AUTH_SECRET_MISSING,
                     "ConfigMap/prom-ca[ca.crt]", id="ca-configmap-missing"),
        pytest.param({"tls": {"caSecretRef": {"name": "prom-ca", "key": "bundle.pem"}}}, {}, UrlPolicy(),
                     C.AUTH_SECRET_MISSING, "Secret/prom-ca[bundle.pem]", id="ca-secret-missing"),
        pytest.param({"bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}, {}, UrlPolicy(),
                     C.PROMETHEUS_AUTH_REFUSED, "not in the operator's allowed token files", id="token-file-not-allowed"),
        pytest.param({"bearerTokenFile": "/nonexistent/token"}, {}, UrlPolicy(token_files=("/nonexistent/token",)),
                     C.PROMETHEUS_AUTH_REFUSED, "cannot read /nonexistent/token", id="token-file-unreadable"),
    ],
)
def test_credentials_refused_with_a_reason(prometheus, kube, policy, reason, needle):
    spec = parse_spec(_spec(prometheus))
    with pytest.raises(CredentialRefused) as info:
        connection(spec, "ns", FakeKube(**kube), policy)
    assert info.value.failure.reason == reason and needle in info.value.failure.message


def test_credentials_read(tmp_path):
    token = tmp_path / "token"
    token.write_text("file-token\n")
    kube = FakeKube(secrets={("prom-basic", "user"): "kv", ("prom-basic", "password"): "pw"},
                    configmaps={"prom-ca": {"data": {"ca.crt": "PEM"}}})
    spec = parse_spec(_spec({"basicAuth": {"secretRef": {"name": "prom-basic"}, "usernameKey": "user"},
                             "tls": {"caConfigMapRef": {"name": "prom-ca"}}, "headers": {"X-Scope-OrgID": "t1"}}))
    conn = connection(spec, "ns", kube, UrlPolicy())
    assert conn.basic_auth == ("kv", "pw") and conn.ca_pem == "PEM" and conn.headers == (("X-Scope-OrgID", "t1"),)
    assert conn.ca_origin == "ConfigMap/prom-ca[ca.crt]" and "pw" not in repr(conn) and "PEM" not in repr(conn)
    spec = parse_spec(_spec({"bearerTokenFile": str(token), "tls": {"insecureSkipVerify": True}}))
    conn = connection(spec, "ns", kube, UrlPolicy(token_files=(str(token),)))
    assert conn.token == "file-token" and conn.insecure_skip_verify


def test_a_refused_token_file_sends_no_request_and_keeps_degraded():
    kube = FakeKube({"vllm-big": dep("vllm-big"), "vllm-small": dep("vllm-small")})
    made: list[PromConnection] = []
    deps = Deps(kube=kube, prom_factory=lambda conn: made.append(conn), planner=lambda *a, **k: None,  # type: ignore
                clock=lambda: 1.7e9, resolve=lambda host: ["10.0.0.9"])
    out = reconcile(kvplan(_spec({"bearerTokenFile": "/etc/passwd"}), kube), deps)
    assert out.reason == C.PROMETHEUS_AUTH_REFUSED and out.retry_after is None
    assert made == []
    degraded = C.find(kube.status["conditions"], C.DEGRADED)
    assert degraded is not None and degraded["reason"] == C.PROMETHEUS_AUTH_REFUSED


@pytest.mark.parametrize(
    ("prometheus", "field", "needle"),
    [
        pytest.param({"authSecretRef": {"name": "a"}, "basicAuth": {"secretRef": {"name": "b"}}}, "spec.prometheus",
                     "at most one credential", id="two-credentials"),
        pytest.param({"headers": {"Authorization": "Bearer x"}}, "spec.prometheus.headers.Authorization",
                     "use authSecretRef", id="authorization-header"),
        pytest.param({"headers": {"Host": "evil"}}, "spec.prometheus.headers.Host", "not allowed", id="host-header"),
        pytest.param({"headers": {"X-Scope-OrgID": "a\r\nX-Evil: 1"}}, "spec.prometheus.headers.X-Scope-OrgID",
                     "printable ASCII", id="crlf-injection"),
        pytest.param({"headers": {"Bad Name": "x"}}, "spec.prometheus.headers.Bad Name", "header name",
                     id="bad-header-name"),
        pytest.param({"url": "http://prom:9090", "tls": {"insecureSkipVerify": True}}, "spec.prometheus.tls",
                     "https", id="tls-on-http"),
        pytest.param({"tls": {"caSecretRef": {"name": "a"}, "caConfigMapRef": {"name": "b"}}}, "spec.prometheus.tls",
                     "not both", id="two-ca-sources"),
        pytest.param({"tls": {"caSecretRef": {"name": "a"}, "insecureSkipVerify": True}},
                     "spec.prometheus.tls.insecureSkipVerify", "one or the other", id="ca-and-insecure"),
        pytest.param({"bearerTokenFile": "relative/token"}, "spec.prometheus.bearerTokenFile", "match pattern",
                     id="relative-token-file"),
    ],
)
def test_prometheus_spec_errors_name_the_field(prometheus, field, needle):
    with pytest.raises(InvalidSpec) as info:
        parse_spec(_spec(prometheus))
    assert any(path == field and needle in msg for path, msg in info.value.errors), info.value.errors
