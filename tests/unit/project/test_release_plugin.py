"""The release's plugin step (:func:`kvplan_dev.release_plugin.push_plugin_wheel`) against a fake crane that keeps
pushed layers in memory (the e2e tier runs the real registry): the wheel of this checkout is pushed as one layer
and the report names its sha256 and the registry's digest; a registry that serves another wheel, or none, fails
the step naming which."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Callable

import pytest

import kvcore
from kvplan_dev.release_plugin import WHEEL_DIR, WHEEL_REPO, push_plugin_wheel, sha256

REPO = Path(__file__).resolve().parents[3]
HOST = "127.0.0.1:5000"


class FakeCrane:
    """``crane append/digest/export/manifest`` over a dict of tag -> layer bytes; ``serve`` rewrites what
    ``export`` returns (the flattened, uncompressed filesystem)."""

    def __init__(self, serve: Callable[[bytes], bytes] = lambda tar: tar) -> None:
        self.layers: dict[str, bytes] = {}
        self.serve = serve

    def __call__(self, *args: str, step: str) -> str:
        verb = args[0]
        if verb == "append":
            self.layers[args[args.index("-t") + 1]] = Path(args[args.index("-f") + 1]).read_bytes()
            return ""
        if verb == "digest":
            return "sha256:" + hashlib.sha256(self.layers[args[1]]).hexdigest()
        tag = args[1].split("@", 1)[0]
        if verb == "export":
            Path(args[2]).write_bytes(self.serve(gzip.decompress(self.layers[tag])))
            return ""
        if verb == "manifest":
            return json.dumps({"layers": [{"size": len(self.layers[tag])}]})
        raise AssertionError(f"unexpected crane call {args}")


def _replace_wheel(tar_bytes: bytes) -> bytes:
    """The same filesystem with the wheel's bytes changed."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for member in src:
            data = src.extractfile(member).read() + b"x" if member.isreg() else None  # type: ignore[union-attr]
            if data is not None:
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def _empty(tar_bytes: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w"):
        pass
    return out.getvalue()


@pytest.mark.slow
def test_pushes_the_wheel_and_reports_it(tmp_path: Path) -> None:
    crane = FakeCrane()
    report: dict[str, object] = {}
    ref = push_plugin_wheel(crane, HOST, REPO, 1_700_000_000, report, lambda line: None, tmp_path)
    (wheel,) = (tmp_path / "plugin").glob("*.whl")
    tag = f"{HOST}/{WHEEL_REPO}:{kvcore.__version__}"
    assert list(crane.layers) == [tag]
    assert ref == f"{tag}@{crane('digest', tag, step='check')}"
    plugin = report["plugin"]
    assert isinstance(plugin, dict)
    assert plugin["wheel_sha256"] == sha256(wheel) and plugin["reference"] == ref and plugin["layers"] == 1
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(crane.layers[tag]))) as tar:
        assert [m.name for m in tar if m.isreg()] == [f"{WHEEL_DIR}/{wheel.name}"]


@pytest.mark.parametrize(("serve", "message"), [
    pytest.param(_replace_wheel, "is not the one built here", id="another-wheel"),
    pytest.param(_empty, "has no wheels/", id="no-wheel"),
])
@pytest.mark.slow
def test_a_registry_serving_something_else_fails(tmp_path: Path, serve: Callable[[bytes], bytes],
                                                 message: str) -> None:
    with pytest.raises(RuntimeError, match=message):
        push_plugin_wheel(FakeCrane(serve), HOST, REPO, 1_700_000_000, {}, lambda line: None, tmp_path)
