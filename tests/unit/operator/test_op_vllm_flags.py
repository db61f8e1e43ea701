"""Where a container's vLLM flags live and how the Deployment target changes them (operator/targets/vllm_flags.py):
flags in ``args`` (the vllm-openai image), in ``command`` (``vllm serve`` as the command), inside a ``sh -c`` string
in ``command`` or in ``args[0]`` (the production-stack chart), passed on through ``"$@"``; and the layouts it must
refuse rather than append a flag the shell ignores (a value from a variable, no or two ``vllm serve``, a shell
script file). Each case checks what vLLM would really receive, by re-reading the result."""

from __future__ import annotations

import shlex

import pytest

from kvplan_operator.targets.vllm_flags import (FLAGS, PP_FLAG, SEQS_FLAG, TP_FLAG, Unexpressible, layout_of,
                                                read_flags, write_flags)

WANT = {TP_FLAG: "4", PP_FLAG: "2", SEQS_FLAG: None}


def vllm_argv(command: list[str], args: list[str]) -> list[str]:
    """What the vLLM process receives: command + args, or, for ``sh -c SCRIPT $0 $@...``, the words of SCRIPT with
    ``"$@"`` expanded (a test-side model of the shell, independent of the code under test)."""
    full = command + args
    if full and full[0].rsplit("/", 1)[-1] in ("sh", "bash") and full[1].startswith("-") and "c" in full[1]:
        script, positional = full[2], full[4:]
        words = shlex.split(script.replace("\\\n", " "))
        out: list[str] = []
        for w in words:
            out += positional if w == "$@" else [w]
        return out
    return full


def flag(argv: list[str], name: str) -> str | None:
    found = None
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            found = argv[i + 1]
        elif a.startswith(name + "="):
            found = a.split("=", 1)[1]
    return found


@pytest.mark.parametrize(
    ("command", "args", "kind"),
    [
        pytest.param([], ["--model", "m", "--tensor-parallel-size", "1"], "argv", id="args-image-entrypoint"),
        pytest.param(["vllm", "serve", "m", "--tensor-parallel-size=1"], [], "argv", id="command-vllm-serve"),
        pytest.param(["python3", "-m", "vllm.entrypoints.openai.api_server"], ["--model", "m"], "argv",
                     id="command-module-args-flags"),
        pytest.param(["/bin/sh", "-c", "vllm serve /data/m --host 0.0.0.0 --tensor-parallel-size 1"], [], "shell",
                     id="sh-c-in-command"),
        pytest.param(["/bin/bash", "-c"], ["pip install x && vllm serve m --tensor-parallel-size \"1\" --port 8000"],
                     "shell", id="production-stack-sh-c-in-args"),
        pytest.param(["bash", "-ec", "exec vllm serve m \\\n  --tensor-parallel-size 1 \\\n  --port 8000"], [], "shell",
                     id="multi-line-continuations"),
        pytest.param(["sh", "-c", "exec vllm serve m \"$@\"", "vllm"], ["--tensor-parallel-size", "1"], "shell",
                     id="sh-c-passes-args-on"),
        pytest.param(["sh", "-c", "vllm serve m --port 8000"], [], "shell", id="sh-c-flag-absent-inserted"),
    ],
)
def test_flags_land_where_vllm_reads_them(command, args, kind):
    container = {"command": command, "args": args}
    assert layout_of(command, args).kind == kind
    new_command, new_args = write_flags(container, WANT)
    argv = vllm_argv(new_command, new_args)
    assert flag(argv, TP_FLAG) == "4" and flag(argv, PP_FLAG) == "2", argv
    assert argv.count(TP_FLAG) + sum(a.startswith(TP_FLAG + "=") for a in argv) == 1, argv  # one, not a duplicate
    assert read_flags({"command": new_command, "args": new_args})[TP_FLAG] == "4"
    # idempotent: writing the same values again changes nothing
    assert write_flags({"command": new_command, "args": new_args}, WANT) == (new_command, new_args)
    if kind == "shell":
        before = vllm_argv(command, args)
        assert [a for a in argv if a not in ("4", "2", TP_FLAG, PP_FLAG, "1")] == \
            [a for a in before if a not in ("1", TP_FLAG, PP_FLAG)]  # every other word kept, in order


def test_shell_string_keeps_every_other_character():
    script = "set -e; vllm serve /m --tensor-parallel-size 1  --enable-prefix-caching # tp from the chart"
    command, args = write_flags({"command": ["sh", "-c", script]}, {TP_FLAG: "8", PP_FLAG: None, SEQS_FLAG: None})
    assert command == ["sh", "-c", script.replace("--tensor-parallel-size 1", "--tensor-parallel-size 8")]
    assert args == []


@pytest.mark.parametrize(
    ("command", "args", "needle"),
    [
        pytest.param(["sh", "-c", "vllm serve m --tensor-parallel-size $TP"], [], "$TP", id="value-from-variable"),
        pytest.param(["sh", "-c", "vllm serve m --tensor-parallel-size ${TP:-1}"], [], "${TP", id="default-expansion"),
        pytest.param(["sh", "-c", "python /app/server.py --port 8000"], [], "0 `vllm serve`", id="no-vllm-serve"),
        pytest.param(["sh", "-c", "vllm serve a & vllm serve b"], [], "2 `vllm serve`", id="two-vllm-serve"),
        pytest.param(["bash", "/start.sh"], ["--model", "m"], "shell script", id="shell-script-file"),
    ],
)
def test_refused_rather_than_ignored(command, args, needle):
    """Anything appended after a ``sh -c`` script becomes $0/$1 and is ignored; these layouts are refused."""
    container = {"command": command, "args": args}
    with pytest.raises(Unexpressible) as info:
        write_flags(container, WANT)
    assert needle in str(info.value)


def test_dollar_at_with_nothing_for_dollar0_goes_into_the_script():
    """``sh -c 'vllm serve m "$@"'`` with no words after the script: an appended word would become $0, not part of
    "$@", so the flag is inserted after ``vllm serve`` instead."""
    command, args = write_flags({"command": ["sh", "-c", 'exec vllm serve m "$@"']}, WANT)
    assert args == [] and flag(vllm_argv(command, args), TP_FLAG) == "4"


def test_shell_file_flags_already_in_args_are_replaced():
    command, args = write_flags({"command": ["bash", "/start.sh"], "args": ["--tensor-parallel-size", "1",
                                                                            "--pipeline-parallel-size", "1"]}, WANT)
    assert command == ["bash", "/start.sh"] and args == ["--tensor-parallel-size", "4", "--pipeline-parallel-size", "2"]


def test_read_flags_reports_variables_as_written():
    flags = read_flags({"command": ["sh", "-c", "vllm serve m --tensor-parallel-size $TP --max-num-seqs '64'"]})
    # an unquoted $TP may split into more words (`4 --pipeline-parallel-size 8`): the flags with no occurrence after
    # it are known only at run time too (issue 26: vLLM's parser is the judge, tests/vllm/test_vllm_flags_parser.py)
    assert {f: flags[f] for f in (TP_FLAG, PP_FLAG, SEQS_FLAG)} == {TP_FLAG: "$TP", PP_FLAG: "$TP", SEQS_FLAG: "64"}
    assert set(flags) == set(FLAGS) and all(flags[f] == "$TP" for f in FLAGS if f not in (TP_FLAG, SEQS_FLAG))
    quoted = read_flags({"command": ["sh", "-c", "vllm serve m --port \"$PORT\" --tensor-parallel-size 2"]})
    assert quoted[TP_FLAG] == "2" and quoted[PP_FLAG] == '"$PORT"'  # PORT itself is unknown, so is PP


@pytest.mark.parametrize("args", [
    pytest.param(["m", "--config", "c.yaml"], id="config"),
    pytest.param(["m", "--config=c.yaml", "-tp", "2"], id="config-equals-with-alias"),
    pytest.param(["m", "--conf=c.yaml"], id="config-abbreviated-equals"),
])
def test_a_config_file_is_refused_by_its_own_reason(args):
    from kvplan_operator.targets.vllm_flags import UnreadableConfig, remove_flags

    with pytest.raises(UnreadableConfig, match="--config"):
        write_flags({"args": args}, {"--tensor-parallel-size": "4"})
    with pytest.raises(UnreadableConfig):
        remove_flags({"args": args}, ["--scheduler-cls"])
