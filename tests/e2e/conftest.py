"""Fixtures shared by the e2e tests (the control-plane ones come from tests/conftest.py)."""

from __future__ import annotations

import pytest

from kvplan_dev.tools import Tools


@pytest.fixture(scope="session")
def tools(control_plane_tools: Tools) -> Tools:
    """helm, kubectl, the apiserver, etcd, Prometheus and promtool (built once if missing; never a skip)."""
    return control_plane_tools
