"""Fixtures for the ``vllm`` tier: a Python environment with the real ``vllm==0.33.0`` plus kvplan, installed the way
a user installs the plugins, and helpers to run vLLM in subprocesses of that environment (the main ``.venv`` has no
vLLM).

Where vLLM comes from: :func:`vllm_base_python`. Until the cached environment of ``kvplan_dev`` lands on main it
is the probe environment (``/tmp/vllm-probe``, or ``$KVPLAN_VLLM_PYTHON``); switching is one line there.

The overlay: a fresh virtual environment per test session whose ``.pth`` adds the base environment's
``site-packages`` (``site.addsitedir``, so its own ``.pth`` files run too), then ``pip install --no-deps -e <repo>``
into it. The entry point ``vllm.stat_logger_plugins`` is registered by pip exactly as a user's install registers
it, and the shared base environment is never written to.

Nothing here skips: a missing or wrong vLLM fails the tests that need it, saying why.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, Callable

import pytest

REPO = Path(__file__).resolve().parents[2]
VLLM_VERSION = "0.33.0"
PROBE_PYTHON = Path("/tmp/vllm-probe/bin/python")


def vllm_base_python() -> Path:
    """The interpreter of an environment holding vllm==0.33.0. When ``kvplan_dev``'s cached vLLM environment is on
    main, replace the body with its helper (one line), e.g. ``return kvplan_dev.vllm_env.ensure().python``."""
    return Path(os.environ.get("KVPLAN_VLLM_PYTHON", str(PROBE_PYTHON)))


def _run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, **kwargs)


def vllm_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for vLLM subprocesses: CPU platform, no repo root on sys.path (``operator/`` would shadow the
    standard library), no usage reporting, no network."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVPLAN_", "VLLM_", "PYTHONPATH"))}
    env.update({
        "PYTHONSAFEPATH": "1", "VLLM_TARGET_DEVICE": "cpu", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
    })
    env.update(extra or {})
    return env


@pytest.fixture(scope="session")
def vllm_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The overlay environment's interpreter: base vLLM environment + kvplan installed editable (no deps)."""
    base = vllm_base_python()
    if not base.exists():
        pytest.fail(f"no vLLM environment at {base}: install vllm=={VLLM_VERSION} there (or set KVPLAN_VLLM_PYTHON)",
                    pytrace=False)
    probe = _run([str(base), "-c", "import json, sysconfig, importlib.metadata as m; "
                  "print(json.dumps([sysconfig.get_paths()['purelib'], m.version('vllm')]))"],
                 cwd="/", env=vllm_env())
    if probe.returncode != 0:
        pytest.fail(f"{base} cannot report its vLLM: {probe.stderr[-2000:]}", pytrace=False)
    site, version = json.loads(probe.stdout)
    if version != VLLM_VERSION:
        pytest.fail(f"{base} has vllm {version}, the plugins are built and tested against {VLLM_VERSION}",
                    pytrace=False)
    overlay = tmp_path_factory.mktemp("vllm-overlay")
    made = _run([str(base), "-m", "venv", "--without-pip", str(overlay)], cwd="/", env=vllm_env())
    if made.returncode != 0:
        pytest.fail(f"cannot create the overlay environment: {made.stderr}", pytrace=False)
    python = overlay / "bin" / "python"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd="/")
    Path(purelib.stdout.strip(), "kvplan_vllm_base.pth").write_text(f"import site; site.addsitedir({site!r})\n")
    install = _run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "-e",
                    str(REPO)], cwd="/", env=vllm_env())
    if install.returncode != 0:
        pytest.fail(f"pip install -e {REPO} into the overlay failed:\n{install.stdout[-2000:]}\n"
                    f"{install.stderr[-4000:]}", pytrace=False)
    return python


def _run_engine_driver(vllm_python: Path, scenario: dict[str, Any], workdir: Path) -> dict[str, Any]:
    scenario = {**scenario, "workdir": str(workdir), "out": str(workdir / "result.json")}
    spec = workdir / "scenario.json"
    spec.write_text(json.dumps(scenario))
    log = workdir / "driver.log"
    with log.open("w") as fh:
        proc = subprocess.run([str(vllm_python), str(REPO / "tests" / "vllm" / "engine_driver.py"), str(spec)],
                              cwd=str(workdir), env=vllm_env(), stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode != 0 or not (workdir / "result.json").exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:])
        pytest.fail(f"engine driver failed (exit {proc.returncode}); log {log}:\n{tail}", pytrace=False)
    return json.loads((workdir / "result.json").read_text())  # type: ignore[no-any-return]


@pytest.fixture
def engine_driver(vllm_python: Path, tmp_path: Path) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """``run(scenario) -> result``: ``tests/vllm/engine_driver.py`` on ``scenario`` in the vLLM environment."""
    runs = iter(range(1000))

    def run(scenario: dict[str, Any]) -> dict[str, Any]:
        workdir = tmp_path / f"run{next(runs)}"
        workdir.mkdir()
        return _run_engine_driver(vllm_python, scenario, workdir)

    return run
