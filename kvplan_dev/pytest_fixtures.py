"""pytest fixtures over the real local control plane, shared by ``tests/integration`` and ``tests/e2e``.

Import them into a conftest (``from kvplan_dev.pytest_fixtures import *``). They never skip: a binary that cannot be
installed or built, or a server that does not become ready, fails the test with the error and the log tail.

- ``control_plane_tools`` (session): every binary, built on first use (see :mod:`kvplan_dev.tools`).
- ``cluster`` (session): one etcd + kube-apiserver for the whole session.
- ``kube_api`` (session): a ``kubernetes.client.ApiClient`` from the cluster's admin kubeconfig.
- ``namespace`` (function): a fresh namespace per test. There is no namespace controller (no
  kube-controller-manager), so deleting it leaves it ``Terminating``; names are unique, so that is harmless.
- ``prometheus`` (function): an empty Prometheus per test; call ``prometheus.backfill(series, window)``.

- ``vllm_python`` (session): the cached ``vllm==0.33.0`` venv's python (:mod:`kvplan_dev.vllm_env`), installed on
  first use, for tests marked ``vllm``.

``prebuild_tools`` is for ``pytest_collection_finish`` (builds before the first test, outside the per-test timeout;
it also installs the vLLM venv when a ``vllm`` test is selected);
``check_no_leftover_processes`` is for ``pytest_sessionfinish``: it fails the run if a process started through
these fixtures (or any child of pytest) is still alive.
"""

from __future__ import annotations

import re
import secrets
from typing import Any, Iterator

import pytest

from kvplan_dev.cluster import LocalCluster
from kvplan_dev.gobuild import BuildError
from kvplan_dev.process import ProcessRecord, live_children
from kvplan_dev.prom import LocalPrometheus
from kvplan_dev.tools import Tools, ensure_apt, ensure_tools
from kvplan_dev.vllm_env import ensure_vllm_env

STARTED: list[ProcessRecord] = []
"""Every process the fixtures started in this session (checked at session end)."""


def _progress(message: str) -> None:
    print(message, flush=True)


_PREBUILD_ERROR: list[str] = []
_VLLM_ERROR: list[str] = []


def prebuild_tools(session: pytest.Session) -> None:
    """For ``pytest_collection_finish``: if any selected test is ``integration`` or ``e2e``, install/build the
    binaries now, before the first test, so a cold build (tens of minutes) is not cut by the per-test timeout; if
    any is ``vllm``, install the cached vLLM venv the same way (first time ~10 minutes, with progress lines).
    A failure is remembered and reported by the ``control_plane_tools`` / ``vllm_python`` fixture (tests fail,
    never skip)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")

    def progress(message: str) -> None:
        if reporter is not None:
            reporter.write_line(message)

    if any(item.get_closest_marker("integration") or item.get_closest_marker("e2e") for item in session.items):
        try:
            ensure_tools(progress=progress)
        except BuildError as exc:
            _PREBUILD_ERROR.append(str(exc))
    if any(item.get_closest_marker("vllm") for item in session.items):
        try:
            ensure_vllm_env(progress=progress)
        except BuildError as exc:
            _VLLM_ERROR.append(str(exc))


@pytest.fixture(scope="session")
def vllm_python() -> Any:
    """The cached vLLM 0.33.0 venv's python (a ``pathlib.Path``); installs it on first use."""
    if _VLLM_ERROR:
        pytest.fail(f"the vLLM environment could not be installed:\n{_VLLM_ERROR[0]}", pytrace=False)
    try:
        return ensure_vllm_env(progress=_progress)
    except BuildError as exc:
        pytest.fail(f"the vLLM environment could not be installed:\n{exc}", pytrace=False)


@pytest.fixture(scope="session")
def plugin_python(vllm_python: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The overlay's interpreter (a ``pathlib.Path``): the cached vLLM venv + this checkout's kvplan and kvplan-dev
    installed editable (no deps), as a user installs the plugins (:func:`kvplan_dev.vllm_overlay.make_overlay`)."""
    from pathlib import Path

    from kvplan_dev.vllm_overlay import OverlayError, make_overlay

    try:
        return make_overlay(Path(vllm_python), tmp_path_factory.mktemp("vllm-overlay"), Path(__file__).parents[1])
    except OverlayError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def control_plane_tools() -> Tools:
    """Every binary; builds what is missing (the first time this takes tens of minutes)."""
    if _PREBUILD_ERROR:
        pytest.fail(f"control-plane tools could not be installed or built:\n{_PREBUILD_ERROR[0]}", pytrace=False)
    try:
        return ensure_tools(progress=_progress)
    except BuildError as exc:
        pytest.fail(f"control-plane tools could not be installed or built:\n{exc}", pytrace=False)


@pytest.fixture(scope="session")
def cluster(control_plane_tools: Tools) -> Iterator[LocalCluster]:
    """A running etcd + kube-apiserver on loopback, shared by the session; stopped and cleaned at the end."""
    local = LocalCluster(control_plane_tools)
    try:
        local.start()
    except (RuntimeError, BuildError) as exc:
        STARTED.extend(local.history)
        pytest.fail(f"local control plane did not start:\n{exc}", pytrace=False)
    try:
        yield local
    finally:
        local.stop()
        STARTED.extend(local.history)


@pytest.fixture(scope="session")
def kube_api(cluster: LocalCluster) -> Iterator[Any]:
    """``kubernetes.client.ApiClient`` authenticated as the cluster admin."""
    from kubernetes import config

    client = config.new_client_from_config(config_file=str(cluster.kubeconfig))  # type: ignore[no-untyped-call]
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def namespace(request: pytest.FixtureRequest, kube_api: Any) -> Iterator[str]:
    """A new namespace named after the test; deleted (left Terminating) afterwards."""
    from kubernetes import client

    slug = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{slug}-{secrets.token_hex(3)}"
    core = client.CoreV1Api(kube_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core.delete_namespace(name)


@pytest.fixture
def prometheus() -> Iterator[LocalPrometheus]:
    """An empty Prometheus on loopback for one test (100y retention); stopped and removed afterwards. Needs only
    Debian's prometheus package (installed with apt when missing), not the Go builds."""
    try:
        ensure_apt(["prometheus", "promtool"], _progress)
        server = LocalPrometheus()
        server.start()
    except (RuntimeError, BuildError) as exc:
        pytest.fail(f"local Prometheus did not start:\n{exc}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()
        STARTED.extend(server.history)


def check_no_leftover_processes(session: pytest.Session) -> None:
    """Fail the session if any fixture-started process, or any child of pytest, is still running."""
    alive = [f"{r.name} (pid {r.pid})" for r in STARTED if r.alive()]
    children = [f"{name} (pid {pid})" for pid, name in live_children()]
    if alive or children:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = f"processes left running after the tests: {sorted(set(alive + children))}"
        if reporter is not None:
            reporter.write_line(f"\nERROR: {message}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
