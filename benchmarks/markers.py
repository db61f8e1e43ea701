"""The blocks of ``docs/results.md`` that a benchmark owns: each sits between an HTML comment ``<!-- BEGIN -->`` and
``<!-- END -->``, so one benchmark rewrites its own section and leaves every other section as it was."""
from __future__ import annotations

from pathlib import Path


def marks(name: str, key: str = "") -> tuple[str, str]:
    """The begin and end markers of section ``name`` (``key`` tells apart blocks of one section, e.g. ``kv=25000``)."""
    tail = f" {key}" if key else ""
    return f"<!-- {name}:begin{tail} -->", f"<!-- {name}:end{tail} -->"


def find(text: str, begin: str, end: str) -> str | None:
    """The block of ``text`` from ``begin`` to ``end``, both markers included, or None when either is missing."""
    if begin not in text or end not in text:
        return None
    return text[text.index(begin): text.index(end) + len(end)]


def put(path: Path, block: str, begin: str, end: str, before: str | None = None) -> None:
    """Write ``block`` (markers included) into ``path`` in place of the old block from ``begin`` to ``end``. With no
    old block it goes in front of the marker ``before`` when the file has it, else at the end of the file."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    held = find(old, begin, end)
    if held is not None:
        i = old.index(begin)
        new = old[:i] + block + old[i + len(held):]
    elif before is not None and before in old:
        i = old.index(before)
        new = old[:i] + block + "\n\n" + old[i:]
    else:
        new = old.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(new, encoding="utf-8")
