"""vLLM 0.33's own parser as the judge of kvplan's flag writing (issue 26, item 5; marker ``vllm``).

Every form of ``tests/vllm_flag_cases.py`` (argv and ``sh -c``: later ``-tp``, ``--tensor_parallel_size``,
abbreviations, ``# comments``, ``echo vllm serve``, ``"$@"``, ``python -m vllm.entrypoints.openai.api_server``,
``--flag=value``, ``-tp=8``, ``--config``, ``$TP``, ``exec``, ``&&``/``;`` chains, here-documents...):

- written by kvplan (``write_flags`` to TP 4 / PP 2), run by the real shell under argv-recording stubs, and the
  recorded argv read by vLLM 0.33's real command line (``vllm serve`` through ``vllm.entrypoints.cli.main``, the
  module form through its ``__main__``): vLLM must run TP 4 and PP 2;
- each *original* container read the same way, against what kvplan's reader (:func:`read_flags`) says it runs:
  where kvplan does not refuse the container, vLLM's values must be kvplan's (a parser differential otherwise);
- the data-parallel flags kvplan reads (they decide how many GPUs a pod needs) are read as vLLM's parser reads them;
- every refusal the rules make on vLLM's behalf is checked to be one vLLM would make a difference on: an
  abbreviation kvplan refuses is one vLLM 0.33 accepts as that flag or rejects, never one it reads as another.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kvplan_dev.vllm_overlay import vllm_env
from kvplan_operator.targets.vllm_argv import SHORT
from kvplan_operator.targets.vllm_flags import (DP_FLAG, DP_LOCAL_FLAG, DP_RANK_FLAG, Unexpressible, read_flags,
                                                write_flags)
from vllm_flag_cases import API, CASES, WANT, container, stubs, vllm_invocations  # type: ignore[import-not-found]

pytestmark = pytest.mark.vllm

JUDGE = Path(__file__).with_name("vllm_argv_judge.py")
#: Data-parallel argvs (every spelling kvplan reads, short names beside other ``-dp*`` options, the last one winning).
DP_CASES = {
    "long": ["--data-parallel-size", "4", "--data-parallel-size-local", "2"],
    "short": ["-dp", "8", "-dpl", "4", "-dpp", "13345", "-dpa", "10.0.0.1"],
    "underscore-equals": ["--data_parallel_size=2", "--data-parallel-size-local=2"],
    "last-wins": ["-dpl", "1", "--data-parallel-size-local", "2", "-dp", "2"],
    "rank": ["-dp", "4", "-dpn", "1"],
    "size-only": ["--data-parallel-size", "2"],
}


def prog_of(case_command: list[str], script_or_argv: str) -> str:
    return "api_server" if API in script_or_argv else "serve"


@pytest.fixture(scope="module")
def verdicts(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """vLLM's reading of every case's argv, before and after kvplan's write (one vLLM process for all)."""
    tmp = tmp_path_factory.mktemp("vllm-argv")
    bindir = stubs(tmp / "bin")
    jobs: list[dict[str, Any]] = []
    written: dict[str, Any] = {}
    for case_id, case in CASES.items():
        c = container(case)
        text = " ".join(case.command + case.args)
        try:
            after: Any = write_flags(c, WANT)
            written[case_id] = after
        except Unexpressible as exc:
            after, written[case_id] = None, str(exc)
        for label, cmd_args in (("before", (case.command, case.args)), ("after", after)):
            if cmd_args is None:
                continue
            command, args = cmd_args
            runs = vllm_invocations(list(command), list(args), case.env, bindir, tmp / "argv.jsonl")
            for k, run in enumerate(runs):
                jobs.append({"id": f"{case_id}/{label}/{k}", "prog": prog_of(case.command, text), "argv": run})
    # abbreviations and short forms of the owned flags, read by vLLM directly
    for flag in WANT:
        for n in range(3, len(flag)):
            jobs.append({"id": f"abbrev/{flag[:n]}", "prog": "serve", "argv": ["m", flag[:n], "3"]})
        jobs.append({"id": f"underscore/{flag}", "prog": "serve", "argv": ["m", flag.replace("-", "_").replace(
            "__", "--", 1), "3"]})
    for short in SHORT:
        for word in (short, short + "=3", short[:2]):
            jobs.append({"id": f"short/{word}", "prog": "serve", "argv": ["m", word, "3"] if "=" not in word
                         else ["m", word]})
    for case_id, argv in DP_CASES.items():  # the data-parallel flags kvplan only reads
        jobs.append({"id": f"dp/{case_id}", "prog": "serve", "argv": ["m", *argv]})
    src, out = tmp / "in.json", tmp / "out.json"
    src.write_text(json.dumps(jobs), encoding="utf-8")
    proc = subprocess.run([str(vllm_python), str(JUDGE), str(src), str(out)], capture_output=True, text=True,
                          timeout=900, check=False, cwd="/", env=vllm_env())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return {"vllm": json.loads(out.read_text(encoding="utf-8")), "written": written}


@pytest.mark.parametrize("case_id", list(CASES))
def test_vllm_runs_what_kvplan_wrote(case_id: str, verdicts: dict[str, Any]) -> None:
    written = verdicts["written"][case_id]
    if isinstance(written, str):
        assert CASES[case_id].expect == "refuse", written
        return
    runs = {k: v for k, v in verdicts["vllm"].items() if k.startswith(f"{case_id}/after/")}
    assert len(runs) == 1, runs
    (answer,) = runs.values()
    assert (answer.get("tp"), answer.get("pp")) == (4, 2), (written, answer)


@pytest.mark.parametrize("case_id", list(CASES))
def test_kvplan_reads_what_vllm_reads(case_id: str, verdicts: dict[str, Any]) -> None:
    """No parser differential: where kvplan writes a container, its reading of the original matches vLLM's."""
    if isinstance(verdicts["written"][case_id], str):
        return  # refused: kvplan claims nothing about it
    runs = [v for k, v in verdicts["vllm"].items() if k.startswith(f"{case_id}/before/")]
    if len(runs) != 1 or "error" in runs[0]:
        return  # the original did not start vLLM once (or vLLM refused it): nothing to compare
    flags = read_flags(container(CASES[case_id]))
    for key, flag in (("tp", "--tensor-parallel-size"), ("pp", "--pipeline-parallel-size")):
        text = flags[flag] or "1"
        if text.isdigit():  # kvplan claims a value (else it says it is known only at run time: no claim)
            assert int(text) == runs[0][key], (flag, flags, runs[0])


@pytest.mark.parametrize("case_id", list(DP_CASES))
def test_kvplan_reads_the_data_parallel_flags_as_vllm_does(case_id: str, verdicts: dict[str, Any]) -> None:
    """kvplan's reading of the data-parallel flags (which decide a pod's GPUs) is vLLM's parser's."""
    answer = verdicts["vllm"][f"dp/{case_id}"]
    assert "error" not in answer, answer
    flags = read_flags({"name": "vllm", "args": ["m", *DP_CASES[case_id]]})
    for key, flag, default in (("dp", DP_FLAG, 1), ("dpl", DP_LOCAL_FLAG, None), ("dpn", DP_RANK_FLAG, None)):
        text = flags[flag]  # absent: vLLM's default, which kvplan's count assumes too
        assert (int(text) if text is not None else default) == answer[key], (flag, flags, answer)


def test_refused_spellings_are_ones_vllm_reads_as_the_flag_or_rejects(verdicts: dict[str, Any]) -> None:
    """kvplan refuses every abbreviation and short form it does not write; vLLM 0.33 reads each as the owned flag
    (value 3) or refuses the command line; and the underscore spelling, which kvplan writes, is the flag."""
    answers = verdicts["vllm"]
    for key, answer in answers.items():
        kind, _, word = key.partition("/")
        if kind not in ("abbrev", "short", "underscore"):
            continue
        assert "error" in answer or 3 in (answer["tp"], answer["pp"]), (key, answer)
        if kind == "underscore" or word in SHORT:
            assert 3 in (answer["tp"], answer["pp"]), (key, answer)
    # vLLM does accept abbreviations: refusing them is needed, not cosmetic
    assert any(k.startswith("abbrev/") and "error" not in a for k, a in answers.items()), answers
