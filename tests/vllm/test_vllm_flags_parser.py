"""vLLM 0.33's own parser as the judge of kvplan's flag writing (issue 26, item 5; marker ``vllm``).

Every form of ``tests/vllm_flag_cases.py`` (argv and ``sh -c``: later ``-tp``, ``--tensor_parallel_size``,
abbreviations, ``# comments``, ``echo vllm serve``, ``"$@"``, ``python -m vllm.entrypoints.openai.api_server``,
``--flag=value``, ``-tp=8``, ``--config``, ``$TP``, ``exec``, ``&&``/``;`` chains, here-documents...):

- written by kvplan (``write_flags`` to TP 4 / PP 2), run by the real shell under argv-recording stubs, and the
  recorded argv read by vLLM 0.33's real command line (``vllm serve`` through ``vllm.entrypoints.cli.main``, the
  module form through its ``__main__``): vLLM must run TP 4 and PP 2;
- each *original* container read the same way, against what kvplan's reader (:func:`read_flags`) says it runs:
  where kvplan does not refuse the container, vLLM's values must be kvplan's (a parser differential otherwise);
- every form of ``KNOB_CASES`` (``--max_num_seqs``, ``--scheduling_policy=fcfs``, ``--watermark=0.2`` beside
  ``-tp``/``-pp=3``/``--pipeline_parallel_size``, a later duplicate in another spelling) written with the knobs
  too: vLLM must run kvplan's ``--max-num-seqs``, ``--scheduling-policy`` and ``--watermark``, and kvplan's reading
  of the original must be vLLM's;
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
from vllm_flag_cases import (API, CASES, KNOB_CASES, KNOB_WANT, WANT, container, stubs,  # type: ignore[import-not-found]
                             vllm_invocations)

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
    for case_id, case in KNOB_CASES.items():  # the engine knobs in every spelling, written with the parallel sizes
        c = container(case)
        after = write_flags(c, KNOB_WANT)
        written[case_id] = after
        for label, (command, args) in (("before", (case.command, case.args)), ("after", after)):
            for k, run in enumerate(vllm_invocations(list(command), list(args), case.env, bindir,
                                                     tmp / "argv.jsonl")):
                jobs.append({"id": f"{case_id}/{label}/{k}", "prog": "serve", "argv": run})
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
    assert {k: answer.get(k) for k in ("tp", "pp")} == {"tp": 4, "pp": 2}, (written, answer)


@pytest.mark.parametrize("case_id", list(KNOB_CASES))
def test_vllm_runs_the_knobs_kvplan_wrote_in_any_spelling(case_id: str, verdicts: dict[str, Any]) -> None:
    """``--max_num_seqs``, ``--flag=value`` and the ``-tp``/``-pp`` aliases, rewritten in place: vLLM 0.33's parser
    runs kvplan's values, and kvplan's reading of the original equals vLLM's."""
    answers = verdicts["vllm"]
    after = answers[f"{case_id}/after/0"]
    assert {k: after.get(k) for k in ("tp", "pp", "seqs", "active", "policy", "watermark")} == {
        "tp": 4, "pp": 2, "seqs": 48, "active": 24, "policy": "priority", "watermark": 0.05}
    before = answers[f"{case_id}/before/0"]
    assert "error" not in before, before
    flags = read_flags(container(KNOB_CASES[case_id]))
    claims = {"tp": flags["--tensor-parallel-size"], "pp": flags["--pipeline-parallel-size"],
              "seqs": flags["--max-num-seqs"], "active": flags["--max-num-active-seqs"],
              "policy": flags["--scheduling-policy"],
              "watermark": flags["--watermark"]}
    for key, text in claims.items():
        if text is not None:  # kvplan claims a value: vLLM's must be it
            assert str(before[key]) == text or float(before[key]) == float(text), (key, text, before)


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


_OPTION_STRINGS = """
import json, sys
from vllm.engine.arg_utils import EngineArgs
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
wanted = set(json.loads(sys.argv[1]))
out = {}
for action in parser._actions:
    longs = [s for s in action.option_strings if s.startswith("--")]
    for s in longs:
        if s in wanted:
            out[s] = sorted(action.option_strings)
print(json.dumps(out))
"""


def test_every_short_alias_vllm_declares_for_the_flags_kvplan_reads_is_known(vllm_python: Path) -> None:
    """vLLM 0.33's own parser lists the option strings of each flag kvplan reads or writes: every short alias
    (``-tp``) is one kvplan's reader maps to that flag, and every long spelling is the flag itself or its negation."""
    from kvplan_operator.targets.vllm_async import READS, SHORT_CONFIGS
    from kvplan_operator.targets.vllm_flags import FLAGS

    wanted = sorted(set(FLAGS) | set(READS))
    proc = subprocess.run([str(vllm_python), "-c", _OPTION_STRINGS, json.dumps(wanted)], capture_output=True,
                          text=True, timeout=600, check=False, cwd="/", env=vllm_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    options: dict[str, list[str]] = json.loads(proc.stdout.strip().splitlines()[-1])
    known = {**SHORT, **SHORT_CONFIGS}
    assert set(options) >= set(FLAGS), sorted(set(FLAGS) - set(options))  # vLLM has every flag kvplan writes
    for flag, strings in options.items():
        shorts = {s for s in strings if not s.startswith("--")}
        assert {known.get(s) for s in shorts} <= {flag}, (flag, strings)
        assert {s for s in shorts} == {s for s, f in known.items() if f == flag}, (flag, strings)
        for s in strings:
            if s.startswith("--"):
                inverse = {"--enable-": "--disable-", "--disable-": "--enable-"}
                flips = {new + flag.removeprefix(old) for old, new in inverse.items() if flag.startswith(old)}
                assert s in {flag, "--no-" + flag[2:], *flips} or flag == "--no-" + s[2:], (flag, strings)
    # the switches kvplan reads in every spelling vLLM accepts (EnableDisableAction: --disable-x is --no-enable-x)
    for flag, strings in options.items():
        for s in strings:
            if s.startswith("--") and s != flag:
                assert s in READS or s.removeprefix("--no-") in (f.removeprefix("--") for f in READS) \
                    or flag in FLAGS, (flag, s)
