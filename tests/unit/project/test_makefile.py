"""The Makefile's promised targets exist and run what the README says (``make -n``: printed, not run). A target
listed in ``.PHONY`` without a rule is silently a no-op in GNU make, which once hid a lost ``tools``/``demo`` rule;
this catches that. ``test`` is read from the file instead: make runs recipe lines with ``$(MAKE)`` even under ``-n``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("target", "command"),
    [
        pytest.param("tools", "kvplan-dev tools ensure", id="tools"),
        pytest.param("demo", "kvplan-dev demo", id="demo"),
        pytest.param("release", "kvplan-dev release", id="release"),
        pytest.param("lock", "uv pip compile", id="lock"),
        pytest.param("sync-crds", "scripts/sync_crds.py", id="sync-crds"),
        pytest.param("dashboard", "kvplan_dev.dashboard", id="dashboard"),
        pytest.param("chart-readme", "scripts/chart_readme.py", id="chart-readme"),
        pytest.param("architecture", "scripts/architecture_diagram.py", id="architecture"),
        pytest.param("test-fast", '-m "not slow" tests/unit', id="test-fast"),
    ],
)
def test_target_runs(target: str, command: str) -> None:
    done = subprocess.run(["make", "-n", "--no-print-directory", target], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert command in done.stdout, done.stdout[-2000:]


def test_test_target_runs_the_suite_then_the_other_pythons() -> None:
    lines = (REPO / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("test: "))
    recipe = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    assert "tools" in lines[start].split()
    assert recipe[0] == "$(VENV)/bin/pytest tests"
    assert "test-pythons" in recipe[1] and 'PYTHON_VERSIONS="3.12 3.13"' in recipe[1]
