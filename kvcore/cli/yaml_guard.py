"""Read a YAML file safely: bounded size, UTF-8 checked by line, and no structure that explodes when built.

:func:`safe_yaml_load` first walks the file's YAML *events* (a flat stream the parser produces without building
anything) and refuses, naming the line:

* nesting deeper than :data:`MAX_DEPTH` collections (a file 1,000 levels deep would otherwise recurse through
  the loader, the validators and ``repr``);
* a document that, with every alias expanded, holds more than :data:`MAX_NODES` nodes: the "billion laughs"
  file (ten aliases of ten aliases of ... ) is a few hundred bytes but expands to 1e9 nodes, which validation
  (and any error message quoting it) would walk in full;
* an alias inside the collection it names (a recursive structure);

and only then loads it with ``yaml.safe_load`` (no Python tags). Aliases themselves stay allowed: an instance
file may share a block with ``&defaults`` / ``*defaults``.

Errors are :class:`~kvcore.errors.InputError` with field ``<file name> line N``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kvcore.errors import InputError
from kvcore.regular_file import FileProblem, FileTooLarge, read_regular_file

MAX_BYTES = 32 * 1024**2
"""Largest YAML file read (32 MiB). An instance with 256 classes of 2,000 inline samples is about 5 MB; bigger
sample sets belong in trace files, which are streamed."""

MAX_DEPTH = 32
"""Deepest nesting of mappings and sequences. An instance file nests 5 deep (classes[i].samples.buckets.le[j])."""

MAX_NODES = 2_000_000
"""Most nodes (scalars and collections, aliases expanded) in one document: 4x the 256-class x 2,000-sample
instance written inline."""


MAX_INT_CHARS = 1000
"""Longest integer scalar (characters) in an instance file: 1,000 decimal digits, or hexadecimal, octal, binary or
sexagesimal (``1:30``) ones that stay under Python's 4,300-digit conversion limit. Every such number is refused
later anyway: the largest accepted is :data:`kvcore.bounds.MAX_WEIGHT`, 16 digits."""
_INTEGER = re.compile(r"[-+]?(?:0b[01_]+|0x[0-9a-fA-F_]+|[0-9][0-9_:]*)")
_INT_TAG = "tag:yaml.org,2002:int"


def _read_text(path: Path) -> str:
    if path.is_dir():
        raise InputError(path.name, "is a directory, not a file")
    if not path.exists():
        raise FileNotFoundError(2, "no such file", str(path))
    try:  # a regular file only (a FIFO or /dev/zero is refused at once), at most MAX_BYTES bytes
        _, data = read_regular_file(path, MAX_BYTES)
    except FileTooLarge as exc:
        raise InputError(path.name, f"is {exc.size / 1024**2:.1f} MiB; instance files are limited to "
                                    f"{MAX_BYTES // 1024**2} MiB (put large sample sets in trace files)") from None
    except FileProblem as exc:
        raise InputError(path.name, str(exc)) from None
    if b"\x00" in data:
        line = data.count(b"\n", 0, data.index(b"\x00")) + 1
        raise InputError(f"{path.name} line {line}", "contains a NUL byte: a binary file, not YAML text")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"{path.name} line {line}", f"is not UTF-8 text (byte 0x{data[exc.start]:02x})") from None


def _check_integer(event: Any, where: str) -> None:
    """Refuse an integer scalar written with more than :data:`MAX_INT_CHARS` characters before it is built (a
    decimal one past Python's 4,300-digit conversion limit raises ``ValueError`` inside the loader, and any huge
    integer fails again wherever it is printed)."""
    plain = not event.style and event.implicit[0]
    if len(event.value) <= MAX_INT_CHARS or not (plain or event.tag == _INT_TAG):
        return
    if _INTEGER.fullmatch(event.value):
        raise InputError(where, f"an integer written with {len(event.value):,} characters; at most "
                                f"{MAX_INT_CHARS:,} are read")


def check_shape(text: str, name: str) -> None:
    """Refuse ``text`` if its YAML nests deeper than :data:`MAX_DEPTH` or expands past :data:`MAX_NODES` nodes."""
    import yaml  # the CLI's dependency only

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    sizes: list[int] = []            # expanded node count of each open collection
    open_anchors: list[str | None] = []
    anchors: dict[str, int] = {}     # expanded size of every closed anchored node
    for event in yaml.parse(text, Loader=loader):
        where = f"{name} line {event.start_mark.line + 1}" if event.start_mark is not None else name
        add = 0
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            if len(sizes) >= MAX_DEPTH:
                raise InputError(where, f"nests deeper than {MAX_DEPTH} levels")
            sizes.append(1)
            open_anchors.append(event.anchor)
            continue
        if isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            add = sizes.pop()
            anchor = open_anchors.pop()
            if anchor is not None:
                anchors[anchor] = add
        elif isinstance(event, yaml.ScalarEvent):
            add = 1
            if event.anchor is not None:
                anchors[event.anchor] = 1
            _check_integer(event, where)
        elif isinstance(event, yaml.AliasEvent):
            if event.anchor in open_anchors:
                raise InputError(where, f"alias *{event.anchor} is inside the node it names (a recursive structure)")
            add = anchors.get(str(event.anchor), 1)
        if sizes:
            sizes[-1] += add
            if sizes[-1] > MAX_NODES:
                raise InputError(where, f"expands to more than {MAX_NODES:,} nodes (aliases of aliases?); "
                                        "refused before building it")


def safe_yaml_load(path: str | Path) -> Any:
    """The YAML document in ``path`` (see the module docstring for what is refused)."""
    import yaml  # the CLI's dependency only

    p = Path(path)
    text = _read_text(p)
    try:
        check_shape(text, p.name)
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        return yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader: no Python tags
    except InputError:
        raise
    except (ValueError, OverflowError) as exc:  # a constructor refusing a value the checks above let through
        raise InputError(p.name, f"a value cannot be read ({' '.join(str(exc).split())[:200]})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{p.name} line {mark.line + 1}" if mark is not None else p.name
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())[:200]
        raise InputError(where, f"not valid YAML ({problem})") from None
