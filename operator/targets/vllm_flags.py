"""Where a container's vLLM flags live, and how to change them so vLLM really sees the change. Pure.

Kubernetes runs ``command + args`` (``command`` empty: the image's entrypoint). Three layouts occur:

- **argv** (``vllm serve m --tensor-parallel-size 4`` split into ``command``/``args``, or the
  ``vllm/vllm-openai`` image's entrypoint with flags in ``args``): a flag is replaced where it is (both
  ``--flag value`` and ``--flag=value``); an absent one is appended to the argv's end;
- **shell string** (``command: [sh, -c, "... vllm serve m --tensor-parallel-size 1 ..."]``, or the script in
  ``args[0]`` after ``command: [sh, -c]``; the production-stack chart's layout): a flag written with a literal value
  is replaced inside the string, every other character kept; an absent flag is inserted right after the one
  ``vllm serve`` (or ``vllm.entrypoints.openai.api_server``) in the script, or, when the script passes ``"$@"`` on,
  among the positional arguments after it. A flag set from a variable (``--tensor-parallel-size $TP``), a script
  with no or several vLLM invocations, or one that takes no ``"$@"`` is refused with :class:`Unexpressible`:
  anything appended after a ``sh -c`` script becomes ``$0``, ``$1``... and is silently ignored;
- **shell file** (``command: [bash, /start.sh]``): flags already in the argv are replaced; an absent one is refused
  (whether the script passes it on is unknowable).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

TP_FLAG = "--tensor-parallel-size"
PP_FLAG = "--pipeline-parallel-size"
SEQS_FLAG = "--max-num-seqs"
#: The engine knobs: ``--watermark`` (vLLM >= 0.33), ``--scheduling-policy``, ``--scheduler-cls``.
WATERMARK_FLAG = "--watermark"
POLICY_FLAG = "--scheduling-policy"
SCHEDULER_FLAG = "--scheduler-cls"
#: Read only: the executor backend decides whether vLLM can schedule asynchronously.
EXECUTOR_FLAG = "--distributed-executor-backend"
FLAGS = (TP_FLAG, PP_FLAG, SEQS_FLAG, WATERMARK_FLAG, POLICY_FLAG, SCHEDULER_FLAG, EXECUTOR_FLAG)
#: What vLLM 0.33 runs when a knob's flag is absent: the A100 defaults (``EngineArgs.get_batch_defaults``: 256
#: sequences below 70 GiB or on an A100; H100/H200 get 1024), no watermark, first come first served.
VLLM_DEFAULTS = {SEQS_FLAG: "256", WATERMARK_FLAG: "0", POLICY_FLAG: "fcfs"}
SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh", "busybox"})
_SEP = r"(?:=|(?:[ \t]|\\\r?\n)+)"
_VALUE = r"(\"[^\"\n]*\"|'[^'\n]*'|[^\s;&|)`]+)"
_VLLM = re.compile(r"(?<![\w./-])(?:vllm(?:[ \t]|\\\r?\n)+serve|vllm\.entrypoints\.openai\.api_server)(?![\w.-])")
_PASS_ON = re.compile(r"\$@|\$\{@\}")


class Unexpressible(ValueError):
    """The container's command/args cannot carry the flag without it being ignored; the message says why."""


def _flag_re(flag: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w-])" + re.escape(flag) + _SEP + _VALUE)


def literal(raw: str) -> str | None:
    """The value of a shell word if it is a plain literal (``4``, ``"4"``, ``'4'``), else None."""
    text = raw[1:-1] if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'" else raw
    return text if re.fullmatch(r"[A-Za-z0-9_.:/+-]+", text) and "$" not in text else None


def running(flags: Mapping[str, str | None], flag: str) -> str | None:
    """The value vLLM runs for ``flag`` given :func:`read_flags`'s ``flags``, normalised (``0.050`` -> ``0.05``):
    the literal, vLLM's default when absent (:data:`VLLM_DEFAULTS`; None for a flag without one), or the raw text
    when it comes from a shell variable (so it never equals a planned value)."""
    raw = flags.get(flag)
    if raw is None:
        return VLLM_DEFAULTS.get(flag)
    text = literal(raw)
    if text is None:
        return raw
    try:
        if flag == SEQS_FLAG:
            return str(int(text))
        return f"{float(text):g}" if flag == WATERMARK_FLAG else text
    except ValueError:
        return text


def read_flag(args: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` in an argv (either spelling; the last one wins, as in argparse), or None."""
    found = None
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            found = a.split("=", 1)[1]
        elif a == flag and i + 1 < len(args):
            found = args[i + 1]
    return found


def replace_flag(args: Sequence[str], flag: str, value: str) -> tuple[list[str], bool]:
    """Replace every ``flag`` in ``args`` by one ``flag value`` at the first place it appeared (later duplicates
    dropped); (new args, whether it was there). Every other arg keeps its position."""
    out: list[str] = []
    placed = False
    i = 0
    while i < len(args):
        a = args[i]
        if a == flag or a.startswith(flag + "="):
            if not placed:
                out += [flag, value]
                placed = True
            takes_next = a == flag and i + 1 < len(args) and not args[i + 1].startswith("--")
            i += 2 if takes_next else 1
            continue
        out.append(a)
        i += 1
    return out, placed


def set_flag(args: Sequence[str], flag: str, value: str | None) -> list[str]:
    """Replace ``flag``'s value in ``args`` or append it; ``value=None`` leaves ``args`` unchanged."""
    if value is None:
        return list(args)
    out, placed = replace_flag(args, flag, value)
    return out if placed else out + [flag, value]


@dataclass(frozen=True)
class Layout:
    """Where a container's vLLM argv is: ``kind`` and, for a ``sh -c`` script, its place (``("command", i)`` or
    ``("args", 0)``)."""

    kind: Literal["argv", "shell", "shell-file"]
    script: tuple[Literal["command", "args"], int] | None = None


def layout_of(command: Sequence[str], args: Sequence[str]) -> Layout:
    """Classify a container's ``command``/``args`` (see the module docstring)."""
    for j, word in enumerate(command):
        if os.path.basename(word) not in SHELLS:
            continue
        i = j + 1
        while i < len(command) and command[i].startswith("-") and not command[i].startswith("--"):
            if "c" in command[i][1:]:
                if i + 1 < len(command):
                    return Layout("shell", ("command", i + 1))
                return Layout("shell", ("args", 0)) if args else Layout("shell-file")
            i += 1
        return Layout("shell-file")
    return Layout("argv")


def _script(command: Sequence[str], args: Sequence[str], where: tuple[str, int]) -> tuple[str, list[str]]:
    """(script, positional words after it) of a ``sh -c`` layout."""
    if where[0] == "command":
        return command[where[1]], list(command[where[1] + 1:]) + list(args)
    return args[0], list(args[1:])


def read_flags(container: Mapping[str, Any]) -> dict[str, str | None]:
    """The raw values of the vLLM flags kvplan owns as the container would pass them (None: absent). A value set
    from a shell variable is returned as written (``$TP``)."""
    command, args = list(container.get("command") or []), list(container.get("args") or [])
    lay = layout_of(command, args)
    if lay.kind != "shell":
        return {f: read_flag(command + args, f) for f in FLAGS}
    assert lay.script is not None
    script, positional = _script(command, args, lay.script)
    out: dict[str, str | None] = {}
    for f in FLAGS:
        found = [m.group(1) for m in _flag_re(f).finditer(script)]
        value = found[-1] if found else None
        if _PASS_ON.search(script) and positional[1:]:
            value = read_flag(positional[1:], f) or value
        out[f] = None if value is None else (literal(value) or value)
    return out


def _edit_script(script: str, flag: str, value: str) -> tuple[str, bool]:
    """Replace ``flag``'s literal value(s) in ``script``; (new script, whether found). Raises Unexpressible when a
    value is not a literal."""
    pattern = _flag_re(flag)
    for m in pattern.finditer(script):
        if literal(m.group(1)) is None:
            raise Unexpressible(f"{flag} is set to {m.group(1)!r} in the container's shell script; kvplan writes "
                                "only literal values (set it literally, or move the flags to args)")
    new, n = pattern.subn(lambda m: m.group(0)[: m.start(1) - m.start(0)] + value, script)
    return new, n > 0


def write_flags(container: Mapping[str, Any], values: Mapping[str, str | None]) -> tuple[list[str], list[str]]:
    """(command, args) of ``container`` with each flag in ``values`` set (None: left as it is). Raises
    :class:`Unexpressible` when a flag cannot be set where vLLM would read it."""
    command, args = list(container.get("command") or []), list(container.get("args") or [])
    lay = layout_of(command, args)
    todo = {f: v for f, v in values.items() if v is not None}
    if lay.kind != "shell":
        for flag, value in todo.items():
            command, in_command = replace_flag(command, flag, value)
            args, in_args = replace_flag(args, flag, value)
            if in_command or in_args:
                continue
            if lay.kind == "shell-file":
                raise Unexpressible(f"{flag} is not in the container's argv and its command runs a shell script "
                                    f"({' '.join(command)[:80]}); whether that script passes flags on is unknown")
            if args or not command:
                args.append(flag)
                args.append(value)
            else:
                command += [flag, value]
        return command, args
    assert lay.script is not None
    script, positional = _script(command, args, lay.script)
    passes_on = bool(_PASS_ON.search(script)) and len(positional) >= 1
    for flag, value in todo.items():
        script, found = _edit_script(script, flag, value)
        if passes_on:
            rest, in_positional = replace_flag(positional[1:], flag, value)
            positional = positional[:1] + rest
            found = found or in_positional
        if found:
            continue
        if passes_on:
            positional += [flag, value]
            continue
        anchors = list(_VLLM.finditer(script))
        if len(anchors) != 1:
            raise Unexpressible(f"{flag} is not in the container's shell script and the script has "
                                f"{len(anchors)} `vllm serve` invocations (need exactly one to add it to)")
        end = anchors[0].end()
        script = script[:end] + f" {flag} {value}" + script[end:]
    if lay.script[0] == "command":
        i = lay.script[1]
        n_after = len(command) - i - 1
        command = command[:i] + [script] + positional[:n_after]
        args = positional[n_after:]
    else:
        args = [script] + positional
    return command, args


def has_switch(container: Mapping[str, Any], switch: str) -> bool:
    """Whether a flag without a value (``--no-async-scheduling``) is in the argv vLLM receives (a ``sh -c`` script
    counts, and so do the positional words it passes on)."""
    command, args = list(container.get("command") or []), list(container.get("args") or [])
    lay = layout_of(command, args)
    if lay.kind != "shell":
        return switch in command + args
    assert lay.script is not None
    script, positional = _script(command, args, lay.script)
    pattern = re.compile(r"(?<![\w-])" + re.escape(switch) + r"(?![\w=-])")
    return bool(pattern.search(script)) or (bool(_PASS_ON.search(script)) and switch in positional[1:])


def _drop(args: Sequence[str], flag: str) -> tuple[list[str], bool]:
    """``args`` without any ``flag value`` / ``flag=value``; (new args, whether it was there)."""
    out, _ = replace_flag(args, flag, "")
    if out == list(args):
        return out, False
    i = out.index(flag)
    return out[:i] + out[i + 2:], True


def remove_flags(container: Mapping[str, Any], flags: Sequence[str]) -> tuple[list[str], list[str]]:
    """(command, args) of ``container`` without ``flags`` wherever vLLM would read them. Raises
    :class:`Unexpressible` when one is set from a shell variable inside a ``sh -c`` script."""
    command, args = list(container.get("command") or []), list(container.get("args") or [])
    lay = layout_of(command, args)
    if lay.kind != "shell":
        for flag in flags:
            command, _ = _drop(command, flag)
            args, _ = _drop(args, flag)
        return command, args
    assert lay.script is not None
    script, positional = _script(command, args, lay.script)
    for flag in flags:
        pattern = re.compile(r"(?:[ \t]|\\\r?\n)*" + _flag_re(flag).pattern)
        for m in pattern.finditer(script):
            if literal(m.group(1)) is None:
                raise Unexpressible(f"{flag} is set to {m.group(1)!r} in the container's shell script; kvplan "
                                    "removes only literal values")
        script = pattern.sub("", script)
        if positional[1:]:
            rest, _ = _drop(positional[1:], flag)
            positional = positional[:1] + rest
    if lay.script[0] == "command":
        i = lay.script[1]
        n_after = len(command) - i - 1
        return command[:i] + [script] + positional[:n_after], positional[n_after:]
    return command, [script] + positional
