"""Every shell and argv form of ``tests/vllm_flag_cases.py`` (issue 26, item 5): kvplan either writes TP 4 / PP 2
so that vLLM really runs them, or refuses the container (``Unexpressible``, the condition
``UnsupportedContainerLayout``). "Really" is judged by running the written container with the real shell under
stubs that record vLLM's argv, read by an ``argparse`` model of vLLM's options (the last value wins, unique prefixes
are accepted, ``_`` reads as ``-``, ``-tp``/``-pp``); ``tests/vllm/test_vllm_flags_parser.py`` reads the same argv
with vLLM 0.33's own parser. Before issue 26, 6 of the issue's forms were written and status said TP 4 where vLLM ran
TP 8 or TP 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvplan_operator.targets.vllm_flags import Unexpressible, read_flags, write_flags
from kvplan_operator.targets.vllm_argv import reads_as
from vllm_flag_cases import (CASES, KNOB_CASES, KNOB_WANT, WANT, container, params,  # type: ignore[import-not-found]
                             stubs, vllm_invocations, vllm_like)


@pytest.fixture(scope="module")
def bindir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stubs(tmp_path_factory.mktemp("stubs"))


@pytest.mark.parametrize("case_id", params())
def test_written_containers_run_what_kvplan_claims(case_id: str, bindir: Path, tmp_path: Path) -> None:
    case = CASES[case_id]
    c = container(case)
    try:
        command, args = write_flags(c, WANT)
    except Unexpressible as exc:
        assert case.expect == "refuse", f"refused: {exc}"
        assert str(exc)  # the condition's message says why
        return
    assert case.expect == "apply", f"written as {command} {args}, expected a refusal"
    runs = vllm_invocations(command, args, case.env, bindir, tmp_path / "argv.jsonl")
    assert len(runs) == 1, runs
    ns = vllm_like(runs[0])
    assert (ns.tensor_parallel_size, ns.pipeline_parallel_size) == (4, 2), runs[0]
    written = {**c, "command": command, "args": args}
    assert {f: read_flags(written)[f] for f in WANT} == WANT
    assert write_flags(written, WANT) == (command, args)  # idempotent


def test_the_issue_forms_were_wrong_before() -> None:
    """The six forms of the issue, as the apiserver test wrote them: each is now either right or refused."""
    for case_id in ("sh-later-short-tp-wins", "sh-underscores", "sh-abbreviation", "sh-flag-in-comment",
                    "sh-echo-vllm-serve", "sh-pass-on-to-another-command"):
        assert case_id in CASES


def _occurrences(argv: list[str], flag: str) -> int:
    return sum(1 for w in argv if reads_as(w, list(KNOB_WANT))[0] == flag)


@pytest.mark.parametrize("case_id", list(KNOB_CASES))
def test_knobs_in_any_spelling_are_replaced_in_place(case_id: str, bindir: Path, tmp_path: Path) -> None:
    """An engine knob given as ``--max_num_seqs``, ``--flag=value`` or beside ``-tp``/``-pp`` aliases is set where
    it is: vLLM's argv has as many occurrences of each flag as before (one if it was absent), and runs kvplan's
    values."""
    case = KNOB_CASES[case_id]
    before = vllm_invocations(list(case.command), list(case.args), case.env, bindir, tmp_path / "before.jsonl")
    command, args = write_flags(container(case), KNOB_WANT)
    runs = vllm_invocations(command, args, case.env, bindir, tmp_path / "after.jsonl")
    assert len(before) == len(runs) == 1, (before, runs)
    for flag in KNOB_WANT:
        assert _occurrences(runs[0], flag) == max(1, _occurrences(before[0], flag)), (flag, runs[0])
    ns = vllm_like(runs[0])
    assert (ns.tensor_parallel_size, ns.pipeline_parallel_size, ns.max_num_seqs, ns.max_num_active_seqs,
            ns.scheduling_policy, ns.watermark) == (4, 2, 48, 24, "priority", 0.05), runs[0]
    assert write_flags({**container(case), "command": command, "args": args}, KNOB_WANT) == (command, args)
