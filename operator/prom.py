"""Talking to Prometheus safely: where the operator may send a request, and a client that keeps the bearer token on
that host and never copies a response body anywhere.

URL rules (``spec.prometheus.url`` is written by whoever may write a KVPlan, and the operator attaches its
Secret's bearer token to every request, so the URL decides where a credential goes):

- syntax (checked in :mod:`kvplan_operator.spec`, no I/O): ``http``/``https``, a host, no userinfo, no query, no
  fragment (a ``#`` would silently drop the API path);
- policy (:func:`check_url`, in the observe phase): the host must match the operator's allowed list when one is
  configured (``--prometheus-allowed-hosts`` / ``KVPLAN_PROMETHEUS_ALLOWED_HOSTS``, set from the chart's
  ``prometheus.allowedHosts``); and unless the list names it explicitly, it must not be a metadata host
  (``metadata.google.internal``, ...) nor resolve to a link-local address (169.254.0.0/16, fe80::/10), where
  cloud credentials live.

The client (:class:`PromClient`) sends only ``GET`` to ``<url>/api/v1/query[_range]``, follows no redirect (a 3xx
is an error: the token never reaches another host), uses no proxy from the environment, and turns every failure
into a :class:`PromError` whose message has the HTTP status code and a short fixed reason, never the body.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import json
import os
import socket
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from . import conditions as C

#: Hosts that serve cloud instance credentials, refused unless allowed by name.
METADATA_HOSTS = ("metadata.google.internal", "metadata.goog", "metadata", "instance-data",
                  "instance-data.ec2.internal", "metadata.azure.com", "metadata.tencentyun.com")
#: Addresses refused unless allowed by name: IPv4 and IPv6 link-local (AWS/GCP/Azure metadata is 169.254.169.254,
#: AWS's IPv6 one fd00:ec2::254) and Alibaba's 100.100.100.200.
REFUSED_NETWORKS = tuple(ipaddress.ip_network(n) for n in
                         ("169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "100.100.100.200/32"))
#: Prometheus' ``errorType`` values quoted in a message (a fixed vocabulary; anything else is not quoted).
ERROR_TYPES = ("timeout", "canceled", "execution", "bad_data", "internal", "unavailable", "not_found",
               "not_acceptable")
ALLOWED_HOSTS_ENV = "KVPLAN_PROMETHEUS_ALLOWED_HOSTS"

Resolver = Callable[[str], Sequence[str]]


class PromError(RuntimeError):
    """A Prometheus failure with the condition ``reason`` it maps to and a short message (no response body)."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class PrometheusUnavailable(PromError):
    """Connection refused, DNS failure, timeout or HTTP 5xx."""

    def __init__(self, message: str) -> None:
        super().__init__(C.PROMETHEUS_UNAVAILABLE, message)


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

    @classmethod
    def from_environment(cls) -> UrlPolicy:
        raw = os.environ.get(ALLOWED_HOSTS_ENV, "")
        return cls(tuple(h.strip().lower() for h in raw.split(",") if h.strip()))


def _system_resolver(host: str) -> list[str]:
    return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, None)})


def _refused_address(text: str) -> bool:
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip.version == net.version and ip in net for net in REFUSED_NETWORKS)


def check_url(url: str, policy: UrlPolicy, *, resolve: Resolver = _system_resolver) -> str | None:
    """Why ``url`` may not be used (one line), or None. Resolves the host to catch names that point at link-local
    addresses; a host that does not resolve is left to the request (which then fails as unavailable)."""
    parts = urllib.parse.urlsplit(url)
    host = (parts.hostname or "").lower().rstrip(".")
    if parts.scheme not in ("http", "https") or not host:
        return "spec.prometheus.url: needs http:// or https:// and a host"
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment or "#" in url:
        return "spec.prometheus.url: userinfo, query and fragment are not allowed"
    try:
        port = parts.port
    except ValueError:
        return "spec.prometheus.url: invalid port"
    if policy.allowed_hosts:
        names = (host, f"{host}:{port}") if port else (host,)
        if any(fnmatch.fnmatchcase(n, pat) for pat in policy.allowed_hosts for n in names):
            return None
        return (f"spec.prometheus.url: host {host!r} is not in the operator's allowed Prometheus hosts "
                f"({', '.join(policy.allowed_hosts)})")
    if host in METADATA_HOSTS:
        return f"spec.prometheus.url: {host!r} is a cloud metadata host"
    if _refused_address(host):
        return f"spec.prometheus.url: {host} is a link-local/metadata address"
    try:
        addresses = resolve(host)
    except (OSError, UnicodeError):
        return None
    bad = [a for a in addresses if _refused_address(a)]
    if bad:
        return f"spec.prometheus.url: {host!r} resolves to the link-local/metadata address {bad[0]}"
    return None


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


class PromClient:
    """:class:`PromApi` over urllib3: GET only, no redirects, no retries, no environment proxies, a timeout per
    request, and the bearer token (when given) only in requests to ``url``'s own host."""

    def __init__(self, url: str, *, timeout_s: float, token: str | None = None) -> None:
        import urllib3

        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._headers = {"Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._http = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(total=timeout_s))
        self._host = urllib.parse.urlsplit(self.url).netloc

    def _get(self, path: str, params: Mapping[str, str], what: str) -> Mapping[str, Any]:
        import urllib3

        target = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        if urllib.parse.urlsplit(target).netloc != self._host:  # the token goes nowhere else
            raise PromError(C.PROMETHEUS_URL_REFUSED, f"{what}: the request would leave {self._host}")
        try:
            rsp = self._http.request("GET", target, headers=self._headers, redirect=False, preload_content=True)
        except urllib3.exceptions.HTTPError as exc:
            name = type(exc).__name__
            kind = "timed out" if "Timeout" in name or "timed out" in str(exc) else f"failed ({name})"
            raise PrometheusUnavailable(f"{what}: request to {self._host} {kind}") from None
        return parse_response(rsp.status, rsp.data, what=what)

    def query(self, promql: str, *, at: float | None = None) -> Mapping[str, Any]:
        params = {"query": promql} | ({"time": repr(float(at))} if at is not None else {})
        return self._get("/api/v1/query", params, "instant query")

    def query_range(self, promql: str, *, start: float, end: float, step: float) -> Mapping[str, Any]:
        params = {"query": promql, "start": repr(float(start)), "end": repr(float(end)), "step": f"{int(step)}s"}
        return self._get("/api/v1/query_range", params, "range query")
