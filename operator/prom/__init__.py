"""Talking to Prometheus safely: where the operator may send a request, and a client that keeps the bearer token on
that host and never copies a response body anywhere.

URL rules (``spec.prometheus.url`` is written by whoever may write a KVPlan, and the operator attaches its
Secret's bearer token to every request, so the URL decides where a credential goes):

- syntax (:func:`kvplan_operator.prom.url.parse_prom_url`, in the spec check, the policy and the client alike):
  ``http``/``https``, a host in one canonical form that ``urllib.parse`` and urllib3 read the same way, no
  userinfo, query, fragment, percent-encoded host, backslash or whitespace; the client is built from those parts;
- policy (:func:`vet_url`, in the observe phase): the host must match the operator's allowed list when one is
  configured (``--prometheus-allowed-hosts`` / ``KVPLAN_PROMETHEUS_ALLOWED_HOSTS``, set from the chart's
  ``prometheus.allowedHosts``); and unless the list names it exactly (no wildcard), it must not be a metadata host
  (``metadata.google.internal``, ...) nor be or resolve to a link-local or metadata address under any IPv6
  embedding (:mod:`kvplan_operator.prom.refused_address`), where cloud credentials live. The name is resolved once,
  there, and the client connects to that address (no second lookup for a rebinding DNS server to answer).

The client (:class:`PromClient`) sends only ``GET`` to ``<url>/api/v1/query[_range]``, follows no redirect (a 3xx
is an error: the token never reaches another host), uses no proxy from the environment, reads at most
:data:`MAX_BODY_BYTES` of an answer, and turns every failure into a :class:`PromError` whose message has the HTTP
status code and a short fixed reason, never the body.

Connecting as teams run Prometheus (:class:`PromConnection`, built by the observe phase from ``spec.prometheus``):
a bearer token (from a Secret, or from a file the operator's own allowed list names) or basic auth (from a Secret),
custom headers (a tenant id for Mimir/Cortex/Thanos: ``X-Scope-OrgID``), and for ``https`` a CA bundle (PEM, from a
Secret or ConfigMap) or an explicit ``insecureSkipVerify``. A TLS failure is ``PrometheusTLSError`` naming the URL
and the certificate problem OpenSSL reports (``self-signed certificate``, ``certificate has expired``, ``Hostname
mismatch``; fixed library text, nothing the server sent).
"""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
import urllib.parse
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .. import conditions as C
from .error import PromError as PromError, PrometheusUnavailable as PrometheusUnavailable
from .credentials import BadCredential, basic_password, basic_user, bearer_token
from .url import PromUrl, UrlRefused, parse_prom_url
from .refused_address import refused_address
from .resolve import system_lookup as _system_resolver
from .retry_after import with_retry_after

#: Hosts that serve cloud instance credentials, refused unless allowed by name.
METADATA_HOSTS = ("metadata.google.internal", "metadata.goog", "metadata", "instance-data",
                  "instance-data.ec2.internal", "metadata.azure.com", "metadata.tencentyun.com")
#: Prometheus' ``errorType`` values quoted in a message (a fixed vocabulary; anything else is not quoted).
ERROR_TYPES = ("timeout", "canceled", "execution", "bad_data", "internal", "unavailable", "not_found",
               "not_acceptable")
ALLOWED_HOSTS_ENV = "KVPLAN_PROMETHEUS_ALLOWED_HOSTS"
TOKEN_FILES_ENV = "KVPLAN_PROMETHEUS_TOKEN_FILES"
#: Largest answer read, bytes. 64 MiB holds 64 classes x 90 fine buckets x 48 windows several times over; a
#: selector or class label matching far more (a request id as class label) is cut here, not read into memory.
MAX_BODY_BYTES = 64 * 1024 * 1024
#: Most bytes of a non-2xx body read (Prometheus' own error answers are well under 1 KiB): a huge error body is
#: never parsed whole (``json.loads`` of 64 MiB made about 500 MB of objects).
MAX_ERROR_BODY_BYTES = 64 * 1024
#: Most series (elements of ``data.result``) one answer may hold: the history checks' own limit
#: (:data:`kvplan_operator.observe.history.MAX_SERIES`); an answer past it stops being read (``TooManySeries``).
MAX_ANSWER_SERIES = 65_536

Resolver = Callable[[str], Sequence[str]]


class PromApi(Protocol):
    """The two Prometheus calls the observe phase makes. Both return the API's ``data`` object
    (``{"resultType": ..., "result": ...}``) or raise :class:`PromError`."""

    def query(self, promql: str, *, at: float | None = None) -> Mapping[str, Any]: ...

    def query_range(self, promql: str, *, start: float, end: float, step: float) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class UrlPolicy:
    """Where the operator may send Prometheus requests (its bearer tokens go with them).

    ``allowed_hosts``: host patterns (``prometheus.monitoring.svc``, ``*.monitoring.svc``, ``10.0.0.5``, optionally
    with ``:port``); empty means any host except the refused ones. A host allowed here by name is allowed even if
    it is link-local or a metadata host (an explicit opt-in)."""

    allowed_hosts: tuple[str, ...] = ()
    #: Files a KVPlan's ``spec.prometheus.bearerTokenFile`` may name (exact paths; ``--prometheus-token-files``).
    #: Empty by default: a file in the operator's pod (its own service-account token, say) is a credential the
    #: operator's admin hands out explicitly, never one a KVPlan author picks.
    token_files: tuple[str, ...] = ()

    @classmethod
    def from_environment(cls) -> UrlPolicy:
        raw = os.environ.get(ALLOWED_HOSTS_ENV, "")
        files = os.environ.get(TOKEN_FILES_ENV, "")
        return cls(tuple(h.strip().lower() for h in raw.split(",") if h.strip()),
                   tuple(os.path.normpath(f.strip()) for f in files.split(",") if f.strip()))


def _pattern_is_exact(pattern: str) -> bool:
    return not any(ch in pattern for ch in "*?")


def _host_matches(name: str, pattern: str) -> bool:
    """``*`` (any characters) and ``?`` (one) are the only wildcards; ``[`` and ``]`` are literal, so an IPv6
    pattern ``[fd00::5]:9090`` means itself (fnmatch read it as a character class)."""
    regex = "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)
    return re.fullmatch(regex, name) is not None


@dataclass(frozen=True)
class Vetted:
    """What :func:`vet_url` found: why the URL is refused (None: it is not), and the addresses its host resolved
    to when vetted, which the client then connects to (so a second lookup cannot answer differently: DNS
    rebinding); ``unresolved``: the host is a name that did not resolve (no request is sent then)."""

    refused: str | None
    addresses: tuple[str, ...] = ()
    unresolved: bool = False


def vet_url(url: str, policy: UrlPolicy, *, resolve: Resolver = _system_resolver) -> Vetted:
    """Vet ``url`` once: read by :func:`kvplan_operator.prom.url.parse_prom_url` (the one form both parsers read
    alike; the client connects to exactly those parts), then the policy. A host the allowed list names exactly is
    an explicit opt-in; one only a wildcard matches is still refused if it is, or resolves to, a link-local or
    metadata address (:mod:`kvplan_operator.prom.refused_address`, any IPv6 embedding), since a wildcard (``*.svc``)
    admits names a tenant can create (an ExternalName Service). A name is resolved exactly once, here: ``OSError``
    or ``UnicodeError`` from ``resolve`` means it does not resolve; anything else (the observe phase's
    :class:`~kvplan_operator.prom.resolve.ResolveCut`: the lookup outlived its deadline) propagates."""
    try:
        u = parse_prom_url(url)
    except UrlRefused as exc:
        return Vetted(str(exc))
    exact = False
    if policy.allowed_hosts:
        names = (u.host_text, f"{u.host_text}:{u.port}") if u.port is not None else (u.host_text,)
        matched = [pat for pat in policy.allowed_hosts for n in names if _host_matches(n, pat)]
        if not matched:
            return Vetted(f"spec.prometheus.url: host {u.host_text!r} is not in the operator's allowed Prometheus "
                          f"hosts ({', '.join(policy.allowed_hosts)})")
        exact = any(_pattern_is_exact(pat) for pat in matched)
    if not exact and (u.host in METADATA_HOSTS or any(u.host.endswith("." + name) for name in METADATA_HOSTS
                                                      if "." in name)):
        return Vetted(f"spec.prometheus.url: {u.host!r} is a cloud metadata host")
    if not exact and refused_address(u.host):
        return Vetted(f"spec.prometheus.url: {u.host_text} is a link-local/metadata address")
    if u.kind != "name":
        return Vetted(None, (u.host,))
    try:
        addresses = tuple(dict.fromkeys(str(a) for a in resolve(u.host)))
    except (OSError, UnicodeError):
        addresses = ()
    bad = [a for a in addresses if refused_address(a)]
    if bad and not exact:
        return Vetted(f"spec.prometheus.url: {u.host!r} resolves to the link-local/metadata address {bad[0]}")
    return Vetted(None, addresses, unresolved=not addresses)


def check_url(url: str, policy: UrlPolicy, *, resolve: Resolver = _system_resolver) -> str | None:
    """Why ``url`` may not be used (one line), or None (:func:`vet_url`; a host that does not resolve is not a
    refusal: the observe phase reports it as unavailable)."""
    return vet_url(url, policy, resolve=resolve).refused


def _short_reason(status: int) -> str:
    import http

    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "HTTP error"


def parse_response(status: int, body: bytes, *, what: str) -> Mapping[str, Any]:
    """An API response -> its ``data`` object, or :class:`PromError` (status code and a fixed reason only)."""
    if 300 <= status < 400:
        raise PromError(C.PROMETHEUS_REJECTED, f"{what}: HTTP {status} {_short_reason(status)} (redirects are not "
                                               "followed: the bearer token stays on the configured host)")
    doc: Any = None
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        doc = None
    if isinstance(doc, dict) and doc.get("status") == "error":
        kind = doc.get("errorType")
        kind_text = f" ({kind})" if kind in ERROR_TYPES else ""
        raise PromError(C.PROMETHEUS_QUERY_ERROR, f"{what}: Prometheus answered HTTP {status} status=error{kind_text}")
    if status >= 500:
        raise PrometheusUnavailable(f"{what}: HTTP {status} {_short_reason(status)}")
    if status >= 400:
        raise PromError(C.PROMETHEUS_REJECTED, f"{what}: HTTP {status} {_short_reason(status)}")
    if not isinstance(doc, dict):
        raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{what}: HTTP {status} but the body is not JSON")
    data = doc.get("data")
    if doc.get("status") != "success" or not isinstance(data, dict) or "result" not in data:
        raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{what}: HTTP {status} but not a Prometheus API answer")
    return data


@dataclass(frozen=True)
class PromConnection:
    """How to reach one Prometheus: the URL, the per-request timeout (s), at most one credential (bearer ``token``
    or ``basic_auth`` = (user, password)), extra ``headers``, and TLS (``ca_pem``: PEM CA bundle to trust instead of
    the system's; ``insecure_skip_verify``: no certificate check at all). Secrets never appear in ``repr``."""

    url: str
    timeout_s: float
    token: str | None = field(default=None, repr=False)
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)
    headers: tuple[tuple[str, str], ...] = ()
    ca_pem: str | None = field(default=None, repr=False)
    insecure_skip_verify: bool = False
    #: Where the CA bundle came from (``Secret/prom-ca[ca.crt]``), for messages.
    ca_origin: str = ""
    #: The addresses the URL's host name resolved to when it was vetted (:func:`vet_url`); the client connects to
    #: the first (the name still goes in ``Host``, SNI and the certificate check). Empty: the host is an address,
    #: or (tests) let urllib3 resolve the name.
    addresses: tuple[str, ...] = ()


def _tls_context(conn: PromConnection) -> ssl.SSLContext | None:
    """The TLS context for ``conn`` (None: urllib3's default, the system CAs). Raises ``PrometheusTLSError`` when
    the CA bundle is not PEM certificates."""
    if not conn.url.startswith("https://"):
        return None
    if conn.insecure_skip_verify:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    if conn.ca_pem is None:
        return None
    try:
        return ssl.create_default_context(cadata=conn.ca_pem)
    except (ssl.SSLError, ValueError):
        raise PromError(C.PROMETHEUS_TLS_ERROR, f"CA bundle {conn.ca_origin or '(spec.prometheus.tls.ca)'} holds no "
                        "PEM certificate") from None


def tls_problem(exc: BaseException) -> str | None:
    """The certificate problem behind a urllib3 failure, in OpenSSL's fixed words, or None if it was not TLS."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ssl.SSLCertVerificationError):
            text = str(e.verify_message or e.reason or "certificate verify failed").rstrip(".")
            return f"certificate verify failed: {text}"
        if isinstance(e, ssl.SSLError):
            reason = str(e.reason or "").replace("_", " ").lower()
            if reason == "wrong version number":
                return "the server does not speak TLS (wrong version number): use an http:// URL?"
            return f"TLS handshake failed ({reason or type(e).__name__})"
        todo.extend(a for a in getattr(e, "args", ()) if isinstance(a, BaseException))
        todo.extend(x for x in (e.__cause__, e.__context__, getattr(e, "reason", None))
                    if isinstance(x, BaseException))
    return None


class PromClient:
    """:class:`PromApi` over urllib3: GET only, no redirects, no retries, no environment proxies, a timeout per
    request, answers cut at :data:`MAX_BODY_BYTES`, and the credential (when given) only in requests to ``url``'s
    own host. ``requests_sent`` counts the requests made (the re-plan cycle's query budget is checked on it)."""

    def __init__(self, url: str, *, timeout_s: float, token: str | None = None,
                 basic_auth: tuple[str, str] | None = None, headers: tuple[tuple[str, str], ...] = (),
                 ca_pem: str | None = None, insecure_skip_verify: bool = False, ca_origin: str = "",
                 addresses: tuple[str, ...] = ()) -> None:
        import urllib3

        conn = PromConnection(url, timeout_s, token, basic_auth, headers, ca_pem, insecure_skip_verify, ca_origin)
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.requests_sent = 0
        self._headers = {k: v for k, v in headers}
        self._headers["Accept"] = "application/json"
        try:  # a credential no header can carry is a named refusal, not a ValueError out of urllib3
            if token:
                self._headers["Authorization"] = f"Bearer {bearer_token(token, 'the bearer token')}"
            elif basic_auth is not None:
                basic_auth = (basic_user(basic_auth[0], "the basic-auth user name"),
                              basic_password(basic_auth[1], "the basic-auth password"))
        except BadCredential as exc:
            raise PromError(C.PROMETHEUS_AUTH_REFUSED, f"{exc}; no request sent") from None
        if not token and basic_auth is not None:
            raw = f"{basic_auth[0]}:{basic_auth[1]}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(raw).decode()
        ctx = _tls_context(conn)
        kwargs: dict[str, Any] = {"ssl_context": ctx} if ctx is not None else {}
        if insecure_skip_verify:
            kwargs["cert_reqs"] = "CERT_NONE"
            kwargs["assert_hostname"] = False
        try:  # the request is built from these validated parts, never from the raw string (:mod:`.url`)
            self._url: PromUrl = parse_prom_url(url)
        except UrlRefused as exc:
            raise PromError(C.PROMETHEUS_URL_REFUSED, f"{exc}; no request sent") from None
        from . import transport as prom_transport

        #: Monotonic end of the reconcile's cycle (:mod:`kvplan_operator.cycle`), None: only ``timeout_s`` bounds
        #: a request; ``cycle_s`` is that budget in seconds, for messages.
        self.cycle_deadline: float | None = None
        self.cycle_s: float | None = None
        self._http = prom_transport.pool_manager(retries=False, timeout=urllib3.Timeout(total=timeout_s), **kwargs)
        # One pool bound to the validated host and port: a request target is a path, and urllib3 refuses (instead
        # of sending) any absolute URL naming another host (HostChangedError). A name is reached at the address
        # vetted for it (no second lookup), with the name in Host, SNI and the certificate check.
        connect_to, pool_kw = self._url.host, {}
        if self._url.kind == "name" and addresses:
            connect_to = addresses[0]
            self._headers["Host"] = self._url.authority
            if self._url.scheme == "https":
                pool_kw["server_hostname"] = self._url.host
        self._pool = self._http.connection_from_host(connect_to, self._url.effective_port, self._url.scheme,
                                                     pool_kwargs=pool_kw)
        self._host = self._url.authority
        self._insecure = insecure_skip_verify

    @classmethod
    def connect(cls, conn: PromConnection) -> PromClient:
        """A client for ``conn`` (raises ``PrometheusTLSError`` for a CA bundle that is not PEM)."""
        return cls(conn.url, timeout_s=conn.timeout_s, token=conn.token, basic_auth=conn.basic_auth,
                   headers=conn.headers, ca_pem=conn.ca_pem, insecure_skip_verify=conn.insecure_skip_verify,
                   ca_origin=conn.ca_origin, addresses=conn.addresses)

    def _get(self, path: str, params: Mapping[str, str], what: str, max_points: int | None = None
             ) -> Mapping[str, Any]:
        import urllib3

        target = f"{self._url.path}{path}?{urllib.parse.urlencode(params)}"
        self.requests_sent += 1
        from .. import deadline
        from . import stream as prom_stream, transport as prom_transport

        guard = deadline.RequestGuard(self.timeout_s, self.cycle_deadline)
        with guard:  # bounds the whole request (connect, TLS, headers, body), not each read
            if guard.fired is not None:  # stopping, or the cycle deadline already passed: send nothing
                raise prom_transport.cut_error(guard, what=what, host=self._host, limit_s=self.timeout_s,
                                               cycle_s=self.cycle_s)
            try:
                with warnings.catch_warnings():
                    if self._insecure:  # opted in explicitly, and noted in status: not a warning per request
                        warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
                    rsp = self._pool.request("GET", target, headers=self._headers, redirect=False,
                                             preload_content=False, assert_same_host=True,
                                             timeout=prom_transport.timeout(guard))
                try:
                    read = prom_transport.body_reader(rsp, guard)
                    if 200 <= rsp.status < 300:  # streamed into compact series (:mod:`.stream`)
                        return prom_stream.read_data(rsp.status, read, parse_response, what=what,
                                                     max_bytes=MAX_BODY_BYTES,
                                                     max_series=MAX_ANSWER_SERIES, max_points=max_points)
                    body = _read_body(read, MAX_ERROR_BODY_BYTES)  # only its status and errorType are read
                finally:  # never back to the pool: a body cut short would be the next answer's start
                    rsp.close()
                    rsp.release_conn()
            except (urllib3.exceptions.HTTPError, OSError, PromError) as exc:
                if guard.fired is not None or prom_transport.is_cut(exc):
                    raise prom_transport.cut_error(guard, what=what, host=self._host, limit_s=self.timeout_s,
                                                   cycle_s=self.cycle_s) from None
                if isinstance(exc, PromError):
                    raise
                problem = tls_problem(exc)
                if problem is not None:
                    raise PromError(C.PROMETHEUS_TLS_ERROR, f"{what}: TLS to {self.url} failed: {problem}") from None
                name = type(exc).__name__
                kind = "timed out" if "Timeout" in name or "timed out" in str(exc) else f"failed ({name})"
                raise PrometheusUnavailable(f"{what}: request to {self._host} {kind}") from None
            except Exception as exc:  # http.client's own errors on a socket the guard shut down
                if guard.fired is not None or prom_transport.is_cut(exc):
                    raise prom_transport.cut_error(guard, what=what, host=self._host, limit_s=self.timeout_s,
                                                   cycle_s=self.cycle_s) from None
                raise
        if len(body) > MAX_BODY_BYTES:
            raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{what}: the answer is larger than "
                            f"{MAX_BODY_BYTES // 2**20} MiB (a selector or class label matching far too many series?)")
        try:
            return parse_response(rsp.status, body, what=what)
        except PromError as exc:
            raise with_retry_after(exc, rsp.status, rsp.headers) from None

    def query(self, promql: str, *, at: float | None = None) -> Mapping[str, Any]:
        params = {"query": promql} | ({"time": repr(float(at))} if at is not None else {})
        return self._get("/api/v1/query", params, "instant query")

    def query_range(self, promql: str, *, start: float, end: float, step: float) -> Mapping[str, Any]:
        params = {"query": promql, "start": repr(float(start)), "end": repr(float(end)), "step": f"{int(step)}s"}
        return self._get("/api/v1/query_range", params, "range query",
                         max_points=int(max(0.0, end - start) // max(1.0, float(int(step)))) + 1)


def _read_body(read: Callable[[int], bytes], limit: int) -> bytes:
    """At most ``limit`` bytes of a body, in chunks (each read is checked against the request's deadline)."""
    parts: list[bytes] = []
    size = 0
    while size < limit:
        chunk = read(min(1 << 20, limit - size))
        if not chunk:
            break
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts)


def default_prom_factory(conn: PromConnection) -> PromApi:
    """The operator's :attr:`Deps.prom_factory <kvplan_operator.run.Deps.prom_factory>`."""
    return PromClient.connect(conn)
