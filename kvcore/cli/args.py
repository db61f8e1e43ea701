"""Argument parsing that reports like the rest of the CLI: one line ``PROG: error: FIELD: MESSAGE``, exit status 2.

:class:`OneLineParser` replaces argparse's usage-plus-message output (two lines, no field first) with the CLI's one
line, naming the flag first: ``kvcore reserve: error: --cp: invalid float value: 'abc'``. Its sub-parsers inherit
it (argparse creates them with the parent's class). :func:`remember_parsers` records each sub-command's parser in
its namespace, and :func:`unknown_arguments` reports leftovers from ``parse_known_args`` on the sub-command they were
typed for. The ``*_arg`` factories are argparse ``type=``
functions for bounded numbers; their messages name the bound.

Also used by ``kvplan-dev`` (dev tooling), so both CLIs answer bad input the same way.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

_ARGUMENT = re.compile(r"^argument ([^:]+): (.*)$", re.S)
_REQUIRED = "the following arguments are required: "
_UNRECOGNIZED = "unrecognized arguments: "


def one_line(message: str) -> str:
    """argparse's ``message`` as ``FIELD: MESSAGE`` (the flag or argument first)."""
    found = _ARGUMENT.match(message)
    if found:
        names = found.group(1).split("/")
        return f"{names[-1]}: {found.group(2)}"
    if message.startswith(_REQUIRED):
        missing = message[len(_REQUIRED):].split(", ")
        also = f" (also missing: {', '.join(missing[1:])})" if len(missing) > 1 else ""
        return f"{missing[0]}: required{also}"
    if message.startswith(_UNRECOGNIZED):
        extra = message[len(_UNRECOGNIZED):]
        return f"{extra.split()[0] if extra.split() else extra}: unrecognized argument(s): {extra}"
    return f"arguments: {message}"


class OneLineParser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` whose errors are one line naming the field, exit status 2."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(one_line(message).split())  # one line, whatever argparse put in it
        self.exit(2, f"{self.prog}: error: {text}\n")


def remember_parsers(parser: argparse.ArgumentParser) -> None:
    """Give every (sub-)command's namespace its own parser as ``_parser``, so errors carry the sub-command's name
    (``kvcore bench scale: error: ...``)."""
    parser.set_defaults(_parser=parser)
    for action in parser._actions:  # argparse keeps sub-parsers only here
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                remember_parsers(child)


def unknown_arguments(parser: argparse.ArgumentParser, extra: Sequence[str]) -> NoReturn:
    """Report ``extra`` (from ``parse_known_args``) as unrecognized, on ``parser`` (the sub-command's)."""
    parser.error(_UNRECOGNIZED + " ".join(extra))


def float_arg(*, low: float, high: float, low_open: bool = False, unit: str = "") -> Callable[[str], float]:
    """An argparse ``type`` for a finite float in ``[low, high]`` (``(low, high]`` with ``low_open``)."""
    opener = ">" if low_open else ">="
    what = f"a finite number {opener} {low:g}{unit} and <= {high:g}{unit}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number (expected {what})") from None
        inside = (value > low if low_open else value >= low) and value <= high
        if not (math.isfinite(value) and inside):
            shown = text.strip()
            shown = shown if len(shown) <= 40 else f"{shown[:40]}... ({len(shown):,} characters)"
            raise argparse.ArgumentTypeError(f"must be {what}, got {shown}")
        return value

    parse.__name__ = "number"
    return parse


def int_arg(*, low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type`` for an integer in ``[low, high]`` (decimal digits only, at most 20 of them)."""

    def parse(text: str) -> int:
        digits = text.strip()
        if not re.fullmatch(r"[+-]?\d{1,20}", digits):
            raise argparse.ArgumentTypeError(f"must be an integer from {low} to {high}, got {text[:40]!r}")
        value = int(digits)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be an integer from {low} to {high}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


def report(prog: str, text: str) -> int:
    """Print the one error line for ``prog`` on stderr; return exit status 2."""
    print(f"{prog}: error: {' '.join(text.split())}", file=sys.stderr)
    return 2
