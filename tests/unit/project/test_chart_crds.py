"""The chart's CRDs are byte-identical copies of the repository's ``crds/`` (the one source, STYLE item 10), kept in
``files/crds/`` for ``templates/crds.yaml`` (so ``helm upgrade`` updates them); the chart has no ``crds/`` folder,
which Helm would install from as well and never upgrade.

The KVPlan API: v1alpha1 and v1beta1 are both served with one schema (conversion strategy None needs identical
schemas), v1beta1 is the one storage version.

Also covers ``scripts/sync_crds.py`` itself on temporary folders: it reports missing, stale and differing files,
and a sync makes the copy identical.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]


def _sync_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sync_crds", REPO / "scripts" / "sync_crds.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kvplan_crd_exists_in_both_places() -> None:
    name = "kvplans.kvplan.io.yaml"
    chart = REPO / "charts" / "kvplan-operator"
    assert (REPO / "crds" / name).is_file(), "the operator's CRD is missing from crds/"
    assert (chart / "files" / "crds" / name).is_file(), "run `make sync-crds`"
    assert (chart / "templates" / "crds.yaml").is_file()
    assert not (chart / "crds" / name).exists(), "a chart's crds/ folder is installed once and never upgraded"
    assert (chart / "crds" / "kopf-peering.yaml").is_file(), "the chart's own peering objects need it at install"


def test_every_crd_is_placed_once() -> None:
    places = _sync_module().PLACES
    names = [n for group in places.values() for n in group]
    assert sorted(names) == sorted(p.name for p in (REPO / "crds").glob("*.yaml"))
    assert len(names) == len(set(names))


def _kvplan_versions() -> list[dict]:
    import yaml

    crd = yaml.safe_load((REPO / "crds" / "kvplans.kvplan.io.yaml").read_text())
    return list(crd["spec"]["versions"])


def test_both_versions_served_v1beta1_stored() -> None:
    versions = {v["name"]: v for v in _kvplan_versions()}
    assert set(versions) == {"v1alpha1", "v1beta1"}
    assert all(v["served"] for v in versions.values())
    assert [name for name, v in versions.items() if v["storage"]] == ["v1beta1"]


def test_the_operator_uses_the_storage_version_and_the_other_is_deprecated() -> None:
    from kvplan_operator.kube import GROUP, VERSION

    versions = {v["name"]: v for v in _kvplan_versions()}
    assert versions[VERSION]["storage"] and not versions[VERSION].get("deprecated", False)
    old = [v for name, v in versions.items() if name != VERSION]
    assert old and all(v["deprecated"] and VERSION in v["deprecationWarning"] for v in old)
    assert GROUP == "kvplan.io"


@pytest.mark.parametrize("part", ["schema", "subresources", "additionalPrinterColumns"])
def test_versions_share_one_schema(part: str) -> None:
    alpha, beta = sorted(_kvplan_versions(), key=lambda v: v["name"])
    assert alpha[part] == beta[part], f"v1alpha1 and v1beta1 {part} differ: conversion None needs them identical"


def test_chart_crds_are_byte_identical_to_crds_folder() -> None:
    problems = _sync_module().drift_all()
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
