"""Fixtures for the ``vllm`` tier: a Python environment with the real ``vllm==0.33.0`` plus kvplan, installed the way
a user installs the plugins, and a runner for vLLM's engine loop in it (the main ``.venv`` has no vLLM).

Where vLLM comes from: :func:`vllm_base_python`. Until the cached environment of ``kvplan_dev`` lands on main it
is the probe environment (``/tmp/vllm-probe``, or ``$KVPLAN_VLLM_PYTHON``); switching is one line there.

The overlay (:func:`kvplan_dev.vllm_overlay.make_overlay`) is made once per session in a temporary directory, so the
shared vLLM environment is never written to. Nothing here skips: a missing or wrong vLLM fails the tests that need
it, saying why.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import pytest

from kvplan_dev.vllm_overlay import OverlayError, make_overlay, run_engine_driver

REPO = Path(__file__).resolve().parents[2]
PROBE_PYTHON = Path("/tmp/vllm-probe/bin/python")


def vllm_base_python() -> Path:
    """The interpreter of an environment holding vllm==0.33.0. When ``kvplan_dev``'s cached vLLM environment is on
    main, replace the body with its helper (one line), e.g. ``return kvplan_dev.vllm_env.ensure().python``."""
    return Path(os.environ.get("KVPLAN_VLLM_PYTHON", str(PROBE_PYTHON)))


@pytest.fixture(scope="session")
def vllm_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The overlay environment's interpreter: the vLLM environment + kvplan installed editable (no deps)."""
    try:
        return make_overlay(vllm_base_python(), tmp_path_factory.mktemp("vllm-overlay"), REPO)
    except OverlayError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def engine_driver(vllm_python: Path, tmp_path: Path) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """``run(scenario) -> result``: :mod:`kvplan_dev.vllm_engine_driver` on ``scenario`` in the vLLM environment."""
    runs = iter(range(1000))

    def run(scenario: dict[str, Any]) -> dict[str, Any]:
        workdir = tmp_path / f"run{next(runs)}"
        workdir.mkdir()
        try:
            return run_engine_driver(vllm_python, scenario, workdir)  # type: ignore[return-value]
        except OverlayError as exc:
            pytest.fail(str(exc), pytrace=False)

    return run
