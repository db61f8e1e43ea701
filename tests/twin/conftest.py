"""The twin (``kvplan_dev.twin``) for the tests in this folder: the real control plane with kube-controller-manager
and kube-scheduler, two A100-80GB nodes, the node agent running Pods as ``vllm serve`` on CPU, and Prometheus
scraping them. One twin per module; nothing here skips (a missing binary or vLLM environment fails, saying why)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvplan_dev.tools import Tools


@pytest.fixture(scope="module")
def twin(control_plane_tools: Tools, plugin_python: Path) -> Iterator[Any]:
    from kvplan_dev.gobuild import BuildError
    from kvplan_dev.twin.twin import Twin

    try:
        running = Twin(plugin_python, tools=control_plane_tools).start()
    except BuildError as exc:
        pytest.fail(f"the twin's binaries are missing: {exc}", pytrace=False)
    try:
        yield running
    finally:
        running.stop()
