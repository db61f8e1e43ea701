"""The ``kvcore`` command line: offline planning on trace files, no cluster needed.

Each subcommand lives in its own module (``reserve``, ``plan``, ``evaluate``, ``bench``) exposing
``register(subparsers) -> None``; the parser it adds sets ``func(args) -> int``. This module only dispatches and
turns :class:`kvcore.errors.InputError` into a one-line message and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from kvcore.errors import InputError

SUBCOMMANDS: tuple[str, ...] = ("reserve", "plan", "evaluate", "bench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kvcore", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"kvcore.cli.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except InputError as exc:
        print(f"kvcore {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"kvcore {args.command}: error: {exc.filename}: no such file", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
