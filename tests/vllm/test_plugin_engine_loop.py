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

pytestmark = pytest.mark.vllm

BLOCK = 16
GATED = [
    {"name": "gated-sync", "scheduler_cls": "kvplan_vllm.scheduler.ReservationScheduler", "async": False},
    {"name": "gated-async", "scheduler_cls": "kvplan_vllm.scheduler.AsyncReservationScheduler", "async": True},
]
STOCK = [
    {"name": "stock-sync", "scheduler_cls": "vllm.v1.core.sched.scheduler.Scheduler", "async": False},
    {"name": "stock-async", "scheduler_cls": "vllm.v1.core.sched.async_scheduler.AsyncScheduler", "async": True},
]
Driver = Callable[[dict[str, Any]], dict[str, Any]]


def engine(num_blocks: int, *, prefix_caching: bool = False) -> dict[str, Any]:
    """Budgets far above what the workloads need, so only KV memory (and the gate) decides admission."""
    return {"num_blocks": num_blocks, "block_size": BLOCK, "max_model_len": 1024, "max_num_seqs": 256,
            "max_num_batched_tokens": 16384, "prefix_caching": prefix_caching}


@dataclass(frozen=True)
class Table:
    """A reservation file as the test means it, and the class/reserve it implies for a request."""

    reserves: dict[str, int]
    default: str
    priorities: dict[int, str] = field(default_factory=dict)
    rules: tuple[tuple[int | None, str], ...] = ()

    def document(self, plan: str) -> str:
        return json.dumps({
            "format": "kvplan.reservations.v1", "plan": plan, "defaultClass": self.default,
            "classes": {k: {"reserveTokens": v} for k, v in self.reserves.items()},
            "priorityClasses": {str(p): c for p, c in self.priorities.items()},
            "promptLengthRules": [{"class": c} if m is None else {"maxPromptTokens": m, "class": c}
                                  for m, c in self.rules],
        })

    def klass(self, req: dict[str, Any]) -> str:
        xargs = req.get("xargs") or {}
        if "kvplan_class" in xargs:
            named = xargs["kvplan_class"]
            return named if named in self.reserves else self.default
        if req.get("priority", 0) in self.priorities:
            return self.priorities[req["priority"]]
        for limit, klass in self.rules:
            if limit is None or len(req["prompt"]) <= limit:
                return klass
        return self.default

    def reserve(self, req: dict[str, Any], capacity: int) -> int:
        """The class's reserve, capped at what the request can ever hold (the plugin's liveness cap)."""
        return max(0, min(self.reserves[self.klass(req)], capacity - len(req["prompt"])))


def check_attempts(result: dict[str, Any], requests: list[dict[str, Any]], table_at: Callable[[int], Table],
                   capacity: int) -> tuple[int, int]:
    """Every attempt granted exactly when the gate admits; refusals end their iteration. (granted, refused)."""
    by_id = {r["id"]: r for r in requests}
    mismatches = []
    last_call_refused: int | None = None
    granted = refused = 0
    for a in result["attempts"]:
        assert a["call"] != last_call_refused, f"attempt after a refusal in the same step (head of line): {a}"
        table = table_at(a["call"])
        claims = [gate.running_claim(p, g, table.reserve(by_id[rid], capacity), alloc, BLOCK)
                  for rid, p, g, alloc in a["running"]]
        own = gate.waiting_claim(a["prompt"], a["generated"], table.reserve(by_id[a["req"]], capacity),
                                 a["cached"], BLOCK)
        expected = gate.admits(a["free"] - a["evictable_hit"], claims, own)
        if expected != a["granted"]:
            mismatches.append({"expected": expected, **a, "claims": claims, "own": own})
        if a["granted"]:
            granted += 1
        else:
            refused += 1
            last_call_refused = a["call"]
    assert not mismatches, f"{len(mismatches)} of {len(result['attempts'])} attempts differ; first: {mismatches[:3]}"
    assert not [line for line in result["log"] if "gate error" in line], "the gate raised (and failed open)"
    return granted, refused


def prompt(i: int, length: int, rng: np.random.Generator, shared: list[int] | None = None) -> list[int]:
    """Distinct first token per request (no accidental prefix hits), then the shared prefix if any."""
    head = [1000 + i] if shared is None else shared
    body = rng.integers(3, 30000, size=max(0, length - len(head))).tolist()
    return (head + body)[:length]


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


def random_workload(seed: int, n: int, table: Table, *, over_reserve: bool, shared_prefix: bool,
                    horizon: int) -> list[dict[str, Any]]:
    """Requests whose class comes from vllm_xargs, an unknown vllm_xargs class, the priority map or the prompt
    rules; output lengths up to the class's reserve (or from half to twice it), arrivals spread over ``horizon``
    iterations; prompt plus output stay within max_model_len."""
    rng = np.random.default_rng(seed)
    shared = list(range(500, 548)) if shared_prefix else None
    arrivals = np.sort(rng.integers(0, horizon, size=n))
    kinds = rng.choice(["xargs", "unknown", "priority", "prompt"], size=n, p=[0.5, 0.1, 0.15, 0.25])
    classes = sorted(table.reserves)
    priorities = sorted(table.priorities)
    out = []
    for i in range(n):
        length = int(rng.integers(8, 320))
        req: dict[str, Any] = {"id": f"q{i:03d}", "arrival_step": int(arrivals[i]), "priority": 0, "xargs": None}
        if kinds[i] == "xargs":
            req["xargs"] = {"kvplan_class": classes[int(rng.integers(len(classes)))]}
        elif kinds[i] == "unknown":
            req["xargs"] = {"kvplan_class": f"nope-{int(rng.integers(3))}"}
        elif kinds[i] == "priority":
            req["priority"] = priorities[int(rng.integers(len(priorities)))]
        use_shared = shared is not None and rng.random() < 0.3
        req["prompt"] = prompt(i, max(length, 49) if use_shared else length, rng, shared if use_shared else None)
        y = table.reserves[table.klass(req)]
        low, high = (y // 2, 2 * y) if over_reserve else (1, y)
        high = min(high, 1023 - len(req["prompt"]))
        req["max_tokens"] = int(rng.integers(min(low, high), high + 1))
        out.append(req)
    return out


RULES = ((64, "chat"), (256, "code"), (None, "batch"))
T0 = Table({"chat": 96, "code": 192, "batch": 320}, "chat", {7: "batch", 3: "code"}, RULES)
T1 = Table({"chat": 48, "code": 256, "batch": 200}, "chat", {7: "batch", 3: "code"}, RULES)
T2 = Table({"chat": 128, "code": 128, "batch": 400}, "code", {7: "batch", 3: "code"}, ((128, "chat"), (None, "code")))
BAD_VERSIONS = [
    (400, '{"format": "kvplan.reservations.v1", "defaultClass": "chat", "classes": {"chat": {"reserveTo',
     "not valid JSON"),
    (450, T1.document("bad").replace('"7": "batch"', '"7": "ghost"'), 'priorityClasses.7: class "ghost"'),
    (500, T1.document("bad").replace('"reserveTokens": 48', '"reserveTokens": -48'),
     "classes.chat.reserveTokens: must be >= 0"),
    (550, T1.document("bad").replace('"reserveTokens": 256', '"reserveTokens": "256"'),
     "classes.code.reserveTokens: must be a non-negative whole number"),
    (600, None, "missing or unreadable"),
]


def table_at(call: int) -> Table:
    return T0 if call < 200 else (T1 if call < 700 else T2)


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
