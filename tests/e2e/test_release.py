"""``make release`` for real (``kvplan_dev.release.release``, into a temporary folder), and its refusal of a registry
that serves another image than the one built.

One release per module (about 3-4 minutes on the 2-core machine: the Debian base, the locked wheels, crane, a
registry, helm push/install on a local control plane, and the demo with the operator in a podman container). Checked:
the registry serves the built digest; the pushed config keeps its promises (user 10001, exec-form entrypoint, OCI
labels with version/source/revision/licenses, no shell in the filesystem); the chart installed from
``oci://127.0.0.1:<port>/charts/kvplan-operator`` runs the image by that digest and brings both KVPlan API versions;
the operator from the image made the example KVPlan Ready. Then the tag is moved to another image (a label added with
``crane mutate``) and the release's digest check must fail naming both digests.

Needs the network the project allows (Debian's archive for mmdebstrap, PyPI for the wheels) and, for the last step,
podman with runc (installed from Debian by the release itself when missing); nothing here skips: a step that cannot
run fails with its error.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

import kvcore
from kvplan_dev import image
from kvplan_dev.release import ReleaseError, ensure_release_tools, release, verify_digest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("release")
    try:
        return release(run=True, progress=lambda line: None, out=out), out
    except ReleaseError as exc:
        pytest.fail(f"make release failed: {exc}")


def test_release_pushed_what_it_built(released: tuple[dict[str, Any], Path]) -> None:
    report, out = released
    assert report["ok"] is True and report["version"] == kvcore.__version__
    img = report["image"]
    assert img["reference"].endswith(f"/kvplan-operator:{kvcore.__version__}@{img['digest']}")
    assert img["user"] == "10001:10001" and img["entrypoint"] == list(image.ENTRYPOINT)
    assert img["labels"]["org.opencontainers.image.version"] == kvcore.__version__
    assert img["labels"]["org.opencontainers.image.revision"].startswith(report["revision"])
    assert [layer["file"] for layer in img["layers"]] == ["layer-0-base.tar.gz", "layer-1-deps.tar.gz",
                                                          "layer-2-app.tar.gz"]
    assert (out / f"kvplan-operator-{kvcore.__version__}.tar").stat().st_size == img["tarball_bytes"]


def test_chart_from_the_registry_runs_the_image_by_digest(released: tuple[dict[str, Any], Path]) -> None:
    report, _ = released
    assert report["chart"]["reference"].startswith("oci://127.0.0.1:")
    assert report["chart"]["digest"].startswith("sha256:")
    assert report["install"]["deployment_images"] == [report["image"]["reference"]]
    assert sorted(report["install"]["kvplan_crd_versions"]) == ["v1alpha1", "v1beta1"]


def test_the_image_reconciled_the_example(released: tuple[dict[str, Any], Path]) -> None:
    run = released[0]["run"]
    assert run["ok"] is True and run["ready"] == "True" and run["reason"] == "Reconciled", run
    assert run["deployments_changed"] == ["vllm-llama70b-batch", "vllm-llama70b-interactive"]


def test_a_moved_tag_fails_the_digest_check(released: tuple[dict[str, Any], Path]) -> None:
    from kvplan_dev.registry import LocalRegistry

    report, out = released
    tools = ensure_release_tools(lambda line: None)
    built = report["image"]["digest"]
    with LocalRegistry(tools.registry, out / "registry", out / "registry-rerun") as registry:
        tag = f"{registry.host}/kvplan-operator:{kvcore.__version__}"
        crane = str(tools.crane)
        served = subprocess.run([crane, "digest", tag], capture_output=True, text=True, check=True).stdout.strip()
        verify_digest(built, served, tag)  # the storage still serves what was built
        subprocess.run([crane, "mutate", tag, "--label", "moved=yes", "-t", tag], capture_output=True, text=True,
                       check=True)
        moved = subprocess.run([crane, "digest", tag], capture_output=True, text=True, check=True).stdout.strip()
    assert moved != built
    with pytest.raises(ReleaseError, match=f"digest mismatch: built {built} but the registry serves {moved}"):
        verify_digest(built, moved, tag)
