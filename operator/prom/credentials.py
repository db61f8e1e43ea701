"""A Prometheus credential as read from a Secret key or a token file -> the value the operator sends, or a refusal
naming where it came from (never quoting it).

``kubectl create secret generic --from-file=token=./token.txt`` keeps the file's trailing newline, and an editor
adds one; an HTTP header cannot carry it (urllib3 raised ``ValueError``, which became ``InternalError`` naming
nothing). As Prometheus itself does for its ``*_file`` credentials, whitespace around a value is stripped
(spaces, tabs, CR, LF); what is left must be sendable:

- a bearer token: printable ASCII without space (RFC 6750's token68 characters and then some), not empty;
- a basic-auth user name: no ``:`` (it ends the user name), no control character, valid UTF-8, not empty;
- a basic-auth password: no control character, valid UTF-8 (it is base64-encoded, so any other character is fine).

A Secret whose bytes are not UTF-8 reaches here with the undecodable bytes as lone surrogates (the Kubernetes
wrapper decodes with ``surrogateescape``), and is refused as "not UTF-8".
"""

from __future__ import annotations

import unicodedata

WHITESPACE = " \t\r\n"


class BadCredential(ValueError):
    """A credential that cannot be sent; ``str()`` names its origin and what is wrong (never the value)."""


def _problem(value: str) -> str | None:
    for i, ch in enumerate(value):
        if 0xD800 <= ord(ch) <= 0xDFFF:
            return f"is not UTF-8 (byte {i + 1})"
        if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            return f"holds a control character (U+{ord(ch):04X}) at character {i + 1}"
    return None


def bearer_token(raw: str, origin: str) -> str:
    """The token to send for ``raw`` read from ``origin`` (``Secret/prom-token[token]``, a file path)."""
    value = raw.strip(WHITESPACE)
    if not value:
        raise BadCredential(f"{origin} is empty (or only whitespace)")
    problem = _problem(value)
    if problem is None:
        bad = next((i for i, ch in enumerate(value) if not 0x21 <= ord(ch) <= 0x7E), None)
        if bad is not None:
            problem = f"holds a space or a non-ASCII character at character {bad + 1}: a bearer token is ASCII"
    if problem is not None:
        raise BadCredential(f"{origin} {problem}")
    return value


def basic_user(raw: str, origin: str) -> str:
    value = raw.strip(WHITESPACE)
    if not value:
        raise BadCredential(f"{origin} is empty (or only whitespace)")
    problem = _problem(value) or ("holds ':', which ends a basic-auth user name" if ":" in value else None)
    if problem is not None:
        raise BadCredential(f"{origin} {problem}")
    return value


def basic_password(raw: str, origin: str) -> str:
    value = raw.strip(WHITESPACE)
    problem = _problem(value)
    if problem is not None:
        raise BadCredential(f"{origin} {problem}")
    return value
