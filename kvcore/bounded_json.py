"""JSON parsing with bounded work: size, number of values, nesting depth and duplicate keys checked first.

``json.loads`` recurses once per nesting level (a document 100,000 ``[`` deep raises ``RecursionError``), spends
time in proportion to the number of values, and keeps the last of two equal keys (so two readers of one document
can disagree on what it says). :func:`load_bounded_json` refuses, each with a :class:`BoundedJsonError` naming the
limit:

* more than ``max_bytes`` bytes, or bytes that are not UTF-8 (a leading byte-order mark is allowed);
* more than ``max_separators`` commas and colons (a bound on the number of values, counted in C before parsing);
* nesting deeper than ``max_depth`` arrays and objects (counted by C string passes on the text with its strings
  removed, so the parser never recurses deeper);
* ``NaN``, ``Infinity`` and ``-Infinity`` (not JSON);
* an object with a duplicate key.

Every check before the parse is a handful of passes of C code over the text, so the cost of refusing a hostile
document is proportional to its (bounded) size, never to its nesting.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

#: A JSON string (escapes included), in UTF-8 bytes; the text between two quotes is what nesting must not be
#: counted in. The unrolled form (no alternation per character) keeps the match in C at memchr-like speed.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
#: Every byte but the four brackets, deleted (``bytes.translate``) before the depth is counted.
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


class BoundedJsonError(ValueError):
    """A document refused by a bound or by the JSON parser; the message says which."""


def _reject_constant(name: str) -> float:
    raise BoundedJsonError(f"not valid JSON ({name} is not a JSON number)")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise BoundedJsonError(f"duplicate key {json.dumps(key)[:80]} in one object")
            seen.add(key)
    return out


def nesting_exceeds(data: bytes, max_depth: int, pause: Callable[[], None] = lambda: None) -> bool:
    """Whether the arrays and objects of the UTF-8 text ``data`` may nest deeper than ``max_depth``. Each pass
    removes the innermost bracket pairs (at most ``max_depth + 1`` passes); brackets left unpaired (a truncated
    document) count one level each, so shallow broken text is left to the parser to report and deep broken text is
    refused here."""
    unquoted = _STRING.sub(b"", data)
    pause()
    brackets = unquoted.translate(None, _NOT_BRACKET)
    for passes in range(max_depth + 1):
        if not brackets:
            return False
        shorter = brackets.replace(b"[]", b"").replace(b"{}", b"")
        if shorter == brackets:
            return passes + len(brackets) > max_depth
        brackets = shorter
    return True


def _no_pause() -> None:
    return None


def load_bounded_json(data: str | bytes, *, max_bytes: int, max_separators: int, max_depth: int,
                      pause: Callable[[], None] = _no_pause) -> Any:
    """The JSON value in ``data`` (see the module docstring for what is refused). ``pause`` is called between the
    checks and the parse (a reader thread yields the interpreter there)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if len(raw) > max_bytes:
        raise BoundedJsonError(f"{len(raw):,} bytes, more than the {max_bytes:,} allowed")
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise BoundedJsonError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    separators = raw.count(b",") + raw.count(b":")
    if separators > max_separators:
        raise BoundedJsonError(f"{separators:,} commas and colons, more than the {max_separators:,} allowed "
                               "(too many values)")
    pause()
    if nesting_exceeds(raw, max_depth, pause):
        raise BoundedJsonError(f"arrays and objects nest deeper than {max_depth} levels")
    pause()
    try:
        return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicates)
    except BoundedJsonError:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError; an integer past Python's digit limit
        raise BoundedJsonError(f"not valid JSON ({' '.join(str(exc).split())[:200]})") from None
