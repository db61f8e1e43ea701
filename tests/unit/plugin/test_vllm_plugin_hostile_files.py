"""Issue 26 item 7: nothing in or at the reservation file may stop or slow vLLM's engine.

- the parser (:func:`kvcore.reservation_file.parse_reservations`) answers every hostile document with a
  :class:`ReservationsError` naming the field or the limit, never another exception (``RecursionError`` from deep
  nesting took the engine core down), and refuses oversized ones before building them;
- the reader (:class:`kvplan_vllm.source.ReservationSource`) refuses what is not a bounded regular file (a FIFO, a
  symlink to ``/dev/zero``, a directory, a socket, a huge or growing file) without blocking, keeps the last good
  values and logs once per version;
- the step path (``tick``) never stats, opens, reads or parses the file: counted by wrapping the reader's own
  functions and recording the thread that called them.

No timing is asserted. Cases that could block if the reader regressed run in a subprocess whose timeout is only a
safety net; the assertion is its exit code and message.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any, Callable

import pytest
from plugin_log import log  # noqa: F401 - the fixture is found by name

import kvplan_vllm.source as source_module
from kvcore.reservation_file import (
    MAX_BYTES,
    MAX_CLASSES,
    MAX_PROBLEMS,
    Reservations,
    ReservationsError,
    parse_reservations,
)
from kvplan_dev.mounted_configmap import write_configmap_volume
from kvplan_vllm.source import ReservationSource

FORMAT = "kvplan.reservations.v1"


def document(classes: dict[str, Any] | None = None, **extra: Any) -> str:
    body: dict[str, Any] = {"format": FORMAT, "defaultClass": "chat",
                            "classes": classes if classes is not None else {"chat": {"reserveTokens": 64}}}
    body.update(extra)
    return json.dumps(body)


GOOD = document({"chat": {"reserveTokens": 64}, "batch": {"reserveTokens": 256}}, plan="good")
GOOD_RES = parse_reservations(GOOD)


def _nested_value(depth: int) -> str:
    return GOOD.replace('"reserveTokens": 64', '"reserveTokens": ' + "[" * depth + "1" + "]" * depth)


def _many_classes(n: int) -> str:
    return document({f"c{i}": {"reserveTokens": i} for i in range(n)}).replace('"defaultClass": "chat"',
                                                                             '"defaultClass": "c0"')


# (id, document, a regex one of the problems must match). Each is a whole file's content.
HOSTILE: list[tuple[str, str | bytes, str]] = [
    # nesting: the parser recursed once per level and raised RecursionError out of schedule()
    ("deep-arrays-60000", "[" * 60_000 + "]" * 60_000, r"^\(document\): .*nest deeper than 8"),
    ("deep-arrays-unclosed", "[" * 120_000, r"^\(document\): .*nest deeper than 8"),
    ("deep-objects-3000", '{"a":' * 3000 + "1" + "}" * 3000, r"^\(document\): .*nest deeper than 8"),
    ("deep-objects-50000", '{"a":' * 20_000 + "1" + "}" * 20_000, r"^\(document\): .*(nest deeper|commas)"),
    ("deep-in-a-field", _nested_value(20), r"^\(document\): .*nest deeper than 8"),
    ("crossed-brackets", '{"format": [}]', r"^\(document\): not valid JSON"),
    ("unclosed-shallow", '{"format": [[{', r"^\(document\): not valid JSON"),
    # size, counts
    ("30000-classes", _many_classes(30_000), r"^\(document\): .*bytes, more than the 131,072 allowed"),
    ("300-classes", _many_classes(300), r"^classes: 300 entries, more than the 256 allowed"),
    ("300-priorities", document(priorityClasses={str(i): "chat" for i in range(300)}),
     r"^priorityClasses: 300 entries, more than the 256 allowed"),
    ("300-rules", document(promptLengthRules=[{"maxPromptTokens": i, "class": "chat"} for i in range(300)]),
     r"^promptLengthRules: 300 entries, more than the 256 allowed"),
    ("5000-values", document(promptLengthRules=[0] * 5000), r"^\(document\): .*commas and colons"),
    ("huge-string", document(plan="x" * (MAX_BYTES + 10)), r"^\(document\): .*bytes, more than"),
    ("long-plan", document(plan="x" * 1000), r"^plan: must be a string of at most 512"),
    ("long-class-key", document({"c" * 5000: {"reserveTokens": 1}}), r'^classes key "c{10,60}\.\.\.: must be a class name'),
    # encodings and truncation
    ("empty", "", r"^\(document\): not valid JSON"),
    ("truncated", GOOD[: len(GOOD) // 2], r"^\(document\): not valid JSON"),
    ("non-utf8", GOOD.encode().replace(b"good", b"g\xffod"), r"^\(document\): .*not UTF-8 text \(byte 0xff"),
    ("latin1-class", GOOD.encode().replace(b"batch", b"b\xe4tch"), r"^\(document\): .*not UTF-8"),
    ("utf16", GOOD.encode("utf-16"), r"^\(document\): .*not UTF-8"),
    ("nul-bytes", b"\x00" * 64, r"^\(document\): not valid JSON"),
    ("binary", bytes(range(256)) * 8, r"^\(document\): .*not UTF-8"),
    # numbers
    ("nan", GOOD.replace('"reserveTokens": 64', '"reserveTokens": NaN'), r"^\(document\): not valid JSON \(NaN is not"),
    ("infinity", GOOD.replace('"reserveTokens": 64', '"reserveTokens": Infinity'), r"^\(document\): not valid JSON \(-?Infinity is not"),
    ("minus-infinity", GOOD.replace('"reserveTokens": 64', '"reserveTokens": -Infinity'), r"^\(document\): not valid JSON \(-?Infinity is not"),
    ("1e999", GOOD.replace('"reserveTokens": 64', '"reserveTokens": 1e999'),
     r"^classes.chat.reserveTokens: must be a non-negative whole number"),
    ("1e300", GOOD.replace('"reserveTokens": 64', '"reserveTokens": 1e300'),
     r"^classes.chat.reserveTokens: must be at most 1000000000"),
    ("5000-digits", GOOD.replace('"reserveTokens": 64', '"reserveTokens": ' + "9" * 5000),
     r"^\(document\): not valid JSON"),
    ("negative", GOOD.replace('"reserveTokens": 64', '"reserveTokens": -64'),
     r"^classes.chat.reserveTokens: must be >= 0"),
    ("negative-rule", document(promptLengthRules=[{"maxPromptTokens": -1, "class": "chat"}]),
     r"^promptLengthRules\[0\].maxPromptTokens: must be >= 0"),
    ("priority-40-digits", document(priorityClasses={"9" * 40: "chat"}),
     r"^priorityClasses.9+: the key must be an integer"),
    # wrong types
    *[(f"type-{name}", GOOD.replace('"reserveTokens": 64', '"reserveTokens": ' + value),
       r"^classes.chat.reserveTokens: must be a non-negative whole number")
      for name, value in (("string", '"64"'), ("bool", "true"), ("null", "null"), ("list", "[64]"),
                          ("object", '{"n": 64}'), ("fraction", "6.4"))],
    ("type-class-entry", document({"chat": 64}), r"^classes.chat: must be an object"),
    ("type-classes", document([{"chat": 64}]), r"^classes: must be a non-empty object"),
    ("type-document", "[1, 2, 3]", r"^\(document\): must be a JSON object"),
    ("type-rules", document(promptLengthRules="chat"), r"^promptLengthRules: must be a list"),
    ("type-priorities", document(priorityClasses=[1]), r"^priorityClasses: must be an object"),
    # parser differentials: a key given twice means different things to different JSON readers
    ("duplicate-top-key", GOOD[:-1] + ', "classes": {"chat": {"reserveTokens": 0}}}',
     r"^\(document\): .*duplicate key \"classes\""),
    ("duplicate-class", GOOD.replace('"batch": {"reserveTokens": 256}', '"chat": {"reserveTokens": 0}'),
     r"^\(document\): .*duplicate key \"chat\""),
    ("duplicate-field", GOOD.replace('"reserveTokens": 64', '"reserveTokens": 64, "reserveTokens": 0'),
     r"^\(document\): .*duplicate key \"reserveTokens\""),
    # many problems at once: reported up to a bound, the rest counted
    ("200-unknown-keys", document(**{f"k{i}": i for i in range(200)}), r"^\(document\): 180 more problem"),
]


@pytest.mark.parametrize(("content", "expected"), [pytest.param(c, e, id=i) for i, c, e in HOSTILE])
def test_hostile_documents_are_refused_naming_the_field_or_the_limit(content: str | bytes, expected: str) -> None:
    import re

    with pytest.raises(ReservationsError) as err:
        parse_reservations(content)
    problems = err.value.problems
    assert any(re.search(expected, p) for p in problems), problems[:5]
    assert len(problems) <= MAX_PROBLEMS + 1 and len(str(err.value)) < 8000, len(str(err.value))


@pytest.mark.parametrize("text", [
    pytest.param(document(plan="[[[[[[[[[[[[{{{{{{{{{{"), id="brackets-in-a-string"),
    pytest.param(document(plan='a \\" [[[[[[[[[[[[[[ \\\\'), id="escaped-quote-then-brackets"),
    pytest.param(_many_classes(MAX_CLASSES), id="256-classes"),
    pytest.param("\ufeff" + GOOD, id="byte-order-mark"),
])
def test_documents_at_the_limits_still_parse(text: str) -> None:
    assert isinstance(parse_reservations(text), Reservations)
    assert isinstance(parse_reservations(text.encode()), Reservations)


def test_the_largest_document_the_operator_writes_fits_the_limits() -> None:
    """256 classes with 40-character names, a priority and a rule each, and the largest numbers: within
    MAX_BYTES and MAX_SEPARATORS with room to spare, and it round-trips."""
    from kvcore.classification import PromptLengthRule
    from kvcore.reservation_file import MAX_SEPARATORS, render_reservations

    names = [f"c{i:03d}-" + "x" * 35 for i in range(MAX_CLASSES)]
    res = Reservations({k: 10**9 for k in names}, names[0], {-(10**17) + i: k for i, k in enumerate(names)},
                       (*(PromptLengthRule(10**9 - MAX_CLASSES + i, k) for i, k in enumerate(names[:-1])),
                        PromptLengthRule(None, names[-1])), plan="p" * 64, kvplan="n" * 253 + "/" + "k" * 253)
    text = render_reservations(res)
    assert len(text.encode()) < MAX_BYTES * 0.6 and text.count(",") + text.count(":") < MAX_SEPARATORS * 0.7
    assert parse_reservations(text) == res


# -- the reader: what is at the path ---------------------------------------------------------------------------


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _directory(path: Path) -> None:
    path.mkdir()


def _huge_sparse(path: Path) -> None:
    with path.open("wb") as handle:
        handle.truncate(64 * 1024**2)  # 64 MiB of holes: refused by size, never read


def _loop(path: Path) -> None:
    path.symlink_to(path.name)


PATHS: list[tuple[str, Callable[[Path], None], str]] = [
    ("fifo", _fifo, "not a regular file (a FIFO)"),
    ("dev-zero-symlink", _dev_zero, "not a regular file (a character device)"),
    ("dev-urandom-symlink", lambda p: p.symlink_to("/dev/urandom"), "not a regular file (a character device)"),
    ("directory", _directory, "not a regular file (a directory)"),
    ("huge-sparse-file", _huge_sparse, "67,108,864 bytes, more than the 131,072 allowed"),
    ("symlink-loop", _loop, "missing or unreadable"),
    ("dangling-symlink", lambda p: p.symlink_to("nowhere.json"), "missing or unreadable"),
    ("non-utf8", lambda p: p.write_bytes(b"\xff\xfe" + GOOD.encode()), "not UTF-8"),
    ("deep-nesting", lambda p: p.write_text("[" * 120_000), "nest deeper"),
]


@pytest.mark.parametrize(("make", "problem"), [pytest.param(m, p, id=i) for i, m, p in PATHS])
def test_what_is_at_the_path_is_refused_and_the_last_good_values_kept(tmp_path: Path, log: Any,
                                                                     make: Callable[[Path], None],
                                                                     problem: str) -> None:
    logger, messages = log
    path = tmp_path / "reservations.json"
    path.write_text(GOOD)
    source = ReservationSource(path, check_every=1, log=logger)
    assert source.check() and source.current == GOOD_RES
    path.unlink()
    make(path)
    for _ in range(3):  # through the reader thread too
        assert source.sync(timeout=120)
        assert not source.tick()
    assert not source.check()
    assert source.current == GOOD_RES and problem in (source.state.problem or ""), source.state.problem
    problems = [m for m in messages if "reservation file problem" in m]
    assert len(problems) == 1 and "keeping the last good values" in problems[0], problems
    source.close()


def test_a_socket_at_the_path_is_refused(tmp_path: Path, log: Any) -> None:
    logger, _ = log
    path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(path))
        source = ReservationSource(path, log=logger)
        assert not source.check() and "not a regular file" in (source.state.problem or "")
    finally:
        server.close()


BLOCKERS = """
import os, sys
from pathlib import Path
from kvplan_vllm.source import ReservationSource
path = Path(sys.argv[1])
if sys.argv[2] == "fifo":
    os.mkfifo(path)
elif sys.argv[2] == "fifo-with-writer":
    os.mkfifo(path)
    writer = os.open(path, os.O_RDWR)  # a writer that never writes: a blocking read would wait forever
else:
    path.symlink_to("/dev/zero")
source = ReservationSource(path, check_every=1)
source.check()
for _ in range(50):
    source.tick()
assert source.sync(timeout=None)
source.tick()
print(source.state.problem)
"""


@pytest.mark.parametrize("kind", ["fifo", "fifo-with-writer", "dev-zero"])
def test_a_blocking_path_does_not_block(tmp_path: Path, kind: str) -> None:
    """In a subprocess: a regression (a blocking open or an endless read) would hang; the timeout is only a
    safety net, the assertion is the exit code and the message."""
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(BLOCKERS), str(tmp_path / "r.json"), kind],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "not a regular file" in run.stdout, run.stdout


# -- the step path never touches the file --------------------------------------------------------------------

def test_the_step_path_never_stats_opens_or_parses_the_file(tmp_path: Path, log: Any,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """400 ticks, the file replaced (kubelet-style) every 40 and bad every other time: every stat, read and parse
    happened on the reader thread, none on the thread that ticks; the new values took effect at a tick."""
    logger, messages = log
    calls: list[tuple[str, int]] = []

    def counted(name: str, inner: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append((name, threading.get_ident()))
            return inner(*args, **kwargs)
        return wrapper

    for name in ("path_identity", "read_regular_file", "parse_reservations"):
        monkeypatch.setattr(source_module, name, counted(name, getattr(source_module, name)))
    volume = tmp_path / "kvplan"
    write_configmap_volume(volume, {"reservations.json": GOOD})
    source = ReservationSource(volume / "reservations.json", check_every=4, log=logger)
    me = threading.get_ident()
    adopted = []
    for step in range(400):
        if step % 40 == 0:
            content = "[" * 100_000 if step % 80 else document({"chat": {"reserveTokens": step}}, plan=f"s{step}")
            write_configmap_volume(volume, {"reservations.json": content})
            assert source.sync(timeout=120)
        if source.tick():
            adopted.append((step, source.current.reserve("chat")))
    source.close()
    names = {name for name, _ in calls}
    assert names == {"path_identity", "read_regular_file", "parse_reservations"}, names
    assert all(ident != me for _, ident in calls), "the ticking thread touched the file"
    assert adopted == [(step, step) for step in range(0, 400, 80)]
    assert sum("nest deeper" in m for m in messages) == 5


def test_a_reader_bug_never_reaches_tick(tmp_path: Path, log: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the parse raises (here RecursionError and MemoryError, as a hostile file once did), the reader
    logs it once and keeps the values in force; tick and check return normally."""
    logger, messages = log
    path = tmp_path / "r.json"
    path.write_text(GOOD)
    source = ReservationSource(path, check_every=1, log=logger)
    assert source.check()
    errors = iter([RecursionError("deep"), MemoryError(), RecursionError("deep")])

    def broken(*_: Any, **__: Any) -> Any:
        raise next(errors)

    monkeypatch.setattr(source_module, "parse_reservations", broken)
    for i in range(3):
        path.write_text(GOOD + " " * (i + 1))
        assert source.sync(timeout=120) if i != 1 else not source.check()
        assert not source.tick() and source.current == GOOD_RES
    assert sum("reservation reader error" in m for m in messages) == 1
    source.close()


NO_SCIPY = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("scipy", "highspy", "vllm"):
            raise ImportError("blocked " + name)
sys.meta_path.insert(0, Block())
import kvplan_vllm.source, kvplan_vllm.classify
print(",".join(sorted(m for m in sys.modules if m.startswith("kvcore"))))
"""


def test_the_plugins_reader_imports_without_scipy() -> None:
    """The serving image's plugin imports the parser and the reader; neither may pull in scipy or highspy."""
    run = subprocess.run([sys.executable, "-c", NO_SCIPY], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert set(run.stdout.strip().split(",")) >= {"kvcore.reservation_file", "kvcore.bounded_json",
                                                  "kvcore.regular_file"}
