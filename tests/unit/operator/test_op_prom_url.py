"""Where the bearer token may go (issue 26, items 1 and 12): ``spec.prometheus.url`` is read by one strict parser
(operator/prom/url.py) that both ``urllib.parse`` and urllib3 (the HTTP client) must agree with, the client is
built from its parts, and link-local / metadata addresses are refused under every IPv6 embedding
(operator/prom/refused_address.py).

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
from kvplan_operator.prom.url import PromUrl, UrlRefused, parse_prom_url
from kvplan_operator.prom.refused_address import embedded_ipv4, refused_address
from kvplan_operator.spec import InvalidSpec, parse_spec
from kvplan_operator.spec.prometheus import PROMETHEUS_URL
from op_fakes import Script, scripted_prometheus  # type: ignore[import-not-found]
from op_targets_world import SPEC  # type: ignore[import-not-found]
from op_prom_url_world import (ACCEPTED, ALLOWED, BASES, CRD_LETS_THROUGH, EMBEDDED, REFUSED, REPO, SPLICES, _read_by, allowed_and_trap, corpus, crd_pattern, never_resolve, same_port_trap)  # noqa: F401 - fixtures are found by name


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


@pytest.mark.parametrize(("name", "url"), [pytest.param(i, u, id=i) for i, u, _ in REFUSED])
def test_the_crd_pattern_refuses_every_form_a_parser_reads_differently(name, url):
    matched = re.search(crd_pattern(), url) is not None
    assert matched == (name in CRD_LETS_THROUGH)
    assert crd_pattern() == PROMETHEUS_URL  # the spec's check is the CRD's


@pytest.mark.parametrize(("url", "want"), [pytest.param(u, w, id=i) for i, u, w in ACCEPTED])
def test_accepted_urls_in_canonical_parts(url, want):
    assert parse_prom_url(url) == want
    assert re.search(crd_pattern(), url) and re.search(PROMETHEUS_URL, url)
    assert check_url(url, UrlPolicy(), resolve=never_resolve) is None


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


@pytest.mark.parametrize("cut", ["request", "cycle", "stopping"])
@pytest.mark.slow
def test_a_hanging_name_lookup_is_cut_and_sends_no_request(cut):
    """A DNS server that never answers no longer holds the reconcile: the injected raw resolver hangs, and the
    lookup is cut by timeoutSeconds (1 s, the CRD's least), by the cycle deadline, or by the operator's stop."""
    import threading

    from kvplan_operator import deadline
    from kvplan_operator.prom import resolve
    from kvplan_operator.reconcile import Deps, reconcile
    from op_fakes import FakeKube, dep, kvplan  # type: ignore[import-not-found]
    from op_prom_auth_world import _spec  # type: ignore[import-not-found]

    released, started, ran = threading.Event(), threading.Event(), []

    def hung(host: str) -> list[str]:
        ran.append(threading.current_thread())
        started.set()
        released.wait()
        return ["10.0.0.9"]

    made: list = []
    kube = FakeKube({"vllm-big": dep("vllm-big"), "vllm-small": dep("vllm-small")})
    deps = Deps(kube=kube, prom_factory=lambda conn: made.append(conn), planner=lambda *a, **k: None,  # type: ignore
                clock=lambda: 1.7e9, resolve=hung, cycle_deadline_s=0.05 if cut == "cycle" else None)
    spec = _spec({"timeoutSeconds": 1 if cut == "request" else 60})
    stopper = threading.Thread(target=lambda: started.wait(30.0) and deadline.stop_all())
    if cut == "stopping":
        stopper.start()
    try:
        out = reconcile(kvplan(spec, kube), deps)
    finally:
        released.set()
        if cut == "stopping":
            stopper.join(timeout=30.0)
        for thread in ran:
            thread.join(timeout=30.0)
        deadline.reset_stop()
    assert started.is_set() and made == []  # the lookup ran and was cut; no Prometheus client, no request
    assert resolve.abandoned() == 0
    assert [w for w in kube.writes if w != "status"] == []  # no Deployment (nor anything but status) written
    if cut == "request":
        assert out.reason == C.PROMETHEUS_UNAVAILABLE and out.retry_after is not None
        assert "spec.prometheus.timeoutSeconds (1 s)" in out.message and "no request sent" in out.message
    elif cut == "cycle":
        assert out.reason == C.CYCLE_DEADLINE_EXCEEDED and out.retry_after is not None
        assert "cycle deadline (0.05 s, --cycle-deadline)" in out.message
    else:
        assert out.reason == C.OPERATOR_STOPPING and kube.writes == []  # no status write on the way out

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
