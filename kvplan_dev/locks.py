"""Read the hash-pinned lock files in ``requirements/`` (written by ``make lock``, i.e. ``uv pip compile
--universal --generate-hashes``): one :class:`Pin` per requirement line, with its environment marker and hashes.

Used by the release (which installs ``requirements/operator.lock`` into the image) and by the tests that check the
locks against ``pyproject.toml`` and against what the venv really has installed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEV_LOCK = REPO / "requirements" / "dev.lock"
OPERATOR_LOCK = REPO / "requirements" / "operator.lock"

_LINE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)\s*(?:;\s*(?P<marker>[^\\]+?))?\s*$")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


@dataclass(frozen=True)
class Pin:
    """One locked requirement: ``name==version ; marker`` and the sha256 of every file it may install."""

    name: str
    version: str
    marker: str
    hashes: tuple[str, ...]

    @property
    def key(self) -> str:
        """The normalised project name (PEP 503)."""
        return re.sub(r"[-_.]+", "-", self.name).lower()


class LockError(ValueError):
    """A lock file line that is not ``name==version [; marker] \\`` followed by ``--hash`` lines."""


def read_lock(path: Path) -> list[Pin]:
    """Every pin in ``path``; raises :class:`LockError` naming the line for anything unpinned or unhashed."""
    pins: list[Pin] = []
    logical: list[tuple[int, str]] = []
    current = ""
    start = 0
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.split("#", 1)[0].rstrip() if not raw.lstrip().startswith("--hash") else raw.strip()
        if not line.strip():
            continue
        if not current:
            start = number
        current += " " + line.strip().rstrip("\\").strip()
        if not raw.rstrip().endswith("\\"):
            logical.append((start, current.strip()))
            current = ""
    if current:
        logical.append((start, current.strip()))
    for number, text in logical:
        head = text.split(" --hash", 1)[0].strip()
        match = _LINE.match(head)
        if match is None:
            raise LockError(f"{path.name}:{number}: not an exact pin `name==version`: {head!r}")
        hashes = tuple(_HASH.findall(text))
        if not hashes:
            raise LockError(f"{path.name}:{number}: {match['name']} has no --hash")
        pins.append(Pin(match["name"], match["version"], (match["marker"] or "").strip(), hashes))
    return pins
