"""Prometheus credentials as the real apiserver stores them (issue 26, item 8): Secrets made as
``kubectl create secret generic --from-file`` makes them (a text file's trailing newline kept), and one whose bytes
are not UTF-8, read through the operator's own Kubernetes wrapper (``Kube.read_secret_key``) into a connection.
The trailing newline is stripped and the credential works against the real Prometheus (basic auth from a
``--web.config.file``; a bearer token to a plain one, which must not fail in the client); a value no header can
carry, or bytes that are not UTF-8, are ``PrometheusAuthRefused`` naming the Secret key, never ``InternalError``."""

from __future__ import annotations

import base64
import copy

import pytest

from kvplan_dev import pytest_fixtures
from kvplan_dev.prom import LocalPrometheus
from kvplan_operator import conditions as C
from kvplan_operator.observe import CredentialRefused, connection
from kvplan_operator.prom import PromClient, UrlPolicy
from kvplan_operator.spec import parse_spec
from operator_prometheus_world import SPEC  # type: ignore[import-not-found]

pytestmark = pytest.mark.integration

USER, PASSWORD = "kvplan", "s3cret-pw"


def _secret(kube_api, namespace: str, name: str, data: dict[str, bytes]) -> None:
    from kubernetes import client

    client.CoreV1Api(kube_api).create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name=name), data={k: base64.b64encode(v).decode() for k, v in data.items()}))


def _spec(url: str, prometheus: dict):
    raw = copy.deepcopy(SPEC)
    raw["prometheus"] = {"url": url} | prometheus
    return parse_spec(raw)


@pytest.mark.parametrize(
    ("raw", "refused"),
    [
        pytest.param(b"t0k3n\n", None, id="from-file-trailing-newline"),
        pytest.param(b"t0k3n\r\n", None, id="from-file-crlf"),
        pytest.param(b"t0k\n3n\n", "control character", id="newline-inside"),
        pytest.param(b"t0k3n\xff\xfe", "not UTF-8", id="not-utf8"),
    ],
)
def test_bearer_token_secret_from_a_file(kube, kube_api, namespace, prometheus, raw, refused):
    _secret(kube_api, namespace, "prom-token", {"token": raw})
    spec = _spec(prometheus.url, {"authSecretRef": {"name": "prom-token"}})
    if refused is not None:
        with pytest.raises(CredentialRefused) as info:
            connection(spec, namespace, kube, UrlPolicy())
        failure = info.value.failure
        assert failure.reason == C.PROMETHEUS_AUTH_REFUSED and refused in failure.message
        assert failure.message.startswith("spec.prometheus.authSecretRef: Secret/prom-token[token] ")
        return
    conn = connection(spec, namespace, kube, UrlPolicy())
    assert conn.token == "t0k3n"
    data = PromClient.connect(conn).query("vector(1)")  # sent for real: no ValueError in the client
    assert float(data["result"][0]["value"][1]) == 1.0


def test_basic_auth_secret_from_files_works_against_the_real_prometheus(kube, kube_api, namespace):
    server = LocalPrometheus(basic_auth={USER: PASSWORD})
    try:
        server.start()
    except Exception as exc:  # loud, never a skip
        pytest.fail(f"Prometheus with basic auth did not start: {exc}")
    try:
        _secret(kube_api, namespace, "prom-basic", {"username": f"{USER}\n".encode(),
                                                    "password": f"{PASSWORD}\n".encode()})
        conn = connection(_spec(server.url, {"basicAuth": {"secretRef": {"name": "prom-basic"}}}), namespace, kube,
                          UrlPolicy())
        assert conn.basic_auth == (USER, PASSWORD)
        data = PromClient.connect(conn).query("vector(1)")
        assert float(data["result"][0]["value"][1]) == 1.0
    finally:
        server.stop()
        pytest_fixtures.STARTED.extend(server.history)
