"""Where the bearer token may go (issue 26, items 1 and 12): ``spec.prometheus.url`` is read by one strict parser
(operator/prom_url.py) that both ``urllib.parse`` and urllib3 (the HTTP client) must agree with, the client is
built from its parts, and link-local / metadata addresses are refused under every IPv6 embedding
(operator/refused_address.py).

The class of defect is a *parser differential*: a string one parser reads as an allowed host and another as a
different one. So besides the named cases, a seeded corpus of mutated URLs (backslashes, percent-escapes,
brackets, '@', tabs, unicode dots... spliced in at every position) checks the invariant: whatever the operator
accepts, both parsers read as the same host and port, the CRD pattern accepts too, and the client connects to
that host and nowhere else. Over real HTTP: a trap server on 127.0.0.2 never sees a request, let alone the
token, for any URL the operator is given."""

from __future__ import annotations

import ipaddress
import json
import random
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kvplan_operator import conditions as C
from kvplan_operator.prom import PromClient, PromConnection, PromError, UrlPolicy, check_url, vet_url
from kvplan_operator.prom_url import PromUrl, UrlRefused, parse_prom_url
from kvplan_operator.refused_address import embedded_ipv4, refused_address
from kvplan_operator.spec import InvalidSpec, parse_spec
from kvplan_operator.spec.prometheus import PROMETHEUS_URL
from op_fakes import Script, scripted_prometheus  # type: ignore[import-not-found]
from op_targets_world import SPEC  # type: ignore[import-not-found]

REPO = Path(__file__).resolve().parents[3]
ALLOWED = UrlPolicy(("*.monitoring.svc", "prometheus.monitoring.svc", "127.0.0.1"))


def crd_pattern() -> str:
    crd = yaml.safe_load((REPO / "crds" / "kvplans.kvplan.io.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema["properties"]["spec"]["properties"]["prometheus"]["properties"]["url"]["pattern"]


def never_resolve(host: str) -> list[str]:
    return ["10.1.2.3"]


# --- every spelling that used to reach another host, or a refused address ----------------------------------------
REFUSED = [
    # (id, url, needle in the reason)
    ("backslash-in-authority", "http://127.0.0.2\\.monitoring.svc/", "backslash"),
    ("backslash-before-at", "http://prometheus.monitoring.svc\\@127.0.0.2/", "backslash"),
    ("backslash-in-path", "http://prometheus.monitoring.svc/a\\b", "backslash"),
    ("backslashes-as-slashes", "http:\\\\127.0.0.2\\x.monitoring.svc", "backslash"),
    ("percent-encoded-dot", "http://127.0.0.2%2e.monitoring.svc/", "percent-encoding"),
    ("percent-encoded-backslash", "http://127.0.0.2%5c.monitoring.svc/", "percent-encoding"),
    ("percent-encoded-host", "http://%31%32%37.0.0.2/", "percent-encoding"),
    ("ipv6-zone-id-escaped", "http://[fe80::1%25eth0]:9090/", "percent-encoding"),
    ("ipv6-zone-id-raw", "http://[fe80::1%eth0]/", "percent-encoding"),
    ("brackets-around-a-name", "http://[prometheus.monitoring.svc]/", "letters, digits"),
    ("brackets-around-ipv4", "http://[127.0.0.2]/", "not an IPv6 address"),
    ("unbalanced-bracket", "http://[::1/", "letters, digits"),
    ("decimal-ipv4", "http://2852039166/", "dotted-quad"),
    ("octal-ipv4", "http://0251.0376.0251.0376/", "dotted-quad"),
    ("hex-ipv4", "http://0xa9fea9fe/", "dotted-quad"),
    ("hex-octet", "http://0xa9.254.169.254/", "dotted-quad"),
    ("short-ipv4", "http://169.254.43518/", "dotted-quad"),
    ("leading-zero-octet", "http://169.254.169.0254/", "dotted-quad"),
    ("five-octets", "http://1.2.3.4.5/", "dotted-quad"),
    ("trailing-dot", "http://prometheus.monitoring.svc./", "trailing dot"),
    ("trailing-dot-ip", "http://169.254.169.254./", "trailing dot"),
    ("empty-label", "http://127.0.0.2..monitoring.svc/", "DNS name"),
    ("underscore", "http://prom_x.monitoring.svc/", "letters, digits"),
    ("label-too-long", "http://" + "a" * 64 + ".monitoring.svc/", "DNS name"),
    ("unicode-letter", "http://\u24dfrometheus.monitoring.svc/", "non-ASCII"),
    ("ideographic-full-stop", "http://127.0.0.2\u3002monitoring.svc/", "non-ASCII"),
    ("fullwidth-digits", "http://\uff11\uff12\uff17.0.0.2/", "non-ASCII"),
    ("uppercase-scheme", "HTTP://prometheus.monitoring.svc/", "lowercase"),
    ("no-scheme-slashes", "http:/prometheus.monitoring.svc/", "lowercase"),
    ("userinfo", "http://prometheus.monitoring.svc@127.0.0.2/", "userinfo"),
    ("userinfo-with-password", "http://u:p@prometheus.monitoring.svc/", "userinfo"),
    ("fragment-before-at", "http://127.0.0.2#@prometheus.monitoring.svc/", "fragment"),
    ("query-before-at", "http://127.0.0.2?@prometheus.monitoring.svc/", "query"),
    ("tab-in-host", "http://127.0.0.2\t.monitoring.svc/", "tab"),
    ("newline-in-host", "http://127.0.0.2\n.monitoring.svc/", "newline"),
    ("cr-in-path", "http://prometheus.monitoring.svc/\r", "newline"),
    ("space", "http://prometheus.monitoring.svc /", "space"),
    ("nul", "http://prometheus.monitoring.svc\x00.evil/", "control"),
    ("port-leading-zero", "http://prometheus.monitoring.svc:080/", "port"),
    ("port-empty", "http://prometheus.monitoring.svc:/", "port"),
    ("port-zero", "http://prometheus.monitoring.svc:0/", "port"),
    ("port-too-big", "http://prometheus.monitoring.svc:65536/", "port"),
    ("port-signed", "http://prometheus.monitoring.svc:+80/", "letters, digits"),
    ("two-ports", "http://prometheus.monitoring.svc:80:90/", "letters, digits"),
    ("empty-host", "http:///api", "host"),
    ("port-only", "http://:9090/", "letters, digits"),
    ("empty-path-segment", "http://prometheus.monitoring.svc//127.0.0.2/", "empty segment"),
    ("bad-escape-in-path", "http://prometheus.monitoring.svc/a%zz", "escapes"),
]


@pytest.mark.parametrize(("url", "needle"), [pytest.param(u, n, id=i) for i, u, n in REFUSED])
def test_refused_spellings(url, needle):
    with pytest.raises(UrlRefused) as info:
        parse_prom_url(url)
    assert str(info.value).startswith("spec.prometheus.url: ") and needle in str(info.value), str(info.value)
    for policy in (UrlPolicy(), ALLOWED):  # refused with or without an allowed list, before any resolution
        reason = check_url(url, policy, resolve=lambda host: pytest.fail(f"resolved {host!r}"))
        assert reason is not None and reason.startswith("spec.prometheus.url: ")
    with pytest.raises(PromError) as err:  # the client refuses it too, before connecting
        PromClient(url, timeout_s=1, token="s3cret")
    assert err.value.reason == C.PROMETHEUS_URL_REFUSED


@pytest.mark.parametrize(("url", "needle"), [pytest.param(u, n, id=i) for i, u, n in REFUSED])
def test_the_spec_refuses_them_naming_the_field(url, needle):
    raw = json.loads(json.dumps(SPEC))
    raw["prometheus"] = {"url": url}
    with pytest.raises(InvalidSpec) as info:
        parse_spec(raw)
    assert any(path == "spec.prometheus.url" for path, _ in info.value.errors), info.value.errors


#: Spellings the CRD's pattern (a regex, no parser) lets through and only the operator refuses: label and port
#: ranges, and brackets around an IPv4 address.
CRD_LETS_THROUGH = {"label-too-long", "port-too-big", "brackets-around-ipv4"}


@pytest.mark.parametrize(("name", "url"), [pytest.param(i, u, id=i) for i, u, _ in REFUSED])
def test_the_crd_pattern_refuses_every_form_a_parser_reads_differently(name, url):
    matched = re.search(crd_pattern(), url) is not None
    assert matched == (name in CRD_LETS_THROUGH)
    assert crd_pattern() == PROMETHEUS_URL  # the spec's check is the CRD's


ACCEPTED = [
    ("loopback", "http://127.0.0.1:9090", PromUrl("http", "127.0.0.1", 9090, "", "ipv4")),
    ("path-prefix", "https://prometheus.monitoring.svc:9090/prom/", PromUrl("https", "prometheus.monitoring.svc",
                                                                           9090, "/prom", "name")),
    ("uppercase-host-is-folded", "http://PROMETHEUS.Monitoring.SVC", PromUrl("http", "prometheus.monitoring.svc",
                                                                           None, "", "name")),
    ("punycode", "http://xn--prmetheus-s7a.monitoring.svc", PromUrl("http", "xn--prmetheus-s7a.monitoring.svc",
                                                                  None, "", "name")),
    ("ipv6-loopback", "http://[::1]:9090/", PromUrl("http", "::1", 9090, "", "ipv6")),
    ("ipv6-uppercase", "http://[2001:DB8::1]", PromUrl("http", "2001:db8::1", None, "", "ipv6")),
    ("escaped-path", "http://10.0.0.5/mimir%2Fprom/api", PromUrl("http", "10.0.0.5", None, "/mimir%2Fprom/api",
                                                               "ipv4")),
    ("single-label", "http://prometheus:9090", PromUrl("http", "prometheus", 9090, "", "name")),
]


@pytest.mark.parametrize(("url", "want"), [pytest.param(u, w, id=i) for i, u, w in ACCEPTED])
def test_accepted_urls_in_canonical_parts(url, want):
    assert parse_prom_url(url) == want
    assert re.search(crd_pattern(), url) and re.search(PROMETHEUS_URL, url)
    assert check_url(url, UrlPolicy(), resolve=never_resolve) is None


# --- the class: a seeded corpus of mutated URLs; whatever is accepted, every parser reads alike -----------------
BASES = ["http://prometheus.monitoring.svc:9090/prom", "https://127.0.0.1:9090/", "http://[::1]:9090/x",
         "http://thanos.monitoring.svc/"]
SPLICES = ["\\", "%", "%2e", "%25", "%5c", "%40", "@", "#", "?", ":", "[", "]", ".", "..", "/", "//", "\t", "\n",
           "\r", " ", "\x00", "\u3002", "\uff0e", "\u24df", "\u0130", "0x", "0", "A", "-", "_", ";", "&", "=", "+",
           "127.0.0.2", "[::ffff:169.254.169.254]", "169.254.169.254", "::", "1"]


def corpus(n: int, seed: int = 26) -> Iterator[str]:
    rng = random.Random(seed)
    for _ in range(n):
        url = rng.choice(BASES)
        for _ in range(rng.randint(1, 3)):
            i = rng.randint(len("http://") - 2, len(url))
            cut = rng.choice((0, 0, 1))
            url = url[:i] + rng.choice(SPLICES) + url[i + cut:]
        yield url


def _read_by(host: str | None) -> str:
    text = (host or "").lower().strip("[]")
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return text


def test_every_accepted_mutation_reads_the_same_in_every_parser():
    from urllib3.util import parse_url

    accepted = refused = 0
    pattern = crd_pattern()
    for url in corpus(6000):
        try:
            u = parse_prom_url(url)
        except UrlRefused as exc:
            refused += 1
            assert str(exc).startswith("spec.prometheus.url: ")
            assert check_url(url, ALLOWED, resolve=never_resolve) is not None
            continue
        accepted += 1
        split, u3 = urllib.parse.urlsplit(url), parse_url(url)
        assert (_read_by(split.hostname), split.port) == (u.host, u.port), url
        assert (_read_by(u3.host), u3.port) == (u.host, u.port), url
        assert re.search(pattern, url), f"the operator accepts {url!r}, the CRD would not"
        client = PromClient(url, timeout_s=1, token="t")
        assert (client._pool.host.strip("[]"), client._pool.port) == (u.host, u.effective_port), url
    assert accepted > 300 and refused > 3000, (accepted, refused)  # the corpus exercises both sides


# --- over real HTTP: the token reaches the allowed host and no other ------------------------------------------
@pytest.fixture
def allowed_and_trap() -> Iterator[tuple[Script, str, Script, str]]:
    with scripted_prometheus("127.0.0.1") as (good, good_url), scripted_prometheus("127.0.0.2") as (trap, trap_url):
        good.answers["/api/v1/query"] = (200, {}, json.dumps(
            {"status": "success", "data": {"resultType": "vector", "result": []}}).encode())
        yield good, good_url, trap, trap_url


def test_the_token_reaches_no_host_but_the_allowed_one(allowed_and_trap):
    good, good_url, trap, trap_url = allowed_and_trap
    good_port, trap_port = good_url.rsplit(":", 1)[1], trap_url.rsplit(":", 1)[1]
    policy = UrlPolicy((f"127.0.0.1:{good_port}", f"*.monitoring.svc:{trap_port}"))
    attacks = [f"http://127.0.0.2:{trap_port}\\.monitoring.svc:{trap_port}/",
               f"http://127.0.0.2\\.monitoring.svc:{trap_port}/",
               f"http://127.0.0.1:{good_port}\\@127.0.0.2:{trap_port}/",
               f"http://127.0.0.1:{good_port}@127.0.0.2:{trap_port}/",
               f"http://127.0.0.2:{trap_port}#@127.0.0.1:{good_port}/",
               f"http://127.0.0.2%2e.monitoring.svc:{trap_port}/",
               f"http://127.0.0.2\t.monitoring.svc:{trap_port}/",
               f"http://2130706434:{trap_port}/", f"http://0x7f000002:{trap_port}/", f"http://127.1:{trap_port}/",
               f"http://0177.0.0.2:{trap_port}/", f"http://[::ffff:127.0.0.2]:{trap_port}/",
               f"http://127.0.0.1:{good_port}//127.0.0.2:{trap_port}/",
               f"http://127.0.0.1:{good_port}/..\\..\\127.0.0.2:{trap_port}/"]
    attacks += [u.replace("9090", good_port).replace("127.0.0.1", "127.0.0.2") for u in corpus(400)
                if "127.0.0.1" in u]
    sent = 0
    for url in attacks:
        if check_url(url, policy, resolve=never_resolve) is not None:
            continue
        try:
            PromClient(url, timeout_s=2, token="s3cret").query("up", at=1.0)
            sent += 1
        except PromError:
            pass
    PromClient(good_url, timeout_s=2, token="s3cret").query("up", at=1.0)  # the allowed host does get it
    assert trap.seen == [] and trap.headers == []
    assert good.seen and all(auth == "Bearer s3cret" for _, auth in good.seen)


# --- item 12: link-local and metadata addresses under every embedding --------------------------------------------
EMBEDDED = [
    ("ipv4-mapped", "::ffff:169.254.169.254"),
    ("ipv4-mapped-hex", "::ffff:a9fe:a9fe"),
    ("ipv4-translated", "::ffff:0:a9fe:a9fe"),
    ("ipv4-compatible", "::169.254.169.254"),
    ("nat64-well-known", "64:ff9b::169.254.169.254"),
    ("nat64-local-96", "64:ff9b:1::a9fe:a9fe"),
    ("nat64-local-48", "64:ff9b:1:a9fe:a9:fe00::"),
    ("nat64-local-56", "64:ff9b:1:a9:fe:a9fe::"),
    ("nat64-local-64", "64:ff9b:1:0:a9:fea9:fe00:0"),
    ("6to4", "2002:a9fe:a9fe::1"),
    ("teredo-client", "2001:0:4136:e378:8000:63bf:5601:5601"),
    ("teredo-server", "2001:0:a9fe:a9fe::1"),
    ("isatap", "2001:db8::5efe:a9fe:a9fe"),
    ("isatap-universal", "2001:db8::200:5efe:a9fe:a9fe"),
    ("ipv4-mapped-other-link-local", "::ffff:169.254.1.1"),
    ("alibaba-mapped", "::ffff:100.100.100.200"),
    ("alibaba-nat64", "64:ff9b::6464:64c8"),
    ("aws-ipv6-metadata", "fd00:ec2::254"),
    ("gcp-ipv6-metadata", "fd20:ce::254"),
    ("ipv6-link-local", "fe80::1"),
    ("ipv6-link-local-upper-range", "febf:ffff::1"),
]


@pytest.mark.parametrize("address", [pytest.param(a, id=i) for i, a in EMBEDDED])
def test_every_embedding_of_a_refused_address_is_refused(address):
    assert refused_address(address)
    reason = check_url(f"http://[{address}]:9090/", UrlPolicy(), resolve=never_resolve)
    assert reason is not None and "link-local/metadata" in reason
    name_reason = check_url("http://prom.example:9090/", UrlPolicy(), resolve=lambda host: ["10.0.0.1", address])
    assert name_reason is not None and "resolves to" in name_reason  # also when a name resolves to it


@pytest.mark.parametrize("address", [pytest.param(a, id=a) for a in (
    "10.0.0.5", "127.0.0.1", "::1", "2001:db8::1", "64:ff9b::a00:5", "::ffff:10.0.0.5", "2002:a00:5::1",
    "fd00:ec2::253", "169.253.255.255", "169.255.0.0", "2001:db8::5efe:a00:5")])
def test_ordinary_addresses_pass(address):
    assert not refused_address(address)


def test_embeddings_decode_every_rfc6052_position():
    v4 = ipaddress.IPv4Address("169.254.169.254")
    for address in ("64:ff9b:1:a9fe:a9:fe00::", "64:ff9b:1:a9:fe:a9fe::", "64:ff9b:1:0:a9:fea9:fe00:0",
                    "64:ff9b:1::a9fe:a9fe"):
        assert v4 in embedded_ipv4(ipaddress.IPv6Address(address)), address


def test_a_wildcard_does_not_admit_a_name_that_resolves_to_metadata():
    """A wildcard (``*.svc``) also matches names a tenant can make (an ExternalName Service pointing at
    metadata.google.internal); only a host the allowed list names exactly may be link-local."""
    resolve = {"evil.tenant.svc": ["169.254.169.254"], "prom.monitoring.svc": ["10.0.0.9"]}
    policy = UrlPolicy(("*.svc", "169.254.10.10"))
    assert "resolves to" in (check_url("http://evil.tenant.svc/", policy, resolve=resolve.__getitem__) or "")
    assert check_url("http://prom.monitoring.svc/", policy, resolve=resolve.__getitem__) is None
    assert check_url("http://169.254.10.10/", policy, resolve=never_resolve) is None
    assert "metadata host" in (check_url("http://metadata.google.internal/", UrlPolicy(("*.internal",)),
                                         resolve=never_resolve) or "")


# --- DNS rebinding: the name is looked up once, and the client connects to the address that was vetted -----------
@pytest.fixture
def same_port_trap() -> Iterator[tuple[Script, Script, int]]:
    with scripted_prometheus("127.0.0.1") as (good, good_url):
        port = int(good_url.rsplit(":", 1)[1])
        with scripted_prometheus("127.0.0.2", port) as (trap, _):
            for s in (good, trap):
                s.answers["/api/v1/query"] = (200, {}, json.dumps(
                    {"status": "success", "data": {"resultType": "vector", "result": []}}).encode())
            yield good, trap, port


def test_a_rebinding_name_reaches_only_the_vetted_address(same_port_trap):
    good, trap, port = same_port_trap
    answers = iter([["127.0.0.1"], ["127.0.0.2"], ["127.0.0.2"]])  # first lookup vetted, any later one rebinds
    url = f"http://prom.rebind.test:{port}/"  # a name no system resolver knows: a second lookup would fail too
    vetted = vet_url(url, UrlPolicy(), resolve=lambda host: next(answers))
    assert vetted.refused is None and vetted.addresses == ("127.0.0.1",)
    PromClient.connect(PromConnection(url, 2, token="s3cret", addresses=vetted.addresses)).query("up", at=1.0)
    assert trap.seen == [] and good.seen == [("/api/v1/query", "Bearer s3cret")]
    assert good.headers[0]["Host"] == f"prom.rebind.test:{port}"  # the name, not the address, goes in Host


def test_a_name_that_resolves_to_metadata_among_others_is_refused():
    vetted = vet_url("http://prom.example/", UrlPolicy(), resolve=lambda host: ["10.0.0.1", "::ffff:169.254.169.254"])
    assert vetted.refused is not None and "resolves to" in vetted.refused


def test_an_unresolvable_name_sends_no_request():
    from kvplan_operator.reconcile import Deps, reconcile
    from op_fakes import FakeKube, dep, kvplan  # type: ignore[import-not-found]
    from op_prom_auth_world import _spec  # type: ignore[import-not-found]

    def nowhere(host: str) -> list[str]:
        raise OSError("no such host")

    made: list = []
    kube = FakeKube({"vllm-big": dep("vllm-big"), "vllm-small": dep("vllm-small")})
    deps = Deps(kube=kube, prom_factory=lambda conn: made.append(conn), planner=lambda *a, **k: None,  # type: ignore
                clock=lambda: 1.7e9, resolve=nowhere)
    out = reconcile(kvplan(_spec({}), kube), deps)
    assert out.reason == C.PROMETHEUS_UNAVAILABLE and "does not resolve" in out.message and made == []
    assert out.retry_after is not None


@pytest.mark.parametrize(
    ("url", "allowed", "ok"),
    [
        pytest.param("http://[::1]:9090/", ("[::1]:9090",), True, id="ipv6-with-port"),
        pytest.param("http://[fe80::1]/", ("[fe80::1]",), True, id="ipv6-link-local-named-exactly"),
        pytest.param("http://[::2]:9090/", ("[::1]:9090",), False, id="brackets-are-not-a-character-class"),
        pytest.param("http://1:9090/", ("[::1]:9090",), False, id="brackets-are-not-a-character-class-v4"),
        pytest.param("http://prometheus.monitoring.svc/", ("prometheus.monitoring.sv?",), True, id="question-mark"),
        pytest.param("http://evil.example/", ("prometheus.monitoring.svc",), False, id="exact-only"),
    ],
)
def test_allowed_host_patterns(url, allowed, ok):
    assert (check_url(url, UrlPolicy(allowed), resolve=never_resolve) is None) == ok
