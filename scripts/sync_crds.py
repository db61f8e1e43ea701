"""Copy the CRDs from the repository's ``crds/`` into the Helm chart, byte for byte.

``crds/`` is the one source of the CRDs (STYLE item 10). The chart carries copies because a chart can only read its
own files, in two places:

- ``files/crds/``: the KVPlan CRD. ``templates/crds.yaml`` renders it (with the ``crds.install`` / ``crds.keep``
  values and the stored-version guard), so ``helm upgrade`` updates it, which Helm never does for ``crds/``.
- ``crds/``: kopf's peering CRDs (kopf's fixed ``kopf.dev/v1`` definitions). The chart itself creates peering
  objects, and Helm can only build objects of a kind whose CRD exists before the release's templates are built,
  which only a chart's ``crds/`` folder guarantees on a first install.

Run ``make sync-crds`` (or this script) after changing a CRD; ``--check`` changes nothing and exits 1 when the copy
has drifted (tests/unit/project/test_chart_crds.py runs it).

Usage: python scripts/sync_crds.py [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "crds"
CHART = REPO / "charts" / "kvplan-operator"
TEMPLATED = CHART / "files" / "crds"
INSTALL_ONLY = CHART / "crds"
PLACES = {TEMPLATED: ("kvplans.kvplan.io.yaml",), INSTALL_ONLY: ("kopf-peering.yaml",)}
"""Chart folder -> the files of ``crds/`` it carries. Every file of ``crds/`` must be in exactly one."""
PATTERNS = ("*.yaml", "*.yml")


def _files(folder: Path, names: tuple[str, ...] | None = None) -> dict[str, bytes]:
    if not folder.is_dir():
        return {}
    found = {p.name: p.read_bytes() for pattern in PATTERNS for p in sorted(folder.glob(pattern)) if p.is_file()}
    return found if names is None else {n: found[n] for n in names if n in found}


def drift_all(source: Path = SOURCE, places: dict[Path, tuple[str, ...]] | None = None) -> list[str]:
    """:func:`drift` for every chart folder, each restricted to its own files; plus files placed nowhere."""
    places = PLACES if places is None else places
    problems: list[str] = []
    placed = [name for names in places.values() for name in names]
    problems += [f"not placed in the chart (scripts/sync_crds.py PLACES): {n}" for n in sorted(_files(source))
                 if n not in placed]
    for target, names in places.items():
        problems += [f"{target.relative_to(REPO) if target.is_relative_to(REPO) else target}: {line}"
                     for line in drift(source, target, names)]
    return problems


def drift(source: Path, target: Path, names: tuple[str, ...] | None = None) -> list[str]:
    """Every difference between ``source`` and ``target`` (only ``names`` of ``source`` when given) as one readable
    line; empty when they are identical."""
    want, have = _files(source, names), _files(target)
    problems = [f"missing in chart: {name}" for name in sorted(want.keys() - have.keys())]
    problems += [f"not in {source.name}/ (stale copy): {name}" for name in sorted(have.keys() - want.keys())]
    problems += [f"differs: {name}" for name in sorted(want.keys() & have.keys()) if want[name] != have[name]]
    return problems


def sync(source: Path, target: Path, names: tuple[str, ...] | None = None) -> list[str]:
    """Make ``target`` an exact copy of ``source``'s CRD files (``names`` only when given); returns what changed."""
    changes = drift(source, target, names)
    target.mkdir(parents=True, exist_ok=True)
    want = _files(source, names)
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
        problems = drift_all()
        for line in problems:
            print(f"sync_crds: {line}", file=sys.stderr)
        if problems:
            print("sync_crds: run `make sync-crds` to update the chart", file=sys.stderr)
        return 1 if problems else 0
    unplaced = [line for line in drift_all() if line.startswith("not placed")]
    for line in unplaced:
        print(f"sync_crds: error: {line}", file=sys.stderr)
    if unplaced:
        return 2
    for target, names in PLACES.items():
        for line in sync(SOURCE, target, names):
            print(f"sync_crds: {target.relative_to(REPO)}: {line} -> copied")
    return 0


if __name__ == "__main__":
    sys.exit(main())
