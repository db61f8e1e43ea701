"""Issue 26 item 7 inside vLLM 0.33's own engine loop: hostile reservation files never take the engine down nor
change an admission decision (``EngineCore`` in process, kvplan's token-fabricating executor,
``kvplan_dev/vllm_driver.py``, engine mode; helpers from ``test_plugin_engine_loop.py``).

- Mid-run, the file becomes in turn: 120,000 levels of nesting (which raised ``RecursionError`` out of
  ``schedule()``), a FIFO and a symlink to ``/dev/zero`` (which blocked the step), a 30,000-class file (a 1.1 s
  step), 300 classes, truncated JSON, bytes that are not UTF-8, ``NaN``, ``Infinity``, a negative and a mistyped
  reserve; then a good file again. The run completes in the sync and the async loop; every admission attempt vLLM
  made follows ``kvcore.sim.gate`` with the last good file's reserves; each hostile version is logged once, naming
  why; the gate never failed open.
- At start-up, the engine starts whatever the file is (deep nesting, a FIFO, ``/dev/zero``, huge): nothing is
  reserved (vLLM's own admission) and the problem is logged once.

The driver waits for the plugin's reader thread after each file change (``ReservationSource.sync``), a condition,
so each change takes effect at its iteration whatever the machine's speed.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from plugin_engine_loop_world import GATED, T0, T1, Driver, check_attempts, engine, random_workload

pytestmark = pytest.mark.vllm

SYNC = GATED[0]["scheduler_cls"]


def _many(n: int) -> str:
    return json.dumps({"format": "kvplan.reservations.v1", "defaultClass": "c0",
                       "classes": {f"c{i}": {"reserveTokens": 1} for i in range(n)}})


def _bytes(data: bytes) -> str:
    return base64.b64encode(data).decode()


GOOD = T1.document("bad")
# (id, content, kind, what the engine core's log line must say)
HOSTILE: list[tuple[str, str | None, str, str]] = [
    ("deep-nesting", "[" * 120_000, "content", "nest deeper than 8 levels"),
    ("fifo", None, "fifo", "not a regular file (a FIFO)"),
    ("dev-zero", None, "dev-zero", "not a regular file (a character device)"),
    ("30000-classes", _many(30_000), "content", "bytes, more than the 131,072 allowed"),
    ("300-classes", _many(300), "content", "classes: 300 entries, more than the 256 allowed"),
    ("truncated", GOOD[: len(GOOD) // 2], "content", "not valid JSON"),
    ("non-utf8", _bytes(GOOD.encode().replace(b'"bad"', b'"b\xffd"')), "bytes", "not UTF-8 text (byte 0xff"),
    ("nan", GOOD.replace('"reserveTokens": 48', '"reserveTokens": NaN'), "content", "NaN is not a JSON number"),
    ("infinity", GOOD.replace('"reserveTokens": 48', '"reserveTokens": Infinity'), "content",
     "Infinity is not a JSON number"),
    ("negative", GOOD.replace('"reserveTokens": 48', '"reserveTokens": -48'), "content",
     "classes.chat.reserveTokens: must be >= 0"),
    ("wrong-type", GOOD.replace('"reserveTokens": 48', '"reserveTokens": [48]'), "content",
     "classes.chat.reserveTokens: must be a non-negative whole number"),
]
FIRST_BAD, SPACING, GOOD_AGAIN = 100, 15, 400


def test_hostile_files_mid_run_change_nothing(engine_driver: Driver) -> None:
    """Seed 26: 100 requests over 500 iterations, 97 blocks; T0 in force until the hostile versions (from
    iteration 100, one every 15), which all keep T0; T1 from iteration 400."""
    requests = random_workload(26, 100, T0, over_reserve=True, shared_prefix=False, horizon=500)
    updates = [{"step": FIRST_BAD + SPACING * i, "content": content, "kind": kind}
               for i, (_, content, kind, _) in enumerate(HOSTILE)]
    updates.append({"step": GOOD_AGAIN, "content": T1.document("t1")})
    result = engine_driver({"engine": engine(97), "reservations": T0.document("t0"), "file_updates": updates,
                            "requests": requests, "variants": GATED, "max_steps": 200000})
    for variant in GATED:
        run = result[variant["name"]]
        assert run["complete"], f"{variant['name']}: not finished after {run['iterations']} iterations"
        granted, refused = check_attempts(run, requests, lambda call: T0 if call < GOOD_AGAIN else T1,
                                          capacity=1024)
        assert granted >= len(requests) and refused > 0
        problems = [line for line in run["log"] if "reservation file problem" in line]
        assert len(problems) == len(HOSTILE), problems
        for (name, _, _, needle), line in zip(HOSTILE, problems):
            assert needle in line and "keeping the last good values (plan t0" in line, (name, line[:300])
        assert not [line for line in run["log"] if "reader error" in line or "source error" in line]
        loaded = [line for line in run["log"] if "reservations loaded" in line]
        assert [("plan t0" in x, "plan t1" in x) for x in loaded] == [(True, False), (False, True)]


START: list[tuple[str, str | None, str, str]] = [
    ("deep-nesting", "[" * 120_000, "content", "nest deeper than 8 levels"),
    ("fifo", None, "fifo", "not a regular file (a FIFO)"),
    ("dev-zero", None, "dev-zero", "not a regular file (a character device)"),
    ("30000-classes", _many(30_000), "content", "bytes, more than the 131,072 allowed"),
]


def test_the_engine_starts_whatever_the_file(engine_driver: Driver) -> None:
    """Each variant starts its EngineCore with one hostile file: it starts, runs every request to the end with
    vLLM's own admission (no reservation in force, no refusal) and logs the problem once."""
    requests = random_workload(5, 30, T0, over_reserve=False, shared_prefix=False, horizon=60)
    variants: list[dict[str, Any]] = [
        {"name": f"start-{name}", "scheduler_cls": SYNC, "async": False, "reservations": content,
         "reservations_kind": kind} for name, content, kind, _ in START]
    result = engine_driver({"engine": engine(129), "requests": requests, "variants": variants,
                            "max_steps": 200000})
    for (name, _, _, needle), variant in zip(START, variants):
        run = result[variant["name"]]
        assert run["complete"] and run["refusals"] == 0, name
        problems = [line for line in run["log"] if "reservation file problem" in line]
        assert len(problems) == 1 and needle in problems[0] and "no reservations in force" in problems[0], problems
