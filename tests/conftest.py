"""Shared pytest configuration.

Tiers: ``tests/unit`` (pure, fast), ``tests/integration`` (real kube-apiserver + etcd and real Prometheus on
loopback, marked ``integration``), ``tests/e2e`` (operator under KopfRunner and helm, marked ``e2e``), ``tests/vllm``
(the real vllm==0.33.0 on CPU from its cached venv, marked ``vllm``).

The control-plane fixtures (``cluster``, ``namespace``, ``prometheus``, ``kube_api``) come from
:mod:`kvplan_dev.pytest_fixtures` and are registered here once, for every tier. Nothing in them skips: a binary that
cannot be built fails the tests that need it, with the error.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from kvplan_dev.pytest_fixtures import (  # noqa: F401 - imported fixtures are registered by name
    check_no_leftover_processes,
    cluster,
    control_plane_tools,
    kube_api,
    namespace,
    plugin_python,
    prebuild_tools,
    prometheus,
    vllm_python,
)

# Property tests draw the same examples on every run unless asked to explore, so CI cannot pass or fail by luck of
# the draw; `HYPOTHESIS_PROFILE=explore` (random seeds, example database) is for hunting new counterexamples, which
# then go into the test as explicit `@example`s.
# Neither profile has a per-example deadline or the too-slow health check: both are wall-clock limits, which a
# loaded machine trips (a correctness test must not depend on the machine's load).
settings.register_profile("deterministic", derandomize=True, database=None, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", derandomize=False, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))

REPO = Path(__file__).resolve().parent.parent
TRACES = REPO / "kvcore" / "data" / "traces"


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The real traces vendored in the repository (provenance: kvcore/data/traces/README.md). Missing traces are a
    loud failure, never a skip."""
    if not TRACES.is_dir():
        pytest.fail(f"vendored traces not found at {TRACES}")
    return TRACES


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build missing binaries (and the vLLM venv) once, before the first integration/e2e/vllm test runs (not under
    the per-test timeout)."""
    prebuild_tools(session)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Nothing may be left running after the tests, whichever tier ran (session fixtures are torn down first)."""
    check_no_leftover_processes(session)


@pytest.fixture(autouse=True)
def _operator_not_stopping() -> Iterator[None]:
    """The operator's stop flag (``kvplan_operator.deadline``, set on SIGTERM and by a KopfRunner's shutdown) is
    process-wide: a test that stops an operator in this process must not leave every later reconcile stopping."""
    from kvplan_operator import deadline

    deadline.reset_stop()
    yield
    deadline.reset_stop()
