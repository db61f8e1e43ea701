"""Shared pytest configuration.

Tiers: ``tests/unit`` (pure, fast), ``tests/integration`` (real kube-apiserver + etcd and real Prometheus on
loopback, marked ``integration``), ``tests/e2e`` (operator under KopfRunner and helm, marked ``e2e``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
TRACES = SHARED / "traces"


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The shared real traces. Missing traces are a loud failure, never a skip."""
    if not TRACES.is_dir():
        pytest.fail(f"shared traces not found at {TRACES}: the checkout must sit next to shared/")
    return TRACES
