"""The reservation file's read and parse yield the interpreter often enough that the engine's thread never waits
long for it (issue 26 item 7: at most 1 ms added to a step, whatever the file).

What is asserted is structural, so no clock decides a result:

- :func:`kvcore.bounded_json.load_bounded_json` offers a yield point (``pause``) for every object and every number
  it builds, and between pieces of its checks: no C call of the checks spans more than ``_CHUNK`` bytes;
- the parse is the same as ``json.loads`` on what it accepts, and the depth check agrees with the depth of the
  parsed document (seeded random documents), so the pieces change no answer;
- the reader's slicer (:class:`kvplan_vllm.source._Slices`) sleeps exactly when its thread CPU time since the last
  sleep reached ``SLICE_S`` (a scripted thread clock).

The time a stretch between two yield points takes is measured in ``benchmarks/vllm_reader_step_cost.py``."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from kvcore import bounded_json
from kvcore.bounded_json import BoundedJsonError, load_bounded_json, nesting_exceeds
from kvcore.reservation_file import MAX_BYTES, MAX_DEPTH, MAX_SEPARATORS
import kvplan_vllm.source as source_module


class Counted:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def _random_value(rng: random.Random, depth: int) -> Any:
    kind = rng.randrange(6 if depth < 5 else 4)
    if kind == 0:
        return rng.randrange(-10**6, 10**6)
    if kind == 1:
        return rng.uniform(-1e3, 1e3)
    if kind == 2:
        return "".join(rng.choice('ab[]{}",:\\ é') for _ in range(rng.randrange(8)))
    if kind == 3:
        return rng.choice([True, False, None])
    if kind == 4:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {f"k{i}{rng.choice('[{')}": _random_value(rng, depth + 1) for i in range(rng.randrange(4))}


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _objects_and_numbers(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(_objects_and_numbers(v) for v in value.values())
    if isinstance(value, list):
        return sum(_objects_and_numbers(v) for v in value)
    return int(isinstance(value, (int, float)) and not isinstance(value, bool))


@pytest.mark.parametrize("seed", range(40))
def test_the_parse_in_pieces_is_json_loads(seed: int) -> None:
    rng = random.Random(seed)
    doc = _random_value(rng, 0)
    text = json.dumps(doc, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 1]))
    pause = Counted()
    got = load_bounded_json(text, max_bytes=MAX_BYTES, max_separators=10**6, max_depth=64, pause=pause)
    assert got == json.loads(text)
    assert pause.calls >= _objects_and_numbers(doc)  # a yield point for every object and number built
    for limit in range(0, 7):
        assert nesting_exceeds(text.encode(), limit) == (_depth(doc) > limit), (limit, _depth(doc))


@pytest.mark.parametrize("text", [
    "[" * 120_000,                      # one long run of brackets, no strings
    '"' + "x" * 120_000 + '"',          # one long string
    "1," * 60_000,                      # separators only
    json.dumps(["a" * 30] * 3_000),     # many strings in one array (no hook while the array is built)
])
def test_no_check_spans_more_than_a_chunk(text: str) -> None:
    """Between two yield points the checks handle at most ``_CHUNK`` bytes (the one regex match of a long string
    aside, which is one pass of C over it): counted, not timed."""
    raw = text.encode()
    pause = Counted()
    try:
        load_bounded_json(raw, max_bytes=MAX_BYTES, max_separators=MAX_SEPARATORS, max_depth=MAX_DEPTH, pause=pause)
    except BoundedJsonError:
        pass
    if text.startswith('"'):
        assert pause.calls >= 2
    else:
        assert pause.calls >= len(raw) // bounded_json._CHUNK


def test_depth_check_edge_cases() -> None:
    assert not nesting_exceeds(b"[" * 8 + b"]" * 8, 8)
    assert nesting_exceeds(b"[" * 9 + b"]" * 9, 8)
    assert nesting_exceeds(b"[" * 9, 8)  # left open (truncated) still counts
    assert not nesting_exceeds(b'["' + b"[" * 50 + b'"]', 8)  # inside a string
    assert not nesting_exceeds(b"]" * 20, 8)  # the parser stops at the first byte
    assert nesting_exceeds(b"[" * 9 + b"]" * 20, 8)


def test_the_slicer_sleeps_when_its_slice_is_spent(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    sleeps: list[float] = []
    monkeypatch.setattr(source_module.time, "thread_time", lambda: now[0])
    monkeypatch.setattr(source_module, "_pause", lambda: sleeps.append(now[0]))
    slices = source_module._Slices()
    step = source_module.SLICE_S / 4
    for _ in range(12):
        now[0] += step
        slices()
    assert len(sleeps) == 3  # after 4 steps, 8 and 12: each slice is SLICE_S of thread CPU time
    assert sleeps == pytest.approx([4 * step, 8 * step, 12 * step])
