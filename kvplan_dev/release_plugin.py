"""The release's plugin step: the ``kvplan-vllm`` wheel (:mod:`kvplan_dev.plugin_wheel`), pushed to the release's
local OCI registry as a one-layer image ``kvplan-vllm-wheel:<version>`` whose only file is
``/wheels/<wheel>`` (an OCI registry is what the release already runs; it serves no PEP 503 index).

What is pushed is checked like the operator image: the registry's digest for the tag must be the locally built one,
and the wheel read back from the pushed image (``crane export``) must have the local wheel's sha256. The serving
image itself (``docker/vllm-plugin.Dockerfile``, ``FROM vllm/vllm-openai:v0.33.0``) is not built here: that base is
a multi-gigabyte CUDA image the release machine has no copy of; the Dockerfile is linted
(``tests/unit/project/test_plugin_dockerfile.py``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Callable

import kvcore
from kvplan_dev import image
from kvplan_dev.plugin_wheel import build_plugin_wheel

WHEEL_REPO = "kvplan-vllm-wheel"
WHEEL_DIR = "wheels"
"""The folder of the pushed image that holds the wheel."""
Progress = Callable[[str], None]
Crane = Callable[..., str]
"""``crane(*args, step=...)``: runs the release's crane, raising the release's error on failure; its stdout."""


def sha256(path: Path) -> str:
    """``sha256:<hex>`` of a file."""
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def wheel_layer(wheel: Path, out: Path, epoch: int) -> Path:
    """A deterministic layer holding ``/wheels/<wheel>`` (0:0, mode 0644, mtime ``epoch``)."""
    with tempfile.TemporaryDirectory(prefix="kvplan-wheel-layer-") as tmp:
        folder = Path(tmp) / WHEEL_DIR
        folder.mkdir(mode=0o755)
        folder.chmod(0o755)
        copy = folder / wheel.name
        shutil.copyfile(wheel, copy)
        copy.chmod(0o644)
        return image.write_layer(Path(tmp), out, epoch)


def wheel_in_export(export: Path, name: str) -> bytes | None:
    """The bytes of ``wheels/<name>`` in a flattened filesystem tar, or None when it is not there."""
    with tarfile.open(export) as tar:
        for member in tar:
            if member.name.removeprefix("./").removeprefix("/") == f"{WHEEL_DIR}/{name}" and member.isreg():
                handle = tar.extractfile(member)
                return handle.read() if handle else None
    return None


def push_plugin_wheel(crane: Crane, host: str, repo: Path, epoch: int, report: dict[str, Any],
                      progress: Progress, out: Path) -> str:
    """Build the wheel into ``out/plugin``, push it as ``<host>/kvplan-vllm-wheel:<version>`` and check what the
    registry serves; the pushed reference by digest. Raises ``RuntimeError`` when a check fails."""
    version = kvcore.__version__
    progress("[release] the kvplan-vllm wheel (kvplan_vllm/pyproject.toml) ...")
    wheel = build_plugin_wheel(repo, out / "plugin", epoch)
    layer = wheel_layer(wheel, out / "plugin-wheel-layer.tar.gz", epoch)
    tag = f"{host}/{WHEEL_REPO}:{version}"
    progress(f"[release] crane append {wheel.name} -> {tag} ...")
    crane("append", "--oci-empty-base", "--platform", "linux/amd64", "-f", str(layer), "-t", tag, step="append wheel")
    pushed = crane("digest", tag, step="digest wheel")
    export = out / "plugin-wheel-export.tar"
    crane("export", f"{tag}@{pushed}", str(export), step="export wheel")
    served = wheel_in_export(export, wheel.name)
    export.unlink()
    local = sha256(wheel)
    if served is None:
        raise RuntimeError(f"the pushed {tag}@{pushed} has no {WHEEL_DIR}/{wheel.name}")
    if "sha256:" + hashlib.sha256(served).hexdigest() != local:
        raise RuntimeError(f"the wheel in {tag}@{pushed} is not the one built here ({local})")
    manifest = json.loads(crane("manifest", f"{tag}@{pushed}", step="manifest wheel"))
    report["plugin"] = {"wheel": str(wheel), "wheel_sha256": local, "wheel_bytes": wheel.stat().st_size,
                        "reference": f"{tag}@{pushed}", "digest": pushed, "layers": len(manifest["layers"]),
                        "dockerfile": "docker/vllm-plugin.Dockerfile", "serving_image_built": False}
    return f"{tag}@{pushed}"
