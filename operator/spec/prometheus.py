"""The KVPlan's ``spec.prometheus``: where the histories are read and with which credentials, and the checks the
schema cannot express. Part of :mod:`kvplan_operator.spec` (kept apart to keep that module small); pure, no I/O.
The URL policy that decides which hosts the operator may send a credential to is :mod:`kvplan_operator.prom`'s.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from ..prom.url import FIELD, UrlRefused, parse_prom_url
from .base import CONFIGMAP_KEY, DNS_SUBDOMAIN, HEADER_NAME, HEADER_VALUE, SpecModel, parse_duration

#: ``http(s)://host[:port][/path]`` as the CRD's pattern says it: a DNS name whose last label starts with a letter,
#: a dotted-quad IPv4 address without leading zeros or a bracketed IPv6 address; a port without a leading zero; a
#: path of RFC 3986 characters without empty segments. No userinfo, query, fragment, percent-encoded host,
#: backslash, whitespace or trailing dot. The full rules (one reading for every parser) are
#: :func:`kvplan_operator.prom.url.parse_prom_url`'s.
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
PROMETHEUS_URL = (r"^https?://((([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?\.)*[A-Za-z]([-A-Za-z0-9]*[A-Za-z0-9])?)"
                  rf"|{_OCTET}(\.{_OCTET}){{3}}|\[[0-9A-Fa-f:.]+\])"
                  r"(:[1-9][0-9]{0,4})?(/([-A-Za-z0-9._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})+)*/?$")
#: Headers ``spec.prometheus.headers`` may not set: credentials go through the auth fields (so they stay on the
#: Prometheus host and out of the spec), and the rest belong to HTTP itself.
FORBIDDEN_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "host", "content-length",
                               "transfer-encoding", "connection", "accept", "te", "upgrade"})


class SecretRef(SpecModel):
    name: str = Field(pattern=DNS_SUBDOMAIN, max_length=253)
    key: str = Field("token", pattern=CONFIGMAP_KEY, max_length=253)


class KeyRef(SpecModel):
    """A key of a Secret or ConfigMap in the KVPlan's namespace (the CA bundle)."""

    name: str = Field(pattern=DNS_SUBDOMAIN, max_length=253)
    key: str = Field("ca.crt", pattern=CONFIGMAP_KEY, max_length=253)


class BasicAuth(SpecModel):
    """Basic auth from a Secret in the KVPlan's namespace (never a password in the spec)."""

    secret_ref: SecretRef
    username_key: str = Field("username", pattern=CONFIGMAP_KEY, max_length=253)
    password_key: str = Field("password", pattern=CONFIGMAP_KEY, max_length=253)


class Tls(SpecModel):
    """TLS to an ``https://`` Prometheus: a CA bundle (PEM) from a Secret or a ConfigMap, or an explicit
    insecureSkipVerify (no certificate check: anyone on the path can read the credential)."""

    ca_secret_ref: KeyRef | None = None
    ca_config_map_ref: KeyRef | None = None
    insecure_skip_verify: bool = False


class Prometheus(SpecModel):
    url: str = Field(max_length=2048, description="http(s)://host[:port][/path]; see kvplan_operator.prom.")
    auth_secret_ref: SecretRef | None = Field(None, description="Bearer token from a Secret.")
    bearer_token_file: str | None = Field(None, pattern=r"^/[^\x00]*$", max_length=1024,
                                          description="Bearer token from a file in the operator's pod; only files "
                                          "the operator allows (--prometheus-token-files).")
    basic_auth: BasicAuth | None = None
    headers: dict[str, str] = Field(default_factory=dict, max_length=16, description="Extra request headers, e.g. "
                                    "X-Scope-OrgID for Mimir, Cortex or Thanos tenants.")
    tls: Tls | None = None
    lookback: str = Field("6h", description="History window; 6 h covers a diurnal swing without stale weeks.")
    windows: int = Field(6, ge=1, le=48, description="Sub-windows for the drift radius; 6 x 1 h by default.")
    timeout_seconds: float = Field(5.0, ge=1, le=60, description="Per-query timeout; 1 s is the least a loaded "
                                   "Prometheus needs for a 6 h range query, 60 s keeps a reconcile bounded.")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not re.match(PROMETHEUS_URL, value):
            raise ValueError("needs http:// or https://, a host and an optional port and path; userinfo (user@), "
                             "a query (?), a fragment (#), percent-encoding or a backslash in the host, whitespace "
                             "and non-ASCII characters are not allowed")
        try:
            parse_prom_url(value)
        except UrlRefused as exc:
            raise ValueError(str(exc).removeprefix(FIELD + ": ")) from None
        return value

    @property
    def lookback_seconds(self) -> float:
        return parse_duration(self.lookback)


def prometheus_errors(prom: Prometheus) -> list[tuple[str, str]]:
    """The rules of ``spec.prometheus`` the schema cannot express, as ``(field_path, message)``."""
    errs: list[tuple[str, str]] = []
    given = [name for name, v in (("authSecretRef", prom.auth_secret_ref), ("bearerTokenFile", prom.bearer_token_file),
                                  ("basicAuth", prom.basic_auth)) if v is not None]
    if len(given) > 1:
        errs.append(("spec.prometheus", f"give at most one credential, got {' and '.join(given)}"))
    for name, value in prom.headers.items():
        path = f"spec.prometheus.headers.{name}"
        if not re.match(HEADER_NAME, name) or len(name) > 256:
            errs.append((path, "not an HTTP header name"))
        elif name.lower() in FORBIDDEN_HEADERS:
            errs.append((path, "not allowed here" + (": use authSecretRef, bearerTokenFile or basicAuth"
                                                     if "authorization" in name.lower() else "")))
        if not re.match(HEADER_VALUE, value) or len(value) > 1024:
            errs.append((path, "value must be printable ASCII, at most 1024 characters"))
    tls = prom.tls
    if tls is not None:
        if not prom.url.startswith("https://"):
            errs.append(("spec.prometheus.tls", "only for an https:// url"))
        if tls.ca_secret_ref is not None and tls.ca_config_map_ref is not None:
            errs.append(("spec.prometheus.tls", "give caSecretRef or caConfigMapRef, not both"))
        if tls.insecure_skip_verify and (tls.ca_secret_ref or tls.ca_config_map_ref):
            errs.append(("spec.prometheus.tls.insecureSkipVerify", "a CA bundle is pointless when nothing is "
                         "verified: give one or the other"))
    return errs
