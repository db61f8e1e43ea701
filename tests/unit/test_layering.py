"""Layering and typing of kvcore: it never imports the operator stack (import-linter contract plus a plain
source grep, so a lazy import inside a function is caught too), and ``mypy --strict`` passes over kvcore and over
the operator (configured strict in pyproject.toml)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
FORBIDDEN = ("kopf", "kubernetes", "prometheus_api_client", "kvplan_operator")
IMPORT_RE = re.compile(r"^\s*(?:from|import)\s+(" + "|".join(FORBIDDEN) + r")\b", re.MULTILINE)


def _tool(name: str) -> str:
    path = VENV_BIN / name
    if not path.exists():
        pytest.fail(f"{path} missing: run `make venv` (the test extra installs it)")
    return str(path)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONSAFEPATH": "1"}


def test_import_linter_contracts_hold() -> None:
    proc = subprocess.run(
        [_tool("lint-imports")], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("module", FORBIDDEN)
def test_kvcore_source_never_imports(module: str) -> None:
    offenders = [
        f"{p.relative_to(REPO)}: {m.group(0).strip()}"
        for p in sorted((REPO / "kvcore").rglob("*.py"))
        for m in IMPORT_RE.finditer(p.read_text(encoding="utf-8"))
        if m.group(1) == module
    ]
    assert offenders == []


@pytest.mark.parametrize("target", [pytest.param("kvcore", id="kvcore"), pytest.param("operator", id="operator")])
def test_mypy_strict(target: str) -> None:
    proc = subprocess.run(
        [_tool("mypy"), target], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
