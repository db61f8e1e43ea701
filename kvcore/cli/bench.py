"""`kvcore bench`: placeholder until its issue lands (replaced by the owning module)."""

from __future__ import annotations

import argparse
import sys


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("bench", help="(not built yet)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    print("kvcore bench: not built yet", file=sys.stderr)
    return 3
