"""The ``kvcore`` command line: offline planning on trace files, no cluster needed.

Each subcommand lives in its own module (``reserve``, ``plan``, ``evaluate``, ``bench``) exposing
``register(subparsers) -> None``; the parser it adds sets ``func(args) -> int``. This module only dispatches and
turns bad input into one line ``kvcore <command>: error: <field>: <message>`` and exit status 2, never a traceback:
usage errors (:mod:`kvcore.cli.args`), :class:`kvcore.errors.InputError` and a missing file.

Two more exits, never a traceback either: output to a pipe whose reader has gone (``kvcore plan ... | head``)
ends the command quietly with status 141, as a program killed by ``SIGPIPE`` would; and any other exception (a bug
in kvcore, not bad input) is one line ``kvcore <command>: error: internal: <type>: <message>`` with status 70
(``EX_SOFTWARE``), the traceback only with ``KVPLAN_TRACEBACK=1``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from kvcore.cli.args import OneLineParser, remember_parsers, report, unknown_arguments
from kvcore.cli.exits import closed_output, internal_error
from kvcore.errors import InputError

SUBCOMMANDS: tuple[str, ...] = ("reserve", "plan", "evaluate", "bench", "profile")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="kvcore", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"kvcore.cli.{name}")
        module.register(sub)
    remember_parsers(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    own: argparse.ArgumentParser = args._parser
    if extra:
        unknown_arguments(own, extra)
    try:
        status = int(args.func(args))
        sys.stdout.flush()  # here, so that a closed pipe is met inside the handlers below, not at exit
        return status
    except InputError as exc:
        return report(own.prog, str(exc))
    except FileNotFoundError as exc:
        return report(own.prog, f"{exc.filename}: no such file")
    except BrokenPipeError:
        return closed_output()
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - a bug, not bad input: one line, never a traceback
        return internal_error(own.prog, exc)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
