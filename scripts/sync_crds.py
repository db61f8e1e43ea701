"""Copy the CRDs from the repository's ``crds/`` into the Helm chart's ``crds/``, byte for byte.

``crds/`` is the one source of the CRDs (STYLE item 10); the chart carries a copy because Helm installs CRDs only
from a chart's own ``crds/`` folder. Run ``make sync-crds`` (or this script) after changing a CRD;
``--check`` changes nothing and exits 1 when the copy has drifted (tests/unit/test_chart_crds.py runs it).

Usage: python scripts/sync_crds.py [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "crds"
TARGET = REPO / "charts" / "kvplan-operator" / "crds"
PATTERNS = ("*.yaml", "*.yml")


def _files(folder: Path) -> dict[str, bytes]:
    if not folder.is_dir():
        return {}
    return {p.name: p.read_bytes() for pattern in PATTERNS for p in sorted(folder.glob(pattern)) if p.is_file()}


def drift(source: Path = SOURCE, target: Path = TARGET) -> list[str]:
    """Every difference between ``source`` and ``target`` as one readable line; empty when they are identical."""
    want, have = _files(source), _files(target)
    problems = [f"missing in chart: {name}" for name in sorted(want.keys() - have.keys())]
    problems += [f"not in {source.name}/ (stale copy): {name}" for name in sorted(have.keys() - want.keys())]
    problems += [f"differs: {name}" for name in sorted(want.keys() & have.keys()) if want[name] != have[name]]
    return problems


def sync(source: Path = SOURCE, target: Path = TARGET) -> list[str]:
    """Make ``target`` an exact copy of ``source``'s CRD files; returns what it changed."""
    changes = drift(source, target)
    target.mkdir(parents=True, exist_ok=True)
    want = _files(source)
    for name in _files(target).keys() - want.keys():
        (target / name).unlink()
    for name, data in want.items():
        dest = target / name
        if not dest.exists() or dest.read_bytes() != data:
            dest.write_bytes(data)
    return changes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report drift and exit 1 instead of copying")
    args = parser.parse_args(argv)
    if not _files(SOURCE):
        print(f"sync_crds: error: no CRD files in {SOURCE}", file=sys.stderr)
        return 2
    if args.check:
        problems = drift()
        for line in problems:
            print(f"sync_crds: {line}", file=sys.stderr)
        if problems:
            print("sync_crds: run `make sync-crds` to update the chart", file=sys.stderr)
        return 1 if problems else 0
    for line in sync():
        print(f"sync_crds: {line} -> copied")
    return 0


if __name__ == "__main__":
    sys.exit(main())
