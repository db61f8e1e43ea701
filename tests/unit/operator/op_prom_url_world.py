"""The shared world of ``test_op_prom_url.py`` and the tests that reuse it: where the bearer token may go (issue 26, items 1 and 12): ``spec.prometheus.url`` is read by one strict parser."""

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
from kvplan_operator.prom.url import PromUrl, UrlRefused, parse_prom_url
from kvplan_operator.prom.refused_address import embedded_ipv4, refused_address
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


CRD_LETS_THROUGH = {"label-too-long", "port-too-big", "brackets-around-ipv4"}


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


@pytest.fixture
def allowed_and_trap() -> Iterator[tuple[Script, str, Script, str]]:
    with scripted_prometheus("127.0.0.1") as (good, good_url), scripted_prometheus("127.0.0.2") as (trap, trap_url):
        good.answers["/api/v1/query"] = (200, {}, json.dumps(
            {"status": "success", "data": {"resultType": "vector", "result": []}}).encode())
        yield good, good_url, trap, trap_url


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


@pytest.fixture
def same_port_trap() -> Iterator[tuple[Script, Script, int]]:
    with scripted_prometheus("127.0.0.1") as (good, good_url):
        port = int(good_url.rsplit(":", 1)[1])
        with scripted_prometheus("127.0.0.2", port) as (trap, _):
            for s in (good, trap):
                s.answers["/api/v1/query"] = (200, {}, json.dumps(
                    {"status": "success", "data": {"resultType": "vector", "result": []}}).encode())
            yield good, trap, port
