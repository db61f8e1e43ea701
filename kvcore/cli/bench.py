"""``kvcore bench``: benchmark subcommands, one module each.

    kvcore bench scale --size CxZxN [--seed S] [--exact] [--json]
    kvcore bench fleet --classes C --groups K --configs Z --samples N [--seed S] [--warm] [--json]

Subcommands are registered from :data:`BENCH_SUBCOMMANDS` (name -> module exposing ``register(subparsers)``), so
another benchmark (e.g. ``bench sim``) plugs in by adding one entry and one module.
"""

from __future__ import annotations

import argparse
import importlib

BENCH_SUBCOMMANDS: dict[str, str] = {
    "scale": "kvcore.cli.bench_scale",
    "fleet": "kvcore.cli.bench_fleet",
}
"""Registry: ``kvcore bench NAME`` -> the module that registers it."""


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("bench", help="benchmarks (scale: Table III scalability; fleet: many classes x many groups)",
                       description=__doc__.split("\n\n")[0] if __doc__ else None)
    inner = p.add_subparsers(dest="bench_command", required=True, metavar="{" + ",".join(BENCH_SUBCOMMANDS) + "}")
    for module in BENCH_SUBCOMMANDS.values():
        importlib.import_module(module).register(inner)
