"""``spec.prometheus.url`` read once, strictly, into the parts the HTTP client is then built from.

The operator attaches a bearer token to every Prometheus request, so the host a URL names is where a credential
goes. Two parsers reading one string differently is how a token leaves: ``urllib.parse`` reads
``http://127.0.0.2\\.monitoring.svc/`` as host ``127.0.0.2\\.monitoring.svc`` (which matches ``*.monitoring.svc``)
while urllib3, the client, connects to ``127.0.0.2``. So :func:`parse_prom_url` accepts only a form both read
the same way, and :class:`PromUrl` is what the client connects to (host, port) and what the policy checks; the
raw string is never handed to the client.

Accepted (everything else is refused with a one-line reason naming ``spec.prometheus.url``):

- ``http://`` or ``https://`` (lowercase), then an authority and an optional path; nothing but printable ASCII
  without spaces (no tab, CR, LF -- ``urllib.parse`` drops them silently --, no control or non-ASCII character:
  an internationalised name is written in its ``xn--`` form), no backslash anywhere;
- no userinfo (``@``), no query (``?``), no fragment (``#``), no percent-encoding in the authority (``%2e``,
  an IPv6 zone id ``%25eth0``);
- the host is a DNS name (labels of ``a-z0-9-``, case folded to lowercase, no empty label, no trailing dot, whose
  last label starts with a letter), a canonical dotted-quad IPv4 address (four decimal parts, no leading zero:
  the decimal ``2852039166``, octal ``0251.0376.0251.0376``, hex ``0xa9fea9fe`` and short ``169.254.43518``
  spellings of 169.254.169.254 are refused), or a bracketed IPv6 address without zone id;
- the port, if any, is 1-65535 written without a leading zero; the path holds only RFC 3986 path characters
  (percent-escapes complete) and no empty segment.

Then both ``urllib.parse.urlsplit`` and urllib3's ``parse_url`` must read the same scheme, host and port as this
module; a URL they read differently is refused even if it passed the rules above.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from dataclasses import dataclass

FIELD = "spec.prometheus.url"
#: The longest URL accepted (the CRD's maxLength).
MAX_URL = 2048
_AUTHORITY_PATH = re.compile(r"^(https?)://([^/]*)(.*)$", re.S)
_NAME_PORT = re.compile(r"^([A-Za-z0-9.-]+)(?::([0-9]*))?$")
_V6_PORT = re.compile(r"^\[([0-9A-Fa-f:.]+)\](?::([0-9]*))?$")
_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_QUAD = re.compile(rf"^{_OCTET}(\.{_OCTET}){{3}}$")
_PATH = re.compile(r"^(/([A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})+)*/?$")


class UrlRefused(ValueError):
    """A URL the operator does not send a request to; ``str()`` is the one-line reason, naming the field."""


@dataclass(frozen=True)
class PromUrl:
    """A Prometheus base URL in canonical parts: ``host`` is a lowercase DNS name, a dotted-quad IPv4 address or a
    compressed IPv6 address (no brackets); ``kind`` says which (``name``, ``ipv4``, ``ipv6``); ``port`` None means
    the scheme's; ``path`` is ``""`` or ``/...`` without a trailing ``/``."""

    scheme: str
    host: str
    port: int | None
    path: str
    kind: str

    @property
    def host_text(self) -> str:
        """The host as written in a URL (IPv6 in brackets)."""
        return f"[{self.host}]" if self.kind == "ipv6" else self.host

    @property
    def authority(self) -> str:
        return self.host_text + (f":{self.port}" if self.port is not None else "")

    @property
    def effective_port(self) -> int:
        return self.port if self.port is not None else (443 if self.scheme == "https" else 80)

    @property
    def base(self) -> str:
        """The canonical URL (what messages show)."""
        return f"{self.scheme}://{self.authority}{self.path}"


def _refuse(why: str) -> UrlRefused:
    return UrlRefused(f"{FIELD}: {why}")


def _port(text: str | None) -> int | None:
    if text is None:
        return None
    if not text or len(text) > 5 or (len(text) > 1 and text[0] == "0") or not 1 <= int(text) <= 65535:
        raise _refuse("the port must be 1-65535, written without a leading zero")
    return int(text)


def _name(raw: str) -> tuple[str, str]:
    """(canonical host, kind) of a host that is not bracketed."""
    host = raw.lower()
    if host.endswith("."):
        raise _refuse(f"write the host without a trailing dot ({raw[:64]!r})")
    labels = host.split(".")
    if labels[-1][:1].isdigit():  # an IP address in some spelling: only the canonical one is accepted
        if _QUAD.match(host):
            return host, "ipv4"
        raise _refuse(f"{raw[:64]!r} is not a DNS name nor an IPv4 address in dotted-quad form (a.b.c.d, decimal, "
                      "no leading zeros): decimal, octal, hex and short forms are refused")
    if len(host) > 253 or not all(_LABEL.match(label) for label in labels):
        raise _refuse(f"host {raw[:64]!r} is not a DNS name (labels of letters, digits and '-', 1-63 characters, "
                      "none empty)")
    return host, "name"


def _cross_check(url: str, parsed: PromUrl) -> None:
    """Both parsers that ever see the URL must read the same scheme, host and port as :func:`parse_prom_url`."""
    from urllib3.util import parse_url

    def same(host: str | None, port: int | None, scheme: str | None) -> bool:
        text = (host or "").lower().strip("[]")
        if parsed.kind == "ipv6":
            try:
                text = str(ipaddress.IPv6Address(text))
            except ValueError:
                return False
        return (text, port, scheme) == (parsed.host, parsed.port, parsed.scheme)

    try:
        split = urllib.parse.urlsplit(url)
        lib = same(split.hostname, split.port, split.scheme)
        u3 = parse_url(url)
        client = same(u3.host, u3.port, u3.scheme)
    except ValueError:  # urllib3's LocationParseError is a ValueError too
        lib = client = False
    if not (lib and client):
        raise _refuse("the URL parser and the HTTP client read this URL differently; write it plainly")


def parse_prom_url(url: str) -> PromUrl:
    """``url`` -> :class:`PromUrl`, or :class:`UrlRefused` (the rules of the module docstring)."""
    if not isinstance(url, str) or not url:
        raise _refuse("needs http:// or https:// and a host")
    if len(url) > MAX_URL:
        raise _refuse(f"longer than {MAX_URL} characters")
    if any(not 0x21 <= ord(ch) <= 0x7E for ch in url):
        raise _refuse("holds a space, tab, newline, control or non-ASCII character (write an internationalised "
                      "host name in its xn-- form)")
    if "\\" in url:
        raise _refuse("holds a backslash")
    m = _AUTHORITY_PATH.match(url)
    if m is None:
        raise _refuse("needs http:// or https:// (lowercase) and a host")
    scheme, authority, path = m.groups()
    if "?" in url or "#" in url:
        raise _refuse("userinfo, query and fragment are not allowed (a query or a fragment)")
    if "@" in authority:
        raise _refuse("userinfo, query and fragment are not allowed (userinfo: user@)")
    if "%" in authority:
        raise _refuse("percent-encoding in the host (or an IPv6 zone id) is not allowed")
    if not authority:
        raise _refuse("needs http:// or https:// and a host")
    v6 = _V6_PORT.match(authority)
    if v6 is not None:
        try:
            host, kind = str(ipaddress.IPv6Address(v6.group(1))), "ipv6"
        except ValueError:
            raise _refuse(f"[{v6.group(1)[:48]}] is not an IPv6 address") from None
        port = _port(v6.group(2))
    else:
        np = _NAME_PORT.match(authority)
        if np is None:
            raise _refuse("the host may hold only letters, digits, '-' and '.' (or be a bracketed IPv6 address), "
                          "followed by an optional :port")
        host, kind = _name(np.group(1))
        port = _port(np.group(2))
    if not _PATH.match(path):
        raise _refuse("the path may hold only RFC 3986 path characters, complete %XX escapes and no empty segment")
    parsed = PromUrl(scheme, host, port, path.rstrip("/"), kind)
    _cross_check(url, parsed)
    return parsed
