"""kvplan's reading of vLLM 0.33's async-scheduling rule (``kvplan_operator.targets.vllm_async``): every container of
``tests/vllm_async_cases.py`` (switches in any spelling, executors, the model-runner env var, pooling, DBO, the
watermark config, and what the pod cannot tell) gets the decision read in vLLM's config code; ``tests/vllm`` holds
the same table against the real vLLM. Also: an answer always carries a reason, and an argv kvplan cannot read gives
no facts at all."""

from __future__ import annotations

import pytest

from kvplan_operator.targets.vllm_async import AsyncFacts, async_facts, decide_async
from vllm_async_cases import CASES, container  # type: ignore[import-not-found]


@pytest.mark.parametrize("case_id", list(CASES))
def test_the_rule_gives_vllms_decision(case_id: str) -> None:
    case = CASES[case_id]
    facts = async_facts(container(case), case.pp)
    assert facts is not None and facts.pp == case.pp
    choice = decide_async(facts)
    assert choice.on is case.want, (facts, choice)
    assert choice.reason


@pytest.mark.parametrize(("facts", "word"), [
    pytest.param(AsyncFacts(pp=2, v2_env="0"), "pipeline parallelism", id="v1-pp"),
    pytest.param(AsyncFacts(executor="my.Exec"), "my.Exec", id="custom-executor"),
    pytest.param(AsyncFacts(v2_env="?"), "VLLM_USE_V2_MODEL_RUNNER", id="env-unknown"),
    pytest.param(AsyncFacts(runner="pooling"), "pooling", id="pooling"),
])
def test_the_reason_names_what_decided(facts: AsyncFacts, word: str) -> None:
    assert word in decide_async(facts).reason


def test_an_unreadable_argv_gives_no_facts() -> None:
    script = {"command": ["sh", "-c", "if true; then vllm serve m; fi"], "args": []}
    assert async_facts(script, 1) is None


def test_the_planned_pp_decides_not_the_containers() -> None:
    """The rule is asked about the layout kvplan is about to write, whatever PP the container runs now."""
    c = {"args": ["m", "-pp", "1"], "env": [{"name": "VLLM_USE_V2_MODEL_RUNNER", "value": "0"}]}
    facts = {pp: async_facts(c, pp) for pp in (1, 2)}
    assert facts[1] is not None and facts[2] is not None
    assert (decide_async(facts[1]).on, decide_async(facts[2]).on) == (True, False)
