"""The shared world of ``test_plugin_engine_loop.py`` and the tests that reuse it: kvplan's reservation-gated schedulers inside vLLM 0.33's own engine loop, on CPU: ``EngineCore`` in process with."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable
import numpy as np
import pytest
from kvcore.sim import gate


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
