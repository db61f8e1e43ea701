"""A Prometheus credential as read (issue 26, item 8; operator/prom/credentials.py): a Secret written with
``kubectl create secret --from-file`` keeps the file's trailing newline, which no HTTP header can carry (urllib3's
``ValueError`` became ``InternalError`` naming nothing). Whitespace around a value is stripped, as Prometheus
does for its own credential files; what cannot be sent is ``PrometheusAuthRefused`` naming the Secret key (or the
file) and the spec field, never quoting the value, and no request is sent. The class: every credential source
(bearer token from a Secret or a file, basic-auth user and password) x every character no header or basic-auth
pair can carry. On the wire (scripted server) and through the whole reconcile: test_op_faults_prom.py."""

from __future__ import annotations

import copy

import pytest

from kvplan_operator import conditions as C
from kvplan_operator.observe import CredentialRefused, connection
from kvplan_operator.prom import PromClient, PromError, UrlPolicy
from kvplan_operator.prom.credentials import BadCredential, basic_password, basic_user, bearer_token
from kvplan_operator.spec import parse_spec
from op_fakes import FakeKube  # type: ignore[import-not-found]
from op_targets_world import SPEC  # type: ignore[import-not-found]

#: (id, raw value, what each reader makes of it: the value sent, or None for refused)
VALUES = [
    ("plain", "t0k3n", "t0k3n", "t0k3n", "t0k3n"),
    ("trailing-newline", "t0k3n\n", "t0k3n", "t0k3n", "t0k3n"),
    ("trailing-crlf", "t0k3n\r\n", "t0k3n", "t0k3n", "t0k3n"),
    ("leading-and-trailing-whitespace", " \t t0k3n \n", "t0k3n", "t0k3n", "t0k3n"),
    ("newline-inside", "t0k\n3n", None, None, None),
    ("cr-inside", "t0k\r3n", None, None, None),
    ("header-injection", "t0k3n\r\nX-Evil: 1", None, None, None),
    ("nul", "t0k3n\x00", None, None, None),
    ("escape", "t0k\x1b[31m3n", None, None, None),
    ("delete", "t0k3n\x7f", None, None, None),
    ("next-line-u0085", "t0k\u00853n", None, None, None),
    ("line-separator", "t0k\u20283n", None, None, None),
    ("zero-width-space", "t0k\u200b3n", None, None, None),
    ("not-utf8", "t0k3n\udcff", None, None, None),
    ("space-inside", "t0k 3n", None, "t0k 3n", "t0k 3n"),
    ("tab-inside", "t0k\t3n", None, None, None),
    ("non-ascii", "t\u00f6k3n", None, "t\u00f6k3n", "t\u00f6k3n"),
    ("colon", "t0k:3n", "t0k:3n", None, "t0k:3n"),
    ("only-whitespace", " \n", None, None, ""),
]


@pytest.mark.parametrize(("raw", "token", "user", "password"),
                         [pytest.param(*v[1:], id=v[0]) for v in VALUES])
def test_every_reader_strips_or_refuses(raw, token, user, password):
    for read, want in ((bearer_token, token), (basic_user, user), (basic_password, password)):
        if want is None:
            with pytest.raises(BadCredential) as info:
                read(raw, "Secret/s[k]")
            assert str(info.value).startswith("Secret/s[k] ")
            assert "t0k" not in str(info.value)  # the value is never quoted
        else:
            assert read(raw, "Secret/s[k]") == want


def _spec(prometheus: dict) -> dict:
    raw = copy.deepcopy(SPEC)
    raw["prometheus"] = {"url": "http://prom.monitoring.svc:9090"} | prometheus
    return raw


SOURCES = [
    # (id, spec.prometheus, the Secret key (name, key) the value goes to, its reader, the origin and field named,
    #  where the value lands in the connection)
    ("auth-secret", {"authSecretRef": {"name": "prom-token"}}, ("prom-token", "token"), bearer_token,
     "Secret/prom-token[token]", "spec.prometheus.authSecretRef", lambda c: c.token),
    ("auth-secret-other-key", {"authSecretRef": {"name": "prom-token", "key": "bearer"}}, ("prom-token", "bearer"),
     bearer_token, "Secret/prom-token[bearer]", "spec.prometheus.authSecretRef", lambda c: c.token),
    ("basic-user", {"basicAuth": {"secretRef": {"name": "prom-basic"}}}, ("prom-basic", "username"), basic_user,
     "Secret/prom-basic[username]", "spec.prometheus.basicAuth", lambda c: c.basic_auth[0]),
    ("basic-password", {"basicAuth": {"secretRef": {"name": "prom-basic"}, "passwordKey": "pw"}}, ("prom-basic", "pw"),
     basic_password, "Secret/prom-basic[pw]", "spec.prometheus.basicAuth", lambda c: c.basic_auth[1]),
]


@pytest.mark.parametrize(("prometheus", "where", "reader", "origin", "field", "sent"),
                         [pytest.param(*s[1:], id=s[0]) for s in SOURCES])
@pytest.mark.parametrize("raw", [pytest.param(v[1], id=v[0]) for v in VALUES])
def test_every_secret_source_names_its_key(prometheus, where, reader, origin, field, sent, raw):
    secrets = {("prom-basic", "username"): "kv", ("prom-basic", "password"): "pw", ("prom-basic", "pw"): "pw",
               where: raw}
    spec = parse_spec(_spec(prometheus))
    try:
        want: str | None = reader(raw, origin)
    except BadCredential:
        want = None
    if want is None:
        with pytest.raises(CredentialRefused) as info:
            connection(spec, "ns", FakeKube(secrets=secrets), UrlPolicy())
        failure = info.value.failure
        assert failure.reason == C.PROMETHEUS_AUTH_REFUSED and failure.temporary and failure.degraded
        assert failure.message.startswith(f"{field}: {origin} ") and "no request sent" in failure.message
        return
    conn = connection(spec, "ns", FakeKube(secrets=secrets), UrlPolicy())
    assert sent(conn) == want
    PromClient.connect(conn)  # and the client takes it (no ValueError later, at the request)


@pytest.mark.parametrize("raw", [pytest.param(v[1], id=v[0]) for v in VALUES if v[2] is None])
def test_a_token_file_is_refused_alike(tmp_path, raw):
    path = tmp_path / "token"
    path.write_text(raw, encoding="utf-8", errors="surrogateescape")
    spec = parse_spec(_spec({"bearerTokenFile": str(path)}))
    with pytest.raises(CredentialRefused) as info:
        connection(spec, "ns", FakeKube(), UrlPolicy(token_files=(str(path),)))
    assert info.value.failure.reason == C.PROMETHEUS_AUTH_REFUSED
    assert info.value.failure.message.startswith("spec.prometheus.bearerTokenFile: ")


@pytest.mark.parametrize("raw", [pytest.param(v[1], id=v[0]) for v in VALUES if v[2] is None])
def test_the_client_itself_refuses_what_no_header_can_carry(raw):
    with pytest.raises(PromError) as info:
        PromClient("http://127.0.0.1:9", timeout_s=1, token=raw if raw.strip() else "a b")
    assert info.value.reason == C.PROMETHEUS_AUTH_REFUSED
