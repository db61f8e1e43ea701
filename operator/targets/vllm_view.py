"""The argv vLLM receives from a container, word by word, and where each word lives in ``command``/``args`` (issue
26, item 5). Pure.

:func:`view` follows what Kubernetes and the shell do to ``command + args``: the kubelet expands ``$(NAME)`` from
the container's env; a ``sh -c`` script is read as the shell reads it (:mod:`.shell_words`), its one vLLM command
found (:func:`.vllm_argv.vllm_start`: ``vllm serve``, ``python -m vllm.entrypoints.openai.api_server``, after
``exec``/``env``/``nohup``; not ``echo vllm serve``, not a ``# comment``), and ``"$@"`` in *that* command replaced by
the positional arguments after ``$0``. Each argv word keeps its value (None: known only at run time), its text as
written and its slot, so :func:`edit` can change exactly the words vLLM reads.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .shell_words import Command, ShellUnsupported, env_of, parse, run_assignments
from .vllm_argv import vllm_start

SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh", "busybox"})
#: A slot: ("command", i) / ("args", i) of the container, ("pos", i) of a ``sh -c`` script's positional words
#: ($0 is 0), or ("script", start, end) of a span of the script.
Slot = tuple[Any, ...]
_K8S_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


@dataclass(frozen=True)
class Layout:
    """Where a container's vLLM argv is: ``kind`` and, for a ``sh -c`` script, its place (``("command", i)`` or
    ``("args", 0)``)."""

    kind: Literal["argv", "shell", "shell-file"]
    script: tuple[Literal["command", "args"], int] | None = None


def layout_of(command: Sequence[str], args: Sequence[str]) -> Layout:
    """Classify a container's ``command``/``args``: a shell running ``-c`` (script in ``command`` or in
    ``args[0]``), a shell running a script file, or an argv."""
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


def script_of(command: Sequence[str], args: Sequence[str], where: tuple[str, int]) -> tuple[str, list[str]]:
    """(script, positional words after it: $0, $1, ...) of a ``sh -c`` layout."""
    if where[0] == "command":
        return command[where[1]], list(command[where[1] + 1:]) + list(args)
    return args[0], list(args[1:])


def join_script(command: Sequence[str], args: Sequence[str], where: tuple[str, int], script: str,
                positional: Sequence[str]) -> tuple[list[str], list[str]]:
    """(command, args) with the ``sh -c`` script and its positional words replaced."""
    if where[0] == "command":
        i = where[1]
        n_after = len(command) - i - 1
        return list(command[:i]) + [script] + list(positional[:n_after]), list(positional[n_after:])
    return list(command), [script] + list(positional)


def kubelet_expand(word: str, env: Sequence[Any], env_from: bool) -> str | None:
    """``word`` after the kubelet's ``$(NAME)`` expansion (``$$`` -> ``$``); None when a name it would expand has
    a value kvplan cannot know (``valueFrom``, ``envFrom``, or a value that itself refers to others)."""
    values: dict[str, str | None] = {}
    for e in env:
        if isinstance(e, Mapping) and isinstance(e.get("name"), str):
            v = e.get("value")
            values[e["name"]] = v if isinstance(v, str) and "$(" not in v and "valueFrom" not in e else None
    out, i = [], 0
    while i < len(word):
        if word.startswith("$$", i):
            out.append("$")
            i += 2
            continue
        m = _K8S_REF.match(word, i)
        if m:
            name = m.group(1)
            if name in values:
                if values[name] is None:
                    return None
                out.append(values[name] or "")
            elif env_from:
                return None
            else:
                out.append(m.group(0))
            i = m.end()
            continue
        out.append(word[i])
        i += 1
    return "".join(out)


@dataclass
class View:
    """vLLM's argv as the container gives it: ``argv`` (values; None: known at run time only), ``raws`` (as
    written), ``slots`` (where each lives); ``end``: where an absent flag goes (a slot to insert after or
    ``("script-end", i)``). ``problem``: why no such argv can be told (the container is refused with it);
    ``opaque``: the argv goes to something kvplan cannot see into (a shell script file, another program)."""

    layout: Layout
    argv: list[str | None] = field(default_factory=list)
    raws: list[str] = field(default_factory=list)
    slots: list[Slot] = field(default_factory=list)
    end: Slot | None = None
    problem: str | None = None
    opaque: bool = False


def _argv_view(container: Mapping[str, Any], layout: Layout) -> View:
    command, args = list(container.get("command") or []), list(container.get("args") or [])
    env, env_from = container.get("env") or [], bool(container.get("envFrom"))
    slots: list[Slot] = [("command", i) for i in range(len(command))] + [("args", i) for i in range(len(args))]
    raws = command + args
    values = [kubelet_expand(w, env, env_from) for w in raws]
    if not command:  # the image's entrypoint (vllm/vllm-openai: `vllm serve`) gets every arg
        start = 0
    else:
        starts = vllm_start(values)
        if layout.kind == "shell-file" or not starts:
            return View(layout, values, raws, slots, slots[-1] if slots else None, opaque=True)
        start = starts[0]
    end = slots[-1] if len(slots) > start else (("command", len(command) - 1) if command else None)
    return View(layout, values[start:], raws[start:], slots[start:], end)


def _vllm_command(commands: list[Command]) -> tuple[int | None, str | None]:
    """Index of the one command that runs vLLM, or why there is not exactly one."""
    found: list[int] = []
    for k, cmd in enumerate(commands):
        values = [w.value for w in cmd.words]
        if vllm_start(values):
            found.append(k)
            continue
        head = next((w for w in cmd.words if w.value not in ("exec", "env", "nohup", "command")), None)
        if head is not None and head.value is None and ("vllm" in head.raw or any(
                w.value == "serve" for w in cmd.words[1:2])):
            return None, f"the command `{head.raw}` is known only at run time and may run vLLM"
    if len(found) != 1:
        return None, (f"the script has {len(found)} `vllm serve` invocations (need exactly one; `echo vllm serve`, "
                      "a comment or a nested `sh -c` string is not one)")
    return found[0], None


def _shell_view(container: Mapping[str, Any], layout: Layout) -> View:
    command, args = list(container.get("command") or []), list(container.get("args") or [])
    assert layout.script is not None
    script, positional = script_of(command, args, layout.script)
    env, env_from = container.get("env") or [], bool(container.get("envFrom"))
    names = {e.get("name") for e in env if isinstance(e, Mapping)}
    for m in _K8S_REF.finditer(script):
        if m.group(1) in names or env_from:
            return View(layout, problem=f"the kubelet expands `{m.group(0)}` in the script before the shell runs it "
                                        "(kvplan does not follow that); write the value or use the shell's $NAME")
    try:
        start_env = env_of(env, container.get("envFrom"))
        commands = parse(script, start_env)
        k, why = _vllm_command(commands)
        if k is None:
            return View(layout, problem=why)
        cmd = parse(script, run_assignments(commands, k, start_env))[k]
    except ShellUnsupported as exc:
        return View(layout, problem=f"the container's shell script uses {exc}, which kvplan does not parse; move "
                                    "vLLM's flags to args or simplify the script")
    values = [w.value for w in cmd.words]
    start = vllm_start(values)[0]
    view = View(layout)
    passes = [w for w in cmd.words[start:] if w.pass_on]
    if len(passes) > 1:
        return View(layout, problem="the vLLM command passes \"$@\" on more than once")
    for w in cmd.words[start:]:
        if w.pass_on:
            for j in range(1, len(positional)):
                view.argv.append(kubelet_expand(positional[j], env, env_from))
                view.raws.append(positional[j])
                view.slots.append(("pos", j))
            continue
        view.argv.append(w.value)
        view.raws.append(w.raw)
        view.slots.append(("script", w.start, w.end))
    last = cmd.words[-1]
    view.end = ("pos", len(positional) - 1) if last.pass_on and positional else ("script-end", last.end)
    return view


def view(container: Mapping[str, Any]) -> View:
    """The container's vLLM argv (see the module docstring)."""
    command, args = list(container.get("command") or []), list(container.get("args") or [])
    layout = layout_of(command, args)
    return _shell_view(container, layout) if layout.kind == "shell" else _argv_view(container, layout)


@dataclass(frozen=True)
class Edit:
    """Replace the word at ``slot`` by ``text`` (None: delete it), or insert ``text`` after it (``after``)."""

    slot: Slot
    text: str | None
    after: bool = False


def edit(container: Mapping[str, Any], layout: Layout, edits: Sequence[Edit]) -> tuple[list[str], list[str]]:
    """(command, args) with ``edits`` applied; a script is edited in place, every other character kept."""
    command, args = list(container.get("command") or []), list(container.get("args") or [])
    script, positional = (script_of(command, args, layout.script) if layout.kind == "shell" and layout.script
                          else ("", []))
    lists = {"command": command, "args": args, "pos": positional}
    spans: list[tuple[int, int, str]] = []
    for e in edits:
        kind = e.slot[0]
        if kind in ("script", "script-end"):
            s, t = (e.slot[1], e.slot[2]) if kind == "script" else (e.slot[1], e.slot[1])
            if e.after or kind == "script-end":
                spans.append((t, t, " " + (e.text or "")))
            elif e.text is None:
                ws = s
                while ws > 0 and script[ws - 1] in " \t":
                    ws -= 1
                spans.append((ws, t, ""))
            else:
                spans.append((s, t, e.text))
    for s, t, text in sorted(spans, key=lambda x: (x[0], x[1]), reverse=True):
        script = script[:s] + text + script[t:]
    marked: dict[str, list[Any]] = {k: list(v) for k, v in lists.items()}
    for e in edits:
        kind = e.slot[0]
        if kind not in lists:
            continue
        i = e.slot[1]
        if e.after:
            cur = marked[kind][i]
            marked[kind][i] = (cur if isinstance(cur, list) else [cur]) + [e.text]
        elif e.text is None:
            marked[kind][i] = []
        else:
            cur = marked[kind][i]
            marked[kind][i] = [e.text] + (cur[1:] if isinstance(cur, list) else [])
    flat = {k: [x for item in v for x in (item if isinstance(item, list) else [item])] for k, v in marked.items()}
    command, args, positional = flat["command"], flat["args"], flat["pos"]
    if layout.kind == "shell" and layout.script:
        return join_script(command, args, layout.script, script, positional)
    return command, args
