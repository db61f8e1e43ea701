"""kvplan's reservation-gated schedulers inside vLLM 0.33's own engine loop, on CPU: ``EngineCore`` in process with
kvplan's token-fabricating executor (the engine loop of ``kvplan_dev/vllm_driver.py``, the one driver the parity
tier uses too), driven by ``EngineCore.step`` for
``ReservationScheduler`` and by ``step_with_batch_queue`` (the GPU loop, async scheduling) for
``AsyncReservationScheduler``; vLLM's stock schedulers on the same inputs for comparison.

What is checked:

- a hand-computed burst: exact admission iterations, no preemption, an unknown ``vllm_xargs`` class and a request
  naming no class both held to the fleet default's reserve; stock vLLM admits everything at once and preempts;
- a seeded random workload (three classes chosen by ``vllm_xargs``, by priority and by prompt-length rules;
  unknown classes; prefix caching with a shared prefix; outputs below and above their reserves, so preempted
  requests come back through the gate; the reservation file replaced during the run, then invalid four ways,
  missing, and valid again): every admission attempt vLLM made is granted exactly when ``kvcore.sim.gate`` says
  so, evaluated here on the raw vLLM state recorded at that moment with the reserves of the file the test wrote
  (the last good one through the invalid versions); a refusal ends its step's admissions (head of line); each bad
  version is logged once, each unknown class once;
- every output within its reserve: no preemption at all under the gate, preemptions under stock vLLM.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable
import numpy as np
import pytest
from kvcore.sim import gate
from plugin_engine_loop_world import (BAD_VERSIONS, BLOCK, Driver, GATED, RULES, STOCK, T0, T1, T2, Table, check_attempts, engine, prompt, random_workload, table_at)  # noqa: F401 - fixtures are found by name


pytestmark = pytest.mark.vllm


def test_burst_is_admitted_exactly_as_the_reservations_allow(engine_driver: Driver) -> None:
    """64 usable blocks of 16 tokens (65 with vLLM's null block). Seven requests arrive together, prompt 32 tokens,
    160 output tokens each. Class chat reserves 160, so each reserved footprint is 32 + 160 = 192 tokens = 12
    blocks: r0-r4 fit (60 blocks), a sixth would need 72. r5 names the unknown class "nope" and r6 names none (no
    priority map, no rules): both get the fleet default, chat, and wait until r0-r4 have finished (their 160th
    token is sampled in iteration 159; under async scheduling the engine learns it one iteration later). Nothing
    is ever preempted. Stock vLLM admits all seven at once (3 blocks each) and must preempt as they grow to 12;
    the gated scheduler with no reservation file does exactly what stock vLLM does."""
    table = Table({"chat": 160, "batch": 400}, "chat")
    rng = np.random.default_rng(7)
    requests = [{"id": f"r{i}", "prompt": prompt(i, 32, rng), "max_tokens": 160, "arrival_step": 0,
                 "xargs": {"kvplan_class": "nope"} if i == 5 else (None if i == 6 else {"kvplan_class": "chat"})}
                for i in range(7)]
    no_file = {"name": "gated-no-file", "scheduler_cls": GATED[0]["scheduler_cls"], "async": False,
               "reservations": None}
    result = engine_driver({"engine": engine(65), "reservations": table.document("burst"), "requests": requests,
                            "variants": GATED + STOCK[:1] + [no_file], "max_steps": 5000})
    for variant in GATED:
        run = result[variant["name"]]
        assert run["complete"] and run["scheduler"] == variant["scheduler_cls"].rsplit(".", 1)[1]
        assert run["async_loop"] == variant["async"]
        reqs = run["requests"]
        assert all(r["tokens"] == 160 and r["preemptions"] == 0 for r in reqs.values()), reqs
        assert [reqs[f"r{i}"]["admitted"] for i in range(5)] == [[0]] * 5
        first_done = max(reqs[f"r{i}"]["finished"] for i in range(5))
        assert first_done == (160 if variant["async"] else 159)
        assert reqs["r5"]["admitted"] == reqs["r6"]["admitted"] == [first_done + 1]
        granted, refused = check_attempts(run, requests, lambda call: table, capacity=1024)
        # r5 is the refused head at every iteration from 0 to first_done; then r5 and r6 are granted.
        assert (granted, refused) == (7, first_done + 1)
        unknown = [line for line in run["log"] if "names no class" in line]
        assert len(unknown) == 1 and "'nope'" in unknown[0] and "'chat'" in unknown[0]
        mode = "on" if variant["async"] else "off"
        assert sum(f"reservation gate on ({run['scheduler']}, async scheduling {mode}" in x for x in run["log"]) == 1
    stock = result["stock-sync"]["requests"]
    assert all(r["admitted"][0] == 0 for r in stock.values())
    assert sum(r["preemptions"] for r in stock.values()) >= 1
    # Without a reservation file the gated scheduler is vLLM's, decision for decision; it says so once.
    bare = result["gated-no-file"]
    assert bare["requests"] == stock and bare["refusals"] == 0
    problems = [line for line in bare["log"] if "reservation file problem" in line]
    assert len(problems) == 1 and "missing" in problems[0] and "no reservations in force" in problems[0]


def test_every_admission_attempt_follows_the_gate_through_file_changes(engine_driver: Driver) -> None:
    """Seed 20261130: 120 requests over 800 iterations, 96 usable blocks, prefix caching on. The file is replaced
    at iteration 200 (T1) and 700 (T2; new default class), and is invalid or missing in between (400-699)."""
    requests = random_workload(20261130, 120, T0, over_reserve=True, shared_prefix=True, horizon=800)
    updates = [{"step": 200, "content": T1.document("t1")}, {"step": 700, "content": T2.document("t2")}]
    updates += [{"step": step, "content": content} for step, content, _ in BAD_VERSIONS]
    result = engine_driver({"engine": engine(97, prefix_caching=True), "reservations": T0.document("t0"),
                            "file_updates": updates, "requests": requests, "variants": GATED, "max_steps": 200000})
    for variant in GATED:
        run = result[variant["name"]]
        assert run["complete"], f"{variant['name']}: not finished after {run['iterations']} iterations"
        granted, refused = check_attempts(run, requests, table_at, capacity=1024)
        assert granted >= len(requests) and refused > 0
        assert any(a["status"] == "PREEMPTED" for a in run["attempts"]), "no preempted request came back"
        assert any(a["cached"] >= BLOCK for a in run["attempts"]), "no prefix-cache hit reached the gate"
        problems = [line for line in run["log"] if "reservation file problem" in line]
        assert len(problems) == len(BAD_VERSIONS), problems
        for (_, _, needle), line in zip(BAD_VERSIONS, problems):
            assert needle in line and "keeping the last good values" in line, line
        loaded = [line for line in run["log"] if "reservations loaded" in line]
        assert [("plan t0" in x, "plan t1" in x, "plan t2" in x) for x in loaded] == [
            (True, False, False), (False, True, False), (False, False, True)]
        unknown = {line.split("=")[1].split(" ")[0] for line in run["log"] if "names no class" in line}
        named = {r["xargs"]["kvplan_class"] for r in requests if r["xargs"] and r["xargs"]["kvplan_class"] not in
                 T0.reserves}
        assert unknown == {repr(x) for x in named}
        assert len([line for line in run["log"] if "names no class" in line]) == len(named)


def test_outputs_within_reserve_are_never_preempted(engine_driver: Driver) -> None:
    """Seed 11: 80 requests, every output within its class's reserve, 128 usable blocks. Under the gate the free
    blocks always cover what every running request may still claim, so vLLM never has to preempt; stock vLLM, on
    the same arrivals, over-admits and preempts."""
    requests = random_workload(11, 80, T0, over_reserve=False, shared_prefix=False, horizon=300)
    result = engine_driver({"engine": engine(129), "reservations": T0.document("t0"), "requests": requests,
                            "variants": GATED + STOCK, "max_steps": 200000})
    for name, run in result.items():
        assert run["complete"], name
        assert all(r["tokens"] == req["max_tokens"] for req, r in
                   ((q, run["requests"][q["id"]]) for q in requests)), name
    for variant in GATED:
        run = result[variant["name"]]
        assert sum(r["preemptions"] for r in run["requests"].values()) == 0
        check_attempts(run, requests, lambda call: T0, capacity=1024)
    for variant in STOCK:
        assert sum(r["preemptions"] for r in result[variant["name"]]["requests"].values()) > 0, variant["name"]


def test_gate_under_the_priority_policy(engine_driver: Driver) -> None:
    """Seed 5: ``--scheduling-policy priority`` (the waiting queue ordered by priority, the preemption victim the
    largest (priority, arrival)); classes mostly from the priority map, outputs around their reserves. Every
    admission attempt still follows the gate exactly, in the sync and the async loop."""
    requests = random_workload(5, 80, T0, over_reserve=True, shared_prefix=False, horizon=400)
    rng = np.random.default_rng(5)
    for req in requests:
        if req["xargs"] is None:
            req["priority"] = int(rng.choice([0, 3, 7]))
    result = engine_driver({"engine": {**engine(97), "policy": "priority"}, "reservations": T0.document("t0"),
                            "requests": requests, "variants": GATED, "max_steps": 200000})
    for variant in GATED:
        run = result[variant["name"]]
        assert run["complete"], variant["name"]
        granted, refused = check_attempts(run, requests, lambda call: T0, capacity=1024)
        assert refused > 0 and any(a["status"] == "PREEMPTED" for a in run["attempts"]), variant["name"]
