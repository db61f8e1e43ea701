"""vLLM's own argv, read the way vLLM 0.33's parser reads it (issue 26, item 5). Pure.

vLLM parses ``vllm serve [model] [options]`` (and ``python -m vllm.entrypoints.openai.api_server [options]``)
with ``FlexibleArgumentParser``, an ``argparse.ArgumentParser``: the **last** occurrence of an option wins; a long
option may be **abbreviated** to any unique prefix (``--tensor-parallel 2``); ``--tensor_parallel_size`` is
``--tensor-parallel-size`` (underscores become dashes); ``-tp``/``-pp`` are short names of the parallel sizes
(``-tp=8`` too, and ``-t`` abbreviates ``-tp``); ``--config file.yaml`` adds the options of a file kvplan cannot
see; after a bare ``--`` nothing is an option. So for every flag kvplan owns, :func:`scan` finds each word vLLM
reads as that flag in any spelling, and reports what kvplan cannot vouch for (:class:`Doubt`): an abbreviation or a
malformed short name (``-tp8``), ``--config``, ``--``, a value or a later word that is only known at run time
(``$TP``, ``$EXTRA_ARGS``: it may set the flag again, and the last one wins). ``tests/vllm/test_vllm_flags_parser.py``
checks these rules against vLLM 0.33's real parser.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

#: vLLM 0.33's short option names of flags kvplan owns (``EngineArgs.add_cli_args``).
SHORT = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size"}
#: Short names of flags kvplan only reads (data parallelism, ``EngineArgs.add_cli_args``): matched exactly. vLLM
#: has more ``-dp*`` short names (``-dpp``, ``-dpa``, ...), so a longer word is another option, not a doubt.
READ_SHORT = {"-dp": "--data-parallel-size", "-dpl": "--data-parallel-size-local", "-dpn": "--data-parallel-rank"}
CONFIG = "--config"
#: The module form of the OpenAI server.
API_SERVER = "vllm.entrypoints.openai.api_server"
_PYTHON = re.compile(r"python[0-9.]*")
#: Words a launcher may put before the vLLM command itself (``exec vllm serve``, ``env A=1 vllm serve``).
WRAPPERS = frozenset({"exec", "env", "nohup", "command"})


@dataclass(frozen=True)
class Occurrence:
    """A word vLLM reads as ``flag``: its index in the argv, the option as written (``-tp``), and whether the value
    is in the same word (``--flag=value``)."""

    flag: str
    index: int
    spelling: str
    inline: bool


class Doubt(ValueError):
    """vLLM may read the argv otherwise than kvplan would write it; the message says where and why."""


def _norm(name: str) -> str:
    return "--" + name[2:].replace("_", "-") if name.startswith("--") else name


def reads_as(word: str, flags: Sequence[str]) -> tuple[str | None, str]:
    """The owned flag ``word`` is read as by vLLM (None: none), and a doubt ('' if none): an abbreviation, a
    malformed short name, ``--config`` or ``--``."""
    if not word.startswith("-") or word == "-" or re.fullmatch(r"-[0-9.]+", word):
        return None, ""
    if word == "--":
        return None, "a bare `--` (vLLM reads no option after it)"
    name = word.split("=", 1)[0]
    if name.startswith("--"):
        norm = _norm(name)
        if norm == CONFIG or (len(norm) > 3 and CONFIG.startswith(norm)):
            return None, f"`{word}` (vLLM reads more options from that file, which kvplan cannot see)"
        for flag in flags:
            if norm == flag:
                return flag, ""
            if len(norm) > 2 and flag.startswith(norm):
                return None, f"`{name}` (vLLM may read it as {flag}: abbreviations are allowed; write it in full)"
        return None, ""
    if name in READ_SHORT:
        return (READ_SHORT[name] if READ_SHORT[name] in flags else None), ""
    for short, flag in SHORT.items():
        if flag not in flags:
            continue
        if name == short:
            return flag, ""
        if short.startswith(name) or name.startswith(short):
            return None, f"`{name}` (vLLM may read it as {short}, i.e. {flag}; write `{short} N` or `{flag} N`)"
    return None, ""


def is_config(word: str) -> bool:
    """Whether vLLM reads ``word`` as ``--config`` (``--config``, ``--config=f``, underscores, a prefix of it)."""
    name = word.split("=", 1)[0]
    if not name.startswith("--"):
        return False
    norm = _norm(name)
    return norm == CONFIG or (len(norm) > 3 and CONFIG.startswith(norm))


def scan(argv: Sequence[str | None], flags: Sequence[str]) -> tuple[dict[str, list[Occurrence]], list[str]]:
    """Every occurrence of each of ``flags`` in ``argv`` (values; None: a word known only at run time), in order,
    and the doubts found (see the module docstring)."""
    found: dict[str, list[Occurrence]] = {f: [] for f in flags}
    doubts: list[str] = []
    for i, word in enumerate(argv):
        if word is None:
            continue
        flag, doubt = reads_as(word, flags)
        if doubt:
            doubts.append(doubt)
        if flag is not None:
            name = word.split("=", 1)[0]
            found[flag].append(Occurrence(flag, i, name, "=" in word))
    return found, doubts


def value_index(argv: Sequence[str | None], occ: Occurrence) -> int | None:
    """Where ``occ``'s value is: its own word (inline), the next word, or None (dangling: no value follows)."""
    if occ.inline:
        return occ.index
    nxt = occ.index + 1
    if nxt < len(argv) and not (argv[nxt] or "").startswith("--") and argv[nxt] != "-tp" and argv[nxt] != "-pp":
        return nxt
    return None


def value_of(argv: Sequence[str | None], occ: Occurrence) -> str | None:
    """The occurrence's value as vLLM gets it (None: unknown at run time or dangling)."""
    j = value_index(argv, occ)
    if j is None or argv[j] is None:
        return None
    word = argv[j]
    assert word is not None
    return word.split("=", 1)[1] if occ.inline else word


def later_unknown(argv: Sequence[str | None], after: int) -> int | None:
    """The first word after index ``after`` known only at run time (it may set the flag again), or None."""
    return next((i for i in range(after + 1, len(argv)) if argv[i] is None), None)


def vllm_start(words: Sequence[str | None]) -> list[int]:
    """Indices where a vLLM argv starts in ``words`` (after ``vllm serve`` or ``python -m <api_server>``, wrappers
    like ``exec`` skipped only at the front): one entry per vLLM invocation found."""
    out = []
    i = 0
    while i < len(words) and (words[i] in WRAPPERS or (words[i] or "").count("=") and i > 0
                              and words[i - 1] == "env"):
        i += 1
    head = words[i] if i < len(words) else None
    base = os.path.basename(head) if head else ""
    if base == "vllm" and i + 1 < len(words) and words[i + 1] == "serve":
        out.append(i + 2)
    elif _PYTHON.fullmatch(base):
        j = i + 1
        while j < len(words) and (words[j] or "").startswith("-") and words[j] != "-m":
            j += 1
        if j + 1 < len(words) and words[j] == "-m" and words[j + 1] == API_SERVER:
            out.append(j + 2)
    return out
