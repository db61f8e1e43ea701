"""kvplan's schedulers under ``--scheduling-policy priority`` inside vLLM 0.33's own engine loop (``EngineCore`` on
CPU with the token-fabricating executor, sync and async loops): requests of no class run after every planned
class when the reservation file publishes ``defaultPriority`` (vLLM runs lower priorities first, and a request
naming none has priority 0), and a priority no rule knows gives the fleet default and is logged once."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from plugin_engine_loop_world import GATED, Driver, engine, prompt  # noqa: F401 - fixtures are found by name

pytestmark = pytest.mark.vllm

#: chat reserves 160: a request of prompt 32 and 160 outputs claims 12 of the 64 usable blocks, so 5 run at once.
CHAT_PRIORITY, BATCH_PRIORITY, UNTAGGED = 1, 2, 3


def document(default_priority: int | None) -> str:
    doc: dict[str, Any] = {
        "format": "kvplan.reservations.v1", "plan": "prio", "defaultClass": "chat",
        "classes": {"chat": {"reserveTokens": 160}, "batch": {"reserveTokens": 160}},
        "priorityClasses": {str(CHAT_PRIORITY): "chat", str(BATCH_PRIORITY): "batch"}}
    if default_priority is not None:
        doc["defaultPriority"] = default_priority
    return json.dumps(doc)


def test_untagged_requests_run_after_the_planned_classes(engine_driver: Driver) -> None:
    """Ten requests arrive together: u0-u4 name no priority (vLLM's 0), c0-c4 the chat priority 1. Only five fit.
    With ``defaultPriority`` 3 the plugin runs u0-u4 at priority 3, so c0-c4 are admitted first; without it,
    vLLM's own order puts u0-u4 (priority 0) first. One more request, x0, sends priority 9 (no class's): it gets
    the fleet default, runs at priority 3 too, is counted in the plugin's unknown-class counter and logged once."""
    rng = np.random.default_rng(11)
    requests = [{"id": f"u{i}", "prompt": prompt(i, 32, rng), "max_tokens": 160, "arrival_step": 0, "priority": 0}
                for i in range(5)]
    requests += [{"id": f"c{i}", "prompt": prompt(10 + i, 32, rng), "max_tokens": 160, "arrival_step": 0,
                  "priority": CHAT_PRIORITY} for i in range(5)]
    requests += [{"id": "x0", "prompt": prompt(20, 32, rng), "max_tokens": 160, "arrival_step": 0, "priority": 9}]
    no_default = {"name": "gated-no-default", "scheduler_cls": GATED[0]["scheduler_cls"], "async": False,
                  "reservations": document(None)}
    result = engine_driver({"engine": {**engine(65), "policy": "priority"}, "reservations": document(UNTAGGED),
                            "requests": requests, "variants": GATED + [no_default], "max_steps": 5000})
    for variant in GATED:
        run = result[variant["name"]]
        reqs = run["requests"]
        assert run["complete"], variant
        first = min(r["admitted"][0] for r in reqs.values())
        assert sorted(k for k, r in reqs.items() if r["admitted"][0] == first) == [f"c{i}" for i in range(5)], reqs
        assert all(r["preemptions"] == 0 for r in reqs.values()), reqs
        unknown = [line for line in run["log"] if "priority 9 names no class of the reservation file" in line]
        assert len(unknown) == 1, run["log"]
    run = result["gated-no-default"]
    first = min(r["admitted"][0] for r in run["requests"].values())
    assert sorted(k for k, r in run["requests"].items() if r["admitted"][0] == first) == [f"u{i}" for i in range(5)]
    # kvplan_unknown_class_requests_total{channel="priority"}, cumulative over the three variants run in one process:
    # x0 counted once in each, the untagged u0-u4 never.
    counts = sorted(result[v]["unknown_class_requests"]["priority"] for v in ("gated-sync", "gated-async",
                                                                            "gated-no-default"))
    assert counts == [1.0, 2.0, 3.0], counts
    assert all(result[v]["unknown_class_requests"]["vllm_xargs"] == 0.0 for v in ("gated-sync", "gated-async"))
