"""kvcore's vLLM engine model against vLLM 0.33 itself (marker ``vllm``): 200 seeded cases through vLLM's own V1
``Scheduler`` as shipped and 60 through kvplan's shipped ``kvplan_vllm.scheduler.ReservationScheduler``, driven
step by step on CPU in the cached vllm==0.33.0 venv with kvplan installed on top (fixture ``plugin_python``,
kvplan_dev.vllm_driver), against both engine models
(reference and fast). Per request the admission step, preemption count and finish step must be identical (the
first-token step, longest gap, recomputed and prefix-cached tokens are held to the same). Separate tests check that
the cases really exercise what they claim: preemptions under both policies, chunked prefill, prefix-cache hits,
the watermark and the gate. ``make parity`` runs the same comparison and prints the summary line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvplan_dev.parity import compare, model_results, random_case, run_driver
from kvplan_dev.vllm_env import VLLM_VERSION

pytestmark = pytest.mark.vllm

STOCK = [random_case(i, gate=False) for i in range(200)]
GATE = [random_case(100_000 + i, gate=True) for i in range(60)]
CASES = {c["id"]: c for c in STOCK + GATE}


@pytest.fixture(scope="session")
def vllm_answers(plugin_python: Path) -> dict[str, Any]:
    """vLLM's answers for every case (one driver process for all: vLLM's import alone takes ~15 s)."""
    answer = run_driver(plugin_python, list(CASES.values()), progress=print)
    return {"vllm": answer["vllm"], "cases": {c["id"]: c for c in answer["cases"]}}


def test_driver_runs_the_real_vllm(vllm_answers: dict[str, Any]) -> None:
    assert vllm_answers["vllm"] == VLLM_VERSION == "0.33.0"
    assert set(vllm_answers["cases"]) == set(CASES)


@pytest.mark.parametrize("case_id", list(CASES))
def test_case_identical(vllm_answers: dict[str, Any], case_id: str) -> None:
    bad = compare(CASES[case_id], vllm_answers["cases"][case_id])
    assert bad is None, f"engine model differs from vLLM {VLLM_VERSION}: {bad}"


def test_cases_exercise_the_rules(vllm_answers: dict[str, Any]) -> None:
    answers = vllm_answers["cases"]
    preempting = {p: 0 for p in ("fcfs", "priority")}
    cached = chunked = watermark_blocked = 0
    for case in STOCK:
        reqs = answers[case["id"]]["requests"]
        if any(r["preemptions"] for r in reqs):
            preempting[case["policy"]] += 1
        if case["prefix_caching"] and any(r["cached"] for r in reqs):
            cached += 1
        chunked += any(r["first_token_step"] > r["admit_step"] for r in reqs)
        if case["watermark"] > 0:
            free_run = model_results({**case, "watermark": 0.0}, fast=True)
            watermark_blocked += any(a["admit_step"] != b["admit_step"] for a, b in zip(reqs, free_run))
    assert min(preempting.values()) >= 20, preempting
    assert cached >= 10 and chunked >= 20 and watermark_blocked >= 10, (cached, chunked, watermark_blocked)


def test_gate_cases_are_gated(vllm_answers: dict[str, Any]) -> None:
    """The gate group is not stock vLLM in disguise: without the gate the model admits differently in many cases."""
    changed = 0
    for case in GATE:
        stock = model_results({**case, "gate": False}, fast=True)
        changed += any(a["admit_step"] != b["admit_step"]
                       for a, b in zip(vllm_answers["cases"][case["id"]]["requests"], stock))
    assert changed >= 15, changed
