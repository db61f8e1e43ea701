"""A ``sh -c`` script as the shell reads it, for finding the one vLLM command in it (issue 26, item 5). Pure.

Only what such scripts need is modelled, and anything else is refused (:class:`ShellUnsupported`, with why):
words with ``'...'``, ``"..."``, ``\\`` escapes and line continuations; ``#`` comments; the operators ``;``, ``&``,
``&&``, ``|``, ``||`` and newlines between simple commands; redirections (``>f``, ``2>&1``, ``&>f``, ``<f``,
``>>f``); leading assignments (``A=1 cmd``); and expansions: ``$NAME``, ``${NAME}``, ``$(...)``, backticks and
the positional parameters. A word's value is known when it is literal, or when its variables have known values
(:class:`Env`) and, unquoted, no field splitting or pathname expansion can change it; otherwise it is
``None`` (unknown). ``"$@"`` (or ``$@``, ``${@}``) alone as a word passes the script's positional arguments on.

Refused: here-documents (``<<``), compound commands and keywords (``if``, ``for``, ``while``, ``case``, ``(``,
``{``, functions, ...), ``$'...'``, and unterminated quotes or substitutions. The scripts kvplan meets (the vLLM
production-stack chart's ``pip install ... && vllm serve ...``, ``exec vllm serve "$@"``) need none of them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")
_OPERATORS = ("&&", "||", ";;", ";", "&", "|", "\n")
_REDIRECT = re.compile(r"[0-9]*(?:>>|>&|<&|<>|>\||>|<)|&>>|&>")
KEYWORDS = frozenset({"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac",
                      "select", "function", "in", "{", "}", "!", "[[", "]]", "coproc", "time"})
#: Characters that end an unquoted word.
_BREAK = " \t\n;&|<>()"


class ShellUnsupported(ValueError):
    """The script uses a construct kvplan does not parse; the message names it."""


@dataclass(frozen=True)
class Word:
    """One shell word: its span in the script, its value (None: unknown until run time), whether it is the
    positional arguments passed on (``"$@"``) and whether any part of it was quoted."""

    start: int
    end: int
    raw: str
    value: str | None
    pass_on: bool = False


@dataclass
class Command:
    """One simple command: its words (assignments and redirections removed) and where it ends in the script."""

    words: list[Word] = field(default_factory=list)
    assignments: list[tuple[str, str | None]] = field(default_factory=list)
    end: int = 0


@dataclass
class Env:
    """Variables whose values are known (container env with literal values, then the script's own assignments);
    ``closed``: a name not listed is unset (else it may come from the image or ``envFrom``: unknown)."""

    known: dict[str, str | None] = field(default_factory=dict)
    closed: bool = False

    def get(self, name: str) -> tuple[bool, str | None]:
        """(known, value); an unset name in a closed env is known and empty."""
        if name in self.known:
            value = self.known[name]
            return value is not None, value
        return self.closed, "" if self.closed else None


def _scan_dollar(script: str, i: int) -> tuple[int, str | None, str]:
    """At ``$`` (index ``i``): (index after the expansion, its variable name or None, its kind: ``var``,
    ``special``, ``subst``, ``literal``)."""
    nxt = script[i + 1:i + 2]
    if nxt == "{":
        close = script.find("}", i + 2)
        if close < 0:
            raise ShellUnsupported("an unterminated ${...}")
        inner = script[i + 2:close]
        if _NAME.fullmatch(inner):
            return close + 1, inner, "var"
        return close + 1, inner, "special" if inner in ("@", "*", "#", "?", "!", "$", "-", "0") or inner.isdigit() \
            else "subst"
    if nxt == "(":
        depth, j = 0, i + 1
        while j < len(script):
            c = script[j]
            if c == "\\":
                j += 2
                continue
            if c in "'\"":
                close = script.find(c, j + 1)
                if close < 0:
                    raise ShellUnsupported("an unterminated quote inside $(...)")
                j = close + 1
                continue
            depth += (c == "(") - (c == ")")
            j += 1
            if depth == 0:
                return j, None, "subst"
        raise ShellUnsupported("an unterminated $(...)")
    if nxt == "'":
        raise ShellUnsupported("$'...' quoting")
    m = _NAME.match(script, i + 1)
    if m:
        return m.end(), m.group(0), "var"
    if nxt and (nxt in "@*#?!$-" or nxt.isdigit()):
        return i + 2, nxt, "special"
    return i + 1, None, "literal"


def _word(script: str, i: int, env: Env) -> tuple[Word, int]:
    """The word starting at ``i`` and the index after it."""
    start, out, known, quoted_parts, parts = i, [], True, False, []
    while i < len(script) and script[i] not in _BREAK:
        c = script[i]
        if c == "\\":
            if script[i + 1:i + 2] == "\n":
                i += 2
                continue
            out.append(script[i + 1:i + 2])
            parts.append("lit")
            i += 2
        elif c == "'":
            close = script.find("'", i + 1)
            if close < 0:
                raise ShellUnsupported("an unterminated '...'")
            out.append(script[i + 1:close])
            quoted_parts, i = True, close + 1
            parts.append("lit")
        elif c == '"':
            i += 1
            quoted_parts = True
            while True:
                if i >= len(script):
                    raise ShellUnsupported('an unterminated "..."')
                c = script[i]
                if c == '"':
                    i += 1
                    break
                if c == "\\" and script[i + 1:i + 2] in ('"', "\\", "$", "`", "\n"):
                    out.append("" if script[i + 1] == "\n" else script[i + 1])
                    i += 2
                elif c == "$":
                    i, name, kind = _scan_dollar(script, i)
                    parts.append(f"q{kind}:{name}")
                    ok, value = env.get(name) if kind == "var" and name else (False, None)
                    known = known and ok
                    out.append(value or "")
                elif c == "`":
                    close = script.find("`", i + 1)
                    if close < 0:
                        raise ShellUnsupported("an unterminated `...`")
                    i, known = close + 1, False
                    parts.append("qsubst")
                else:
                    out.append(c)
                    i += 1
        elif c == "$":
            i, name, kind = _scan_dollar(script, i)
            parts.append(f"{kind}:{name}")
            if kind == "literal":
                out.append("$")
                continue
            ok, value = env.get(name) if kind == "var" and name else (False, None)
            # unquoted: field splitting and pathname expansion could make several words of it
            known = known and ok and value is not None and not re.search(r"[\s*?\[]", value)
            out.append(value or "")
        elif c == "`":
            close = script.find("`", i + 1)
            if close < 0:
                raise ShellUnsupported("an unterminated `...`")
            i, known = close + 1, False
            parts.append("subst")
        else:
            if c in "*?[":
                known = False  # pathname expansion
            out.append(c)
            i += 1
            parts.append("lit")
    raw = script[start:i]
    pass_on = raw in ('"$@"', "$@", "${@}", '"${@}"')
    return Word(start, i, raw, "".join(out) if known and not pass_on else None, pass_on), i


def parse(script: str, env: Env) -> list[Command]:
    """The script's simple commands in order (see the module docstring). Raises :class:`ShellUnsupported`."""
    commands: list[Command] = []
    cur = Command()
    i = 0
    expect_target = False
    while i < len(script):
        c = script[i]
        if c in " \t":
            i += 1
            continue
        if c == "\\" and script[i + 1:i + 2] == "\n":
            i += 2
            continue
        if c == "#":  # a comment: only at the start of a word
            nl = script.find("\n", i)
            i = len(script) if nl < 0 else nl
            continue
        if script.startswith("<<", i):
            raise ShellUnsupported("a here-document (<<)")
        m = _REDIRECT.match(script, i)
        if m:
            if expect_target:
                raise ShellUnsupported(f"a redirection without a target before {m.group(0)!r}")
            i = m.end()
            expect_target = True
            continue
        op = next((o for o in _OPERATORS if script.startswith(o, i)), None)
        if op is not None:
            if expect_target:
                raise ShellUnsupported(f"a redirection without a target before {op!r}")
            if op == ";;":
                raise ShellUnsupported("case ... ;;")
            if cur.words or cur.assignments:
                commands.append(cur)
            cur = Command()
            i += len(op)
            continue
        if c in "()":
            raise ShellUnsupported(f"a subshell or function (`{c}`)")
        word, i = _word(script, i, env)
        if expect_target:
            expect_target = False
            continue
        if not cur.words:
            a = _ASSIGN.match(word.raw)
            if a:
                value_word, _ = _word(word.raw, a.end(), env) if a.end() < len(word.raw) else (
                    Word(0, 0, "", ""), 0)
                cur.assignments.append((a.group(1), value_word.value))
                cur.end = word.end
                continue
            if word.value in KEYWORDS:
                raise ShellUnsupported(f"the shell keyword {word.value!r} (a compound command)")
        cur.words.append(word)
        cur.end = word.end
    if expect_target:
        raise ShellUnsupported("a redirection without a target")
    if cur.words or cur.assignments:
        commands.append(cur)
    return commands


def run_assignments(commands: list[Command], upto: int, env: Env) -> Env:
    """``env`` after the commands before index ``upto`` ran: pure assignments and ``export A=b`` set variables,
    ``unset`` removes them, and ``.``/``source``/``read``/``eval`` make every variable unknown."""
    out = Env(dict(env.known), env.closed)
    for cmd in commands[:upto]:
        if not cmd.words:
            out.known.update(dict(cmd.assignments))
            continue
        head = cmd.words[0].value
        if head in (".", "source", "read", "eval", "set", "shift", "getopts", "declare", "typeset", "local"):
            out = Env({}, False)
        elif head == "export" or head == "readonly":
            for w in cmd.words[1:]:
                a = _ASSIGN.match(w.value or "")
                if w.value is None:
                    out = Env({}, False)
                elif a:
                    out.known[a.group(1)] = w.value[a.end():]
        elif head == "unset":
            for w in cmd.words[1:]:
                if w.value is not None:
                    out.known[w.value] = ""
    return out


def env_of(container_env: object, env_from: object) -> Env:
    """The container's env as the shell starts with it: names with a literal ``value`` are known (unless it uses
    Kubernetes' ``$(NAME)``); ``valueFrom`` names are unknown; without ``envFrom`` every other name is unset
    (an image's own ``ENV`` lines aside: those names are unknown too, since kvplan cannot see them)."""
    known: dict[str, str | None] = {}
    for e in container_env if isinstance(container_env, list) else []:
        if not isinstance(e, Mapping) or not isinstance(e.get("name"), str):
            continue
        value = e.get("value")
        known[e["name"]] = value if isinstance(value, str) and "$(" not in value and "valueFrom" not in e else None
    del env_from  # an envFrom source or the image can define any other name: never "closed"
    return Env(known, False)
