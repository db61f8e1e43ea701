"""Fixtures for kvplan's vLLM plugin tests (``tests/vllm/test_plugin_*.py``): the cached ``vllm==0.33.0`` venv
(``vllm_python``) with kvplan installed on top the way a user installs the plugins (``plugin_python``; both from
:mod:`kvplan_dev.pytest_fixtures`), and a runner for vLLM's engine loop in it (the main ``.venv`` has no vLLM).

The overlay (:func:`kvplan_dev.vllm_overlay.make_overlay`) is made once per session in a temporary directory: a
venv whose ``.pth`` adds the cached venv's ``site-packages``, plus ``pip install --no-deps -e <repo>``, so pip
registers the ``vllm.stat_logger_plugins`` entry point as a user's install does and the shared cached venv is never
written to. Nothing here skips: a missing or wrong vLLM fails the tests that need it, saying why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from kvplan_dev.vllm_overlay import OverlayError, run_engine_driver

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def engine_driver(plugin_python: Path, tmp_path: Path) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """``run(scenario) -> result``: the engine loop of :mod:`kvplan_dev.vllm_driver` on ``scenario`` in the vLLM environment."""
    runs = iter(range(1000))

    def run(scenario: dict[str, Any]) -> dict[str, Any]:
        workdir = tmp_path / f"run{next(runs)}"
        workdir.mkdir()
        try:
            return run_engine_driver(plugin_python, scenario, workdir)  # type: ignore[return-value]
        except OverlayError as exc:
            pytest.fail(str(exc), pytrace=False)

    return run
