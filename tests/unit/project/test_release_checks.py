"""The release's own checks, on hand-made inputs (the e2e tier runs the real release): the digest comparison that
fails ``make release`` when the registry serves something else; the image-config check (user 10001, exec-form
entrypoint, no Cmd or Shell, OCI labels with version/source/revision/licenses, env, platform), each broken promise
reported; the shell finder on a filesystem tar; and layer tarballs that are byte-identical for the same tree whatever
the files' mtimes and owners on disk."""

from __future__ import annotations

import copy
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

import kvcore
from kvplan_dev import image
from kvplan_dev.release import ReleaseError, check_config, shells_in, verify_digest

REV = "0123456789abcdef0123456789abcdef01234567"
DIGEST = "sha256:" + "1" * 64


def _good() -> dict[str, Any]:
    return {"os": "linux", "architecture": "amd64", "config": {
        "User": "10001:10001", "Entrypoint": ["/usr/bin/python3.11", "-m", "kvplan_operator.main"],
        "Env": [f"{k}={v}" for k, v in image.ENV.items()], "Labels": image.oci_labels(REV)}}


def test_digest_match_passes() -> None:
    verify_digest(DIGEST, DIGEST, "reg/x:1")


def test_digest_mismatch_fails_naming_both() -> None:
    other = "sha256:" + "2" * 64
    with pytest.raises(ReleaseError, match=f"built {DIGEST} but the registry serves {other} for reg/x:1"):
        verify_digest(DIGEST, other, "reg/x:1")


def test_not_a_digest_fails() -> None:
    with pytest.raises(ReleaseError, match="not a sha256 digest"):
        verify_digest("latest", "latest", "reg/x:1")


def test_clean_config_has_no_problems() -> None:
    assert check_config(_good(), REV) == []
    labels = _good()["config"]["Labels"]
    assert labels["org.opencontainers.image.version"] == kvcore.__version__
    assert {"org.opencontainers.image.source", "org.opencontainers.image.licenses"} <= set(labels)


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        pytest.param("User", "0", "User is '0'", id="root"),
        pytest.param("Entrypoint", ["/bin/sh", "-c", "kvplan-operator"], "Entrypoint is", id="shell-entrypoint"),
        pytest.param("Cmd", ["--verbose"], "Cmd is", id="cmd"),
        pytest.param("Shell", ["/bin/sh", "-c"], "Shell is set", id="shell"),
        pytest.param("Labels", {}, "label org.opencontainers.image.version is None", id="no-labels"),
        pytest.param("Env", [], "env PYTHONPATH is None", id="no-env"),
    ],
)
def test_each_broken_promise_is_reported(path: str, value: Any, expected: str) -> None:
    config = copy.deepcopy(_good())
    config["config"][path] = value
    problems = check_config(config, REV)
    assert any(p.startswith(expected) for p in problems), problems


def test_wrong_revision_label_is_reported() -> None:
    assert any("revision" in p for p in check_config(_good(), "f" * 40))


def test_wrong_platform_is_reported() -> None:
    config = _good()
    config["architecture"] = "arm64"
    assert check_config(config, REV) == ["platform is linux/arm64, not linux/amd64"]


def test_shells_in(tmp_path: Path) -> None:
    path = tmp_path / "fs.tar"
    with tarfile.open(path, "w") as tar:
        for name in ("usr/bin/python3.11", "bin/sh", "etc/passwd"):
            info = tarfile.TarInfo(name)
            tar.addfile(info)
    assert shells_in(path) == ["bin/sh"]


def test_layers_are_reproducible(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "opt" / "lib").mkdir(parents=True)
    (tree / "opt" / "lib" / "a.py").write_text("x = 1\n")
    (tree / "opt" / "run").symlink_to("lib/a.py")
    first = image.write_layer(tree, tmp_path / "one.tar.gz", 1_700_000_000).read_bytes()
    os.utime(tree / "opt" / "lib" / "a.py", (1, 1))
    second = image.write_layer(tree, tmp_path / "two.tar.gz", 1_700_000_000).read_bytes()
    assert first == second
    with tarfile.open(tmp_path / "one.tar.gz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["opt", "opt/lib", "opt/lib/a.py", "opt/run"]
    assert {(m.uid, m.gid, m.mtime) for m in members} == {(0, 0, 1_700_000_000)}
    third = image.write_layer(tree, tmp_path / "three.tar.gz", 1_700_000_001).read_bytes()
    assert third != first, "the epoch is part of the bytes"


@pytest.mark.slow
def test_app_layer_does_not_depend_on_the_build_folder(tmp_path: Path) -> None:
    """The kvplan layer built twice, from wheels in different folders, is byte-identical (pip records the wheel's
    path in direct_url.json, which the build removes)."""
    from kvplan_dev.release import REPO

    layers = []
    for name in ("one", "two"):
        out = tmp_path / name
        out.mkdir()
        wheel = image.build_wheel(REPO, out)
        work = out / "work"
        work.mkdir()
        layers.append(image.app_layer(wheel, work, out / "app.tar.gz", 1_700_000_000, lambda line: None).read_bytes())
    assert layers[0] == layers[1]
    with tarfile.open(tmp_path / "one" / "app.tar.gz") as tar:
        names = tar.getnames()
    assert "opt/kvplan/lib/kvplan_operator/main.py" in names
    assert not any(n.endswith("direct_url.json") or n.startswith("opt/kvplan/lib/bin") for n in names)
