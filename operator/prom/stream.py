"""Prometheus answers read streaming into compact form (issue 26, item 4): the memory of one answer is bounded by
construction, whatever the server sends within the client's caps.

``json.loads`` of a 64 MiB matrix answer made about 500 MB of Python objects (a list, a float and a string per
point). :func:`read_answer` instead reads the body in chunks and decodes the ``data.result`` array one element at a
time (``json.JSONDecoder.raw_decode``), turning each series at once into:

- ``metric``: its labels, with every string shared through one table per answer (the same ``le`` or class value in
  thousands of series is one object);
- ``values``: a :class:`Points` (time and value as two ``array('d')``: 16 bytes a point), checked as it is read:
  each point ``[time, value]`` with numbers (``"NaN"``/``"+Inf"`` are numbers; the history checks judge them), and
  at most ``max_points`` of them (a range query has ``(end - start) / step + 1``).

Bounds, each a named reason: at most ``max_series`` elements (``TooManySeries``), one element at most
:data:`MAX_ELEMENT_CHARS` of text and the whole answer at most :data:`RETAINED_BUDGET` bytes of what is kept
(``PrometheusBadResponse``), besides the client's cap on the body. Other members of the document (``status``,
``errorType``, ``warnings``, ...) are read one value at a time and only the short ones the client interprets are
kept. What is kept is returned as the API document (``{"status", "data": {"resultType", "result"}, ...}``), for the
client's own interpretation of it.
"""

from __future__ import annotations

import codecs
import json
import math
import re
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, overload

from .. import conditions as C
from .error import PromError

#: Bytes read from the socket at a time.
CHUNK = 256 * 1024
#: Longest text of one element of ``data.result`` (one series), characters: a series of a range query over 48
#: windows is about 2 KB, an engine's ``vllm:cache_config_info`` with its 30 labels about 1.5 KB.
MAX_ELEMENT_CHARS = 1 << 20
#: Most bytes one answer may keep (labels, points and per-series overhead, as estimated while reading): 1,024 keys x
#: 64 buckets x 48 windows (the history caps: 65,536 series) take about 90 MB; three KVPlans at the caps at once
#: then stay well inside the chart's 1 GiB memory limit.
RETAINED_BUDGET = 160 * 1024 * 1024
#: Top-level and ``data`` members kept (short values only); anything else is read and dropped.
KEPT = {"status", "errorType", "error", "resultType"}
#: Longest kept member value, characters (an error text is cut later anyway).
MAX_KEPT_CHARS = 64 * 1024
#: Estimated bytes per series (its dict, its labels dict, the Points object and its two arrays) and per point.
SERIES_OVERHEAD, POINT_BYTES, STRING_OVERHEAD = 700, 16, 60
_WS = re.compile(r"[ \t\n\r]*")
_DELIMITERS = frozenset(",]}: \t\n\r")
_DECODER = json.JSONDecoder()


class Malformed(Exception):
    """The body is not JSON (the client reports it as the API's own words for a non-JSON body)."""


class Points(Sequence[tuple[float, float]]):
    """A series' points as ``(time, value)`` floats, 16 bytes each."""

    __slots__ = ("t", "v")

    def __init__(self) -> None:
        self.t = array("d")
        self.v = array("d")

    def __len__(self) -> int:
        return len(self.t)

    @overload
    def __getitem__(self, i: int) -> tuple[float, float]: ...

    @overload
    def __getitem__(self, i: slice) -> list[tuple[float, float]]: ...

    def __getitem__(self, i: int | slice) -> tuple[float, float] | list[tuple[float, float]]:
        if isinstance(i, slice):
            return list(zip(self.t[i], self.v[i]))
        return self.t[i], self.v[i]

    def __iter__(self) -> Iterator[tuple[float, float]]:
        return zip(self.t, self.v)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Points):
            return self.t == other.t and self.v == other.v
        if isinstance(other, Sequence):
            try:
                return len(other) == len(self) and all(
                    float(p[0]) == t and (float(p[1]) == v or (math.isnan(v) and math.isnan(float(p[1]))))
                    for p, (t, v) in zip(other, self))
            except (TypeError, ValueError, IndexError):
                return False
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Points({list(self)!r})"


class _Reader:
    """The body as text, read in chunks; ``pos`` is where parsing stands in ``buf``."""

    def __init__(self, read: Callable[[int], bytes], what: str) -> None:
        self.read, self.what = read, what
        self.buf, self.pos, self.eof = "", 0, False
        self.decoder = codecs.getincrementaldecoder("utf-8")("strict")

    def more(self) -> bool:
        """Read one more chunk onto the buffer (dropping what was parsed); False at the end of the body."""
        if self.eof:
            return False
        data = self.read(CHUNK)
        try:
            text = self.decoder.decode(data, final=not data)
        except UnicodeDecodeError:
            raise Malformed() from None
        if not data:
            self.eof = True
        self.buf = self.buf[self.pos:] + text
        self.pos = 0
        return bool(data) or bool(text)

    def peek(self) -> str:
        """The next character that is not whitespace ('' at the end)."""
        while True:
            m = _WS.match(self.buf, self.pos)
            self.pos = m.end() if m else self.pos
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return ""

    def expect(self, ch: str) -> None:
        if self.peek() != ch:
            raise Malformed()
        self.pos += 1

    def value(self, limit: int) -> Any:
        """One whole JSON value from here, at most ``limit`` characters long."""
        self.peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError:
                end = -1
            # a number cut by a read ("1700000000." of "1700000000.25") parses as a shorter one: complete only
            # when a delimiter follows it
            done = end >= 0 and (self.eof or (end < len(self.buf) and (
                not isinstance(value, (int, float)) or self.buf[end] in _DELIMITERS)))
            if done:
                self.pos = end
                return value
            if len(self.buf) - self.pos > limit:
                raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{self.what}: an element of the answer is longer than "
                                f"{limit // 1024} KiB (or not JSON)")
            if not self.more():
                if end >= 0:
                    self.pos = end
                    return value
                raise Malformed()

    def members(self) -> Iterator[str]:
        """An object's keys; the caller reads each value before asking for the next key."""
        self.expect("{")
        if self.peek() == "}":
            self.pos += 1
            return
        while True:
            key = self.value(MAX_KEPT_CHARS)
            if not isinstance(key, str):
                raise Malformed()
            self.expect(":")
            yield key
            c = self.peek()
            self.pos += 1
            if c == "}":
                return
            if c != ",":
                raise Malformed()

    def elements(self) -> Iterator[None]:
        """An array's elements; the caller reads each before asking for the next."""
        self.expect("[")
        if self.peek() == "]":
            self.pos += 1
            return
        while True:
            yield None
            c = self.peek()
            self.pos += 1
            if c == "]":
                return
            if c != ",":
                raise Malformed()

    def skip(self, depth: int = 0) -> None:
        """Read one value of any size and keep nothing of it."""
        if depth > 64:
            raise Malformed()
        c = self.peek()
        if c == "{":
            for _ in self.members():
                self.skip(depth + 1)
        elif c == "[":
            for _ in self.elements():
                self.skip(depth + 1)
        else:
            self.value(MAX_ELEMENT_CHARS)


class _Compactor:
    """Turns result elements into compact series, counting what the answer keeps."""

    def __init__(self, what: str, max_points: int | None) -> None:
        self.what, self.max_points = what, max_points
        self.strings: dict[str, str] = {}
        self.kept = 0

    def _str(self, s: str) -> str:
        got = self.strings.get(s)
        if got is None:
            self.strings[s] = got = s
            self.kept += STRING_OVERHEAD + len(s)
        return got

    def series(self, el: Any) -> Any:
        if not isinstance(el, dict):
            self.kept += 100
            return el
        out: dict[str, Any] = {}
        metric = el.get("metric")
        if isinstance(metric, dict):
            out["metric"] = {self._str(str(k)): self._str(v) if isinstance(v, str) else v
                             for k, v in metric.items()}
            self.kept += 100 + 30 * len(metric)
        elif "metric" in el:
            out["metric"] = metric
        if "values" in el:
            out["values"] = self.points(el["values"])
        if "value" in el:
            out["value"] = el["value"]
        self.kept += SERIES_OVERHEAD
        return out

    def points(self, raw: Any) -> Any:
        if not isinstance(raw, list):
            return raw  # the history checks name it
        if self.max_points is not None and len(raw) > self.max_points:
            raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{self.what}: a series has {len(raw)} points, more than the "
                            f"{self.max_points} steps of the range asked for")
        pts = Points()
        for p in raw:
            if not isinstance(p, list) or len(p) != 2:
                raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{self.what}: a sample is not [time, value]")
            try:
                t, v = float(p[0]), float(p[1])
            except (TypeError, ValueError, OverflowError):  # never quote the answer's text (docs/operator.md)
                raise PromError(C.PROMETHEUS_BAD_RESPONSE,
                                f"{self.what}: a sample value or timestamp is not a number") from None
            pts.t.append(t)
            pts.v.append(v)
        self.kept += POINT_BYTES * len(raw)
        return pts


def _is_number(x: Any) -> bool:
    try:
        float(x)
    except (TypeError, ValueError):
        return False
    return True


def read_answer(read: Callable[[int], bytes], *, what: str, max_series: int,
                max_points: int | None = None, budget: int = RETAINED_BUDGET) -> dict[str, Any]:
    """The API document of one answer, read streaming from ``read(n)`` (module docstring). Raises
    :class:`Malformed` for a body that is not JSON, :class:`PromError` for an answer past a bound."""
    r = _Reader(read, what)
    comp = _Compactor(what, max_points)
    doc: dict[str, Any] = {}
    if r.peek() != "{":
        raise Malformed()
    for key in r.members():
        if key == "data" and r.peek() == "{":
            data: dict[str, Any] = {}
            for dkey in r.members():
                if dkey == "result" and r.peek() == "[":
                    result: list[Any] = []
                    for _ in r.elements():
                        if len(result) >= max_series:
                            raise PromError(C.TOO_MANY_SERIES, f"{what}: the answer holds more than {max_series} "
                                            "series; narrow the selector or choose a class label with fewer values")
                        result.append(comp.series(r.value(MAX_ELEMENT_CHARS)))
                        if comp.kept > budget:
                            raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{what}: the answer would keep more than "
                                            f"{budget // 2**20} MiB in memory (too many series, labels or points)")
                    data["result"] = result
                elif dkey in KEPT:
                    data[dkey] = r.value(MAX_KEPT_CHARS)
                else:
                    r.skip()
            doc["data"] = data
        elif key in KEPT:
            doc[key] = r.value(MAX_KEPT_CHARS)
        else:
            r.skip()
    if r.peek() != "":
        raise Malformed()  # trailing text after the document
    return doc


def capped(read: Callable[[int], bytes], limit: int, what: str) -> Callable[[int], bytes]:
    """``read`` that raises ``PrometheusBadResponse`` once more than ``limit`` bytes came (the client's cap)."""
    seen = 0

    def capped_read(n: int) -> bytes:
        nonlocal seen
        data = read(n)
        seen += len(data)
        if seen > limit:
            raise PromError(C.PROMETHEUS_BAD_RESPONSE, f"{what}: the answer is larger than {limit // 2**20} MiB (a "
                            "selector or class label matching far too many series?)")
        return data

    return capped_read


def read_data(status: int, read: Callable[[int], bytes], parse_response: Callable[..., Mapping[str, Any]], *,
              what: str, max_bytes: int, max_series: int, max_points: int | None = None) -> Mapping[str, Any]:
    """A 2xx answer -> its ``data`` object, read streaming (:func:`read_answer`) and interpreted by the client's
    own rules (``parse_response``, the client's :func:`kvplan_operator.prom.parse_response`, given the document
    without its result)."""
    try:
        doc = read_answer(capped(read, max_bytes, what), what=what, max_series=max_series, max_points=max_points)
    except Malformed:
        return parse_response(status, b"", what=what)  # its words for a body that is not JSON
    data = doc.get("data")
    result = data.get("result") if isinstance(data, dict) else None
    if isinstance(data, dict) and "result" in data:
        doc["data"] = {**data, "result": []}  # the shell: everything but the series, which it never reads
    shell = parse_response(status, json.dumps(doc).encode(), what=what)  # raises unless a success answer
    return {**shell, "result": result}
