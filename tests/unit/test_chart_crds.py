"""The chart's CRDs are byte-identical copies of the repository's ``crds/`` (the one source, STYLE item 10).

Also covers ``scripts/sync_crds.py`` itself on temporary folders: it reports missing, stale and differing files,
and a sync makes the copy identical.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _sync_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sync_crds", REPO / "scripts" / "sync_crds.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kvplan_crd_exists_in_both_places() -> None:
    name = "kvplans.kvplan.io.yaml"
    assert (REPO / "crds" / name).is_file(), "the operator's CRD is missing from crds/"
    assert (REPO / "charts" / "kvplan-operator" / "crds" / name).is_file(), "run `make sync-crds`"


def test_chart_crds_are_byte_identical_to_crds_folder() -> None:
    problems = _sync_module().drift()
    assert problems == [], "chart CRDs drifted from crds/ (run `make sync-crds`):\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("source", "target", "expected"),
    [
        pytest.param({"a.yaml": b"x"}, {"a.yaml": b"x"}, [], id="identical"),
        pytest.param({"a.yaml": b"x"}, {}, ["missing in chart: a.yaml"], id="missing"),
        pytest.param({"a.yaml": b"x"}, {"a.yaml": b"x", "b.yaml": b"y"}, ["not in src/ (stale copy): b.yaml"],
                     id="stale"),
        pytest.param({"a.yaml": b"x\n"}, {"a.yaml": b"x"}, ["differs: a.yaml"], id="one-byte-differs"),
    ],
)
def test_drift_and_sync(tmp_path: Path, source: dict[str, bytes], target: dict[str, bytes],
                        expected: list[str]) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    for name, data in source.items():
        (src / name).write_bytes(data)
    for name, data in target.items():
        (dst / name).write_bytes(data)
    sync = _sync_module()
    assert sync.drift(src, dst) == expected
    assert sync.sync(src, dst) == expected
    assert sync.drift(src, dst) == []
    assert {p.name: p.read_bytes() for p in dst.iterdir()} == source
