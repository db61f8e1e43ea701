"""Fixtures of the integration tier: a real etcd + kube-apiserver (session), a namespace per test, a real
Prometheus per test and a ``kubernetes`` API client. They live in :mod:`kvplan_dev.pytest_fixtures` so the e2e tier
can import the same ones. Nothing here skips: a missing or unbuildable binary fails loudly with its error."""

from __future__ import annotations

import pytest

from kvplan_dev.pytest_fixtures import (  # noqa: F401 - imported fixtures are registered by name
    check_no_leftover_processes,
    cluster,
    control_plane_tools,
    kube_api,
    namespace,
    prebuild_tools,
    prometheus,
)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build missing binaries once, before the first integration/e2e test runs (not under the per-test timeout)."""
    prebuild_tools(session)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Nothing may be left running after the tests (session fixtures are torn down before this hook)."""
    check_no_leftover_processes(session)
