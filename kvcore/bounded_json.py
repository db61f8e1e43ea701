"""JSON parsing with bounded work: size, number of values, nesting depth and duplicate keys checked first.

``json.loads`` recurses once per nesting level (a document 100,000 ``[`` deep raises ``RecursionError``), spends
time in proportion to the number of values, and keeps the last of two equal keys (so two readers of one document
can disagree on what it says). :func:`load_bounded_json` refuses, each with a :class:`BoundedJsonError` naming the
limit:

* more than ``max_bytes`` bytes, or bytes that are not UTF-8 (a leading byte-order mark is allowed);
* more than ``max_separators`` commas and colons (a bound on the number of values, counted in C before parsing);
* nesting deeper than ``max_depth`` arrays and objects (counted on the text with its strings removed, so the
  parser never recurses deeper);
* ``NaN``, ``Infinity`` and ``-Infinity`` (not JSON);
* an object with a duplicate key.

Every check before the parse is a pass of C code over the text, in pieces, so the cost of refusing a hostile
document is proportional to its (bounded) size, never to its nesting, and ``pause`` is offered between pieces.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from itertools import accumulate
from typing import Any

#: A JSON string (escapes included), in UTF-8 bytes; the text between two quotes is what nesting must not be
#: counted in. The unrolled form (no alternation per character) keeps the match in C at memchr-like speed.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
#: Every byte but the four brackets, deleted (``bytes.translate``) before the depth is counted.
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
#: Each bracket's change of the nesting level.
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
#: Bytes (or brackets) one C pass handles between two calls of ``pause``: 2 KiB is a few microseconds of work.
_CHUNK = 2048


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


def _brackets(data: bytes, pause: Callable[[], None]) -> bytes:
    """The brackets of ``data`` outside its strings, in order: one string match, and at most :data:`_CHUNK` bytes
    translated, between two calls of ``pause`` (a reader thread yields the interpreter there)."""
    out: list[bytes] = []
    at = 0
    for match in _STRING.finditer(data):
        out += _chunked_translate(data, at, match.start(), pause)
        at = match.end()
        pause()
    out += _chunked_translate(data, at, len(data), pause)
    return b"".join(out)


def _chunked_translate(data: bytes, start: int, end: int, pause: Callable[[], None]) -> list[bytes]:
    pieces = []
    for at in range(start, end, _CHUNK):
        pieces.append(data[at:min(end, at + _CHUNK)].translate(None, _NOT_BRACKET))
        pause()
    return pieces


def nesting_exceeds(data: bytes, max_depth: int, pause: Callable[[], None] = lambda: None) -> bool:
    """Whether the arrays and objects of the UTF-8 text ``data`` may nest deeper than ``max_depth``: the most
    brackets open at once, outside strings, counted left to right :data:`_CHUNK` brackets at a time. Brackets left
    open (a truncated document) count, so deep broken text is refused here. A closing bracket with nothing open
    ends the count: the parser, which reads left to right too, stops at that byte, at no deeper level than
    counted so far."""
    brackets = _brackets(data, pause)
    level = 0
    for at in range(0, len(brackets), _CHUNK):
        pause()
        levels = list(accumulate(map(_STEP.__getitem__, brackets[at:at + _CHUNK]), initial=level))
        if max(levels) > max_depth:
            return True
        if min(levels) < 0:
            return False
        level = levels[-1]
    return False


def _separators(raw: bytes, pause: Callable[[], None]) -> int:
    """Commas and colons in ``raw``, :data:`_CHUNK` bytes between two calls of ``pause``."""
    count = 0
    for at in range(0, len(raw), _CHUNK):
        piece = raw[at:at + _CHUNK]
        count += piece.count(b",") + piece.count(b":")
        pause()
    return count


def _no_pause() -> None:
    return None


def load_bounded_json(data: str | bytes, *, max_bytes: int, max_separators: int, max_depth: int,
                      pause: Callable[[], None] = _no_pause) -> Any:
    """The JSON value in ``data`` (see the module docstring for what is refused). ``pause`` is called between the
    checks, between the strings the depth check skips, and for every object and number the parser builds: often
    (every few microseconds of work), so a caller that yields the interpreter when its own slice is spent (the
    plugin's reader thread) never holds it for long in one piece."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if len(raw) > max_bytes:
        raise BoundedJsonError(f"{len(raw):,} bytes, more than the {max_bytes:,} allowed")
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise BoundedJsonError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    separators = _separators(raw, pause)
    if separators > max_separators:
        raise BoundedJsonError(f"{separators:,} commas and colons, more than the {max_separators:,} allowed "
                               "(too many values)")
    pause()
    if nesting_exceeds(raw, max_depth, pause):
        raise BoundedJsonError(f"arrays and objects nest deeper than {max_depth} levels")
    pause()

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        pause()
        return _no_duplicates(items)

    def number(parse: Callable[[str], Any]) -> Callable[[str], Any]:
        def parsed(text: str) -> Any:
            pause()
            return parse(text)
        return parsed

    try:  # the hooks run once per object and number, so ``pause`` is also called throughout the parse itself
        return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=pairs, parse_int=number(int),
                          parse_float=number(float))
    except BoundedJsonError:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError; an integer past Python's digit limit
        raise BoundedJsonError(f"not valid JSON ({' '.join(str(exc).split())[:200]})") from None
