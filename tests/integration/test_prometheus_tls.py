"""The operator's Prometheus client against the real Prometheus (Debian's 2.42) served as teams run it: TLS and
basic auth from a ``--web.config.file`` (kvplan_dev.prom.LocalPrometheus, certificates from kvplan_dev.certs with
the openssl command). A CA bundle and the right user answer; a wrong password or none is ``PrometheusRejected``
(HTTP 401); each certificate problem -- an unknown CA, a self-signed certificate, an expired one, one for another
host, a CA bundle that is not PEM, an https:// URL on a plain-HTTP server -- is ``PrometheusTLSError`` whose
message names the URL and the problem; insecureSkipVerify connects anyway. Needs only Prometheus and openssl."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kvplan_dev import pytest_fixtures
from kvplan_dev.certs import TestCA, self_signed
from kvplan_dev.prom import LocalPrometheus
from kvplan_operator import conditions as C
from kvplan_operator.prom import PromClient, PromConnection, PromError

pytestmark = pytest.mark.integration

USER, PASSWORD = "kvplan", "s3cret-pw"


def _server(**kw: object) -> LocalPrometheus:
    server = LocalPrometheus(**kw)  # type: ignore[arg-type]
    try:
        server.start()
    except Exception as exc:  # loud, never a skip
        pytest.fail(f"Prometheus with a web config did not start: {exc}")
    return server


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secure(pki: TestCA) -> Iterator[LocalPrometheus]:
    server = _server(tls=pki.server("prom"), basic_auth={USER: PASSWORD})
    try:
        yield server
    finally:
        server.stop()
        pytest_fixtures.STARTED.extend(server.history)


def one(client: PromClient) -> float:
    data = client.query("vector(1)")
    return float(data["result"][0]["value"][1])


def test_ca_bundle_and_basic_auth(secure: LocalPrometheus, pki: TestCA) -> None:
    assert secure.url.startswith("https://127.0.0.1:")
    good = PromClient.connect(PromConnection(secure.url, 10, basic_auth=(USER, PASSWORD), ca_pem=pki.pem))
    assert one(good) == 1.0 and good.requests_sent == 1
    for auth in ((USER, "wrong"), None):
        with pytest.raises(PromError) as info:
            one(PromClient.connect(PromConnection(secure.url, 10, basic_auth=auth, ca_pem=pki.pem)))
        assert info.value.reason == C.PROMETHEUS_REJECTED and "HTTP 401" in str(info.value)
    skip = PromClient.connect(PromConnection(secure.url, 10, basic_auth=(USER, PASSWORD), insecure_skip_verify=True))
    assert one(skip) == 1.0


def test_unknown_ca_names_url_and_problem(secure: LocalPrometheus) -> None:
    with pytest.raises(PromError) as info:
        one(PromClient.connect(PromConnection(secure.url, 10, basic_auth=(USER, PASSWORD))))
    assert info.value.reason == C.PROMETHEUS_TLS_ERROR
    assert str(info.value) == (f"instant query: TLS to {secure.url} failed: certificate verify failed: unable to "
                               "get local issuer certificate")


def test_http_url_on_the_tls_port_is_rejected(secure: LocalPrometheus) -> None:
    plain = secure.url.replace("https://", "http://")
    with pytest.raises(PromError) as info:
        one(PromClient(plain, timeout_s=10, basic_auth=(USER, PASSWORD)))
    assert info.value.reason == C.PROMETHEUS_REJECTED and "HTTP 400" in str(info.value)


@pytest.mark.parametrize(
    ("kind", "problem"),
    [
        pytest.param("expired", "certificate verify failed: certificate has expired", id="expired"),
        pytest.param("other-host", "certificate verify failed: IP address mismatch, certificate is not valid for "
                     "'127.0.0.1'", id="other-host"),
        pytest.param("self-signed", "certificate verify failed: self-signed certificate", id="self-signed"),
    ],
)
def test_certificate_problems_are_named(pki: TestCA, tmp_path: Path, kind: str, problem: str) -> None:
    cert = {"expired": lambda: pki.server("old", start="200101000000Z", end="200102000000Z"),
            "other-host": lambda: pki.server("elsewhere", hosts=("prom.example.org",)),
            "self-signed": lambda: self_signed(tmp_path)}[kind]()
    server = _server(tls=cert)
    try:
        with pytest.raises(PromError) as info:
            one(PromClient.connect(PromConnection(server.url, 10, ca_pem=pki.pem)))
        assert info.value.reason == C.PROMETHEUS_TLS_ERROR
        assert str(info.value) == f"instant query: TLS to {server.url} failed: {problem}"
    finally:
        server.stop()
        pytest_fixtures.STARTED.extend(server.history)


def test_https_url_on_a_plain_server_and_a_bad_bundle(prometheus: LocalPrometheus) -> None:
    tls_url = prometheus.url.replace("http://", "https://")
    with pytest.raises(PromError) as info:
        one(PromClient(tls_url, timeout_s=10))
    assert info.value.reason == C.PROMETHEUS_TLS_ERROR and tls_url in str(info.value)
    assert "does not speak TLS" in str(info.value)
    with pytest.raises(PromError) as info:
        PromClient.connect(PromConnection(tls_url, 10, ca_pem="-----BEGIN CERTIFICATE-----\nnope\n",
                                          ca_origin="Secret/prom-ca[ca.crt]"))
    assert info.value.reason == C.PROMETHEUS_TLS_ERROR and "Secret/prom-ca[ca.crt]" in str(info.value)


@pytest.mark.parametrize(
    ("hosts", "name", "problem"),
    [
        pytest.param(("prom.example.org",), "prom.example.org", None, id="the-name-is-checked"),
        pytest.param(("prom.example.org",), "other.example.org", "certificate verify failed: Hostname mismatch, "
                     "certificate is not valid for 'other.example.org'", id="another-name-is-refused"),
        pytest.param(("127.0.0.1",), "prom.example.org", "certificate verify failed: Hostname mismatch, "
                     "certificate is not valid for 'prom.example.org'", id="the-address-alone-is-not-enough"),
    ],
)
def test_a_name_reached_at_its_vetted_address_keeps_tls_on_the_name(pki: TestCA, hosts: tuple[str, ...],
                                                                     name: str, problem: str | None) -> None:
    """Issue 26 (DNS rebinding): the client connects to the address the URL's name resolved to when vetted, and
    sends the name in SNI and checks the certificate against the name, never the address."""
    server = _server(tls=pki.server(f"pinned-{name}-{len(hosts[0])}", hosts=hosts))
    url = server.url.replace("127.0.0.1", name)
    try:
        client = PromClient.connect(PromConnection(url, 10, ca_pem=pki.pem, addresses=("127.0.0.1",)))
        if problem is None:
            assert one(client) == 1.0
        else:
            with pytest.raises(PromError) as info:
                one(client)
            assert info.value.reason == C.PROMETHEUS_TLS_ERROR
            assert str(info.value) == f"instant query: TLS to {url} failed: {problem}"
    finally:
        server.stop()
        pytest_fixtures.STARTED.extend(server.history)
