"""Where a container's vLLM flags live, and how to change them so vLLM really runs the change. Pure.

Kubernetes runs ``command + args`` (``command`` empty: the image's entrypoint, ``vllm serve`` in vllm/vllm-openai),
expanding ``$(NAME)`` from the container's env. kvplan reads that argv the way the shell and vLLM 0.33's own parser
do (issue 26, item 5: before, a later ``-tp 8``, ``--tensor_parallel_size 8`` or ``--tensor-parallel 2``, a flag in
a ``# comment``, an ``echo vllm serve`` or a ``"$@"`` passed to another command made status say TP 4 where vLLM ran
TP 8 or 1):

- :mod:`.vllm_view` finds the argv vLLM receives, word by word: the args of the image's entrypoint; the words after
  ``vllm serve`` or ``python -m vllm.entrypoints.openai.api_server`` in ``command + args``; in a ``sh -c`` script
  (``command: [sh, -c, "..."]``, or ``command: [bash, -c]`` with the script in ``args[0]``, the vLLM
  production-stack chart's layout), the words of its one vLLM command as the shell reads them (:mod:`.shell_words`),
  with ``"$@"`` in that command standing for the positional arguments after ``$0``;
- :mod:`.vllm_argv` finds every word vLLM reads as a flag kvplan owns, in any spelling (``--flag v``,
  ``--flag=v``, ``--flag_with_underscores``, ``-tp``/``-pp``, ``-tp=8``): each is set to kvplan's value in place
  (every other character of a script kept), so the last one, which vLLM uses, is kvplan's; an absent flag is added
  at the end of vLLM's argv (after every other word, so nothing later can override it): appended to the argv, at
  the end of the script's vLLM command, or after the positional words when that command ends with ``"$@"``;
- refused (:class:`Unexpressible`, condition ``UnsupportedContainerLayout``, nothing applied) whenever kvplan cannot
  vouch for what vLLM will run: an abbreviation (``--tensor-parallel``) or malformed short name (``-tp8``, ``-t``),
  ``--config file.yaml`` (:class:`UnreadableConfig`, condition ``UnreadableEngineConfig``), a bare ``--``, a value known only at run time (``--tensor-parallel-size $TP``), a word
  known only at run time after the flag (``$EXTRA_ARGS``: it may set it again), a script with no or several vLLM
  commands, shell constructs not parsed (here-documents, ``if``/``for``/``case``, subshells, functions), and a
  kubelet ``$(NAME)`` inside a script;
- **shell file** (``command: [bash, /start.sh]``) or another program in ``command``: flags already in the argv are
  replaced; an absent one is refused (whether that program passes flags on is unknowable).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from .vllm_argv import is_config, later_unknown, scan, value_index, value_of
from .vllm_view import Edit, Layout, View, edit, layout_of, view

TP_FLAG = "--tensor-parallel-size"
PP_FLAG = "--pipeline-parallel-size"
SEQS_FLAG = "--max-num-seqs"
#: The admission cap without the runner's capacity (vLLM 0.33: ``SchedulerConfig.max_num_active_seqs``).
ACTIVE_SEQS_FLAG = "--max-num-active-seqs"
#: The engine knobs: ``--watermark`` (vLLM >= 0.33), ``--scheduling-policy``, ``--scheduler-cls``.
WATERMARK_FLAG = "--watermark"
POLICY_FLAG = "--scheduling-policy"
SCHEDULER_FLAG = "--scheduler-cls"
#: Read only: kvplan never writes it.
EXECUTOR_FLAG = "--distributed-executor-backend"
#: Read only: data parallelism. A pod runs ``--data-parallel-size-local`` engines of TP x PP GPUs each (absent:
#: ``--data-parallel-size``, or 1 with ``--data-parallel-rank``, vLLM's external load balancing; ``dp_local``).
DP_FLAG = "--data-parallel-size"
DP_LOCAL_FLAG = "--data-parallel-size-local"
DP_RANK_FLAG = "--data-parallel-rank"
FLAGS = (TP_FLAG, PP_FLAG, SEQS_FLAG, ACTIVE_SEQS_FLAG, WATERMARK_FLAG, POLICY_FLAG, SCHEDULER_FLAG, EXECUTOR_FLAG,
         DP_FLAG, DP_LOCAL_FLAG, DP_RANK_FLAG)
#: What vLLM 0.33 runs when a knob's flag is absent: the A100 defaults (``EngineArgs.get_batch_defaults``: 256
#: sequences below 70 GiB or on an A100; H100/H200 get 1024), no watermark, first come first served.
VLLM_DEFAULTS = {SEQS_FLAG: "256", WATERMARK_FLAG: "0", POLICY_FLAG: "fcfs"}
__all__ = ["Layout", "layout_of", "read_flags", "write_flags", "remove_flags", "Unexpressible", "UnreadableConfig"]


class Unexpressible(ValueError):
    """The container's command/args cannot carry the flag without it being ignored; the message says why."""


class UnreadableConfig(Unexpressible):
    """The argv has ``--config FILE``: vLLM reads more flags from a file kvplan cannot see (a file inside the
    image), so nothing kvplan writes is sure to be what vLLM runs."""


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
        if flag in (SEQS_FLAG, ACTIVE_SEQS_FLAG):
            return str(int(text))
        return f"{float(text):g}" if flag == WATERMARK_FLAG else text
    except ValueError:
        return text


def dp_local(flags: Mapping[str, str | None]) -> int | None:
    """vLLM engines one pod runs (data parallelism on one node, vLLM 0.33's ``EngineArgs``), from
    :func:`read_flags`'s ``flags``: ``--data-parallel-size-local``, else 1 with ``--data-parallel-rank`` (external
    load balancing), else ``--data-parallel-size``, else 1. None when a value that decides it is not a positive
    literal integer (``$DP``)."""
    for flag in (DP_LOCAL_FLAG, DP_RANK_FLAG, DP_FLAG):
        raw = flags.get(flag)
        if raw is None:
            continue
        text = literal(raw)
        if flag == DP_RANK_FLAG:
            return 1 if text is not None and text.isdigit() else None
        return int(text) if text is not None and text.isdigit() and int(text) > 0 else None
    return 1


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


def has_switch(container: Mapping[str, Any], switch: str) -> bool:
    """Whether vLLM reads the value-less flag ``switch`` (``--headless``) from the container's argv, in any
    spelling vLLM accepts (:func:`.vllm_argv.scan`); False when the argv cannot be read."""
    v = view(container)
    return v.problem is None and bool(scan(v.argv, [switch])[0][switch])


def _doubts(v: View) -> list[str]:
    return scan(v.argv, FLAGS)[1]


def read_flags(container: Mapping[str, Any]) -> dict[str, str | None]:
    """The raw value vLLM gets for each flag kvplan owns (the last occurrence, in any spelling; None: absent or
    dangling). A value known only at run time is returned as written (``$TP``), and so is a word known only at run
    time after the last occurrence (``$EXTRA_ARGS``: it may set the flag again). A container whose argv cannot be
    told reads as having none of them (writing to it is refused)."""
    v = view(container)
    if v.problem is not None:
        return dict.fromkeys(FLAGS)
    found, _ = scan(v.argv, FLAGS)
    out: dict[str, str | None] = {}
    for f in FLAGS:
        occ = found[f][-1] if found[f] else None
        j = value_index(v.argv, occ) if occ else None
        u = later_unknown(v.argv, -1 if occ is None else (j if j is not None else occ.index))
        if u is not None:  # a word known only at run time may set it (again): vLLM's value is unknown too
            out[f] = v.raws[u]
            continue
        if occ is None or j is None:
            out[f] = None
            continue
        known = value_of(v.argv, occ)
        raw = v.raws[j].split("=", 1)[1] if occ.inline and "=" in v.raws[j] else v.raws[j]
        out[f] = (literal(known) or known) if known is not None else raw
    return out


def _refuse_doubts(v: View) -> None:
    config = next((w for w in v.argv if w is not None and is_config(w)), None)
    if config is not None:
        raise UnreadableConfig(f"vLLM's argv has `{config}`: vLLM reads more flags from that file, which kvplan cannot "
                               "see; move the flags kvplan sets out of it into the argv, and drop --config")
    doubts = _doubts(v)
    if doubts:
        raise Unexpressible("vLLM's parser may read the container's argv otherwise: " + "; ".join(doubts))


def _set_one(container: Mapping[str, Any], flag: str, value: str) -> tuple[list[str], list[str]]:
    """(command, args) with ``flag`` set to ``value`` wherever vLLM reads it, or added at the end."""
    v = view(container)
    if v.problem is not None:
        raise Unexpressible(v.problem)
    _refuse_doubts(v)
    occs = scan(v.argv, FLAGS)[0][flag]
    edits: list[Edit] = []
    for occ in occs:
        j = value_index(v.argv, occ)
        if j is not None and v.argv[j] is None:
            raise Unexpressible(f"{flag} is set to {v.raws[j]!r}, a value known only at run time; kvplan writes only "
                                "literal values (set it literally, or move the flags to args)")
        if occ.inline:
            edits.append(Edit(v.slots[occ.index], f"{occ.spelling}={value}"))
        elif j is not None:
            edits.append(Edit(v.slots[j], value))
        else:
            edits.append(Edit(v.slots[occ.index], value, after=True))
    if occs:
        last = occs[-1]
        u = later_unknown(v.argv, value_index(v.argv, last) or last.index)
        if u is not None:
            raise Unexpressible(f"`{v.raws[u]}` after {flag} is known only at run time and may set it again (vLLM "
                                "uses the last value); put the flag after it, or make it literal")
    elif v.opaque:
        command = " ".join(container.get("command") or [])[:80]
        raise Unexpressible(f"{flag} is not in the container's argv and its command runs a shell script or another "
                            f"program ({command}); whether it passes flags on to vLLM is unknown")
    elif v.end is None:
        return list(container.get("command") or []), list(container.get("args") or []) + [flag, value]
    else:
        edits.append(Edit(v.end, f"{flag} {value}" if v.end[0] == "script-end" else flag, after=True))
        if v.end[0] != "script-end":
            edits.append(Edit(v.end, value, after=True))
    return edit(container, v.layout, edits)


def write_flags(container: Mapping[str, Any], values: Mapping[str, str | None]) -> tuple[list[str], list[str]]:
    """(command, args) of ``container`` with each flag in ``values`` set (None: left as it is). Raises
    :class:`Unexpressible` when vLLM might not run that value (see the module docstring)."""
    current: dict[str, Any] = dict(container)
    command, args = list(container.get("command") or []), list(container.get("args") or [])
    for flag, value in values.items():
        if value is None:
            continue
        command, args = _set_one(current, flag, value)
        current = {**current, "command": command, "args": args}
    return command, args


def remove_flags(container: Mapping[str, Any], flags: Sequence[str]) -> tuple[list[str], list[str]]:
    """(command, args) of ``container`` without ``flags`` wherever vLLM reads them. Raises
    :class:`Unexpressible` when one is set to a value known only at run time, or the argv cannot be told."""
    current: dict[str, Any] = dict(container)
    command, args = list(container.get("command") or []), list(container.get("args") or [])
    for flag in flags:
        v = view(current)
        if v.problem is not None:
            raise Unexpressible(v.problem)
        _refuse_doubts(v)
        edits: list[Edit] = []
        for occ in scan(v.argv, FLAGS)[0].get(flag, []):
            j = value_index(v.argv, occ)
            if j is not None and v.argv[j] is None:
                raise Unexpressible(f"{flag} is set to {v.raws[j]!r} in the container's argv; kvplan removes only "
                                    "literal values")
            edits.append(Edit(v.slots[occ.index], None))
            if j is not None and j != occ.index:
                edits.append(Edit(v.slots[j], None))
        if edits:
            command, args = edit(current, v.layout, edits)
            current = {**current, "command": command, "args": args}
    return command, args
