"""A Python environment with vLLM plus kvplan, made without writing into the vLLM environment (dev/test tooling;
pure Python, no vLLM import).

The overlay is a fresh virtual environment whose ``.pth`` adds the vLLM environment's ``site-packages`` with
``site.addsitedir`` (so that environment's own ``.pth`` files run too); kvplan is then ``pip install --no-deps -e``'d
into the overlay. pip registers kvplan's entry points (``vllm.stat_logger_plugins``) exactly as a user's install does.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

VLLM_VERSION = "0.33.0"


class OverlayError(RuntimeError):
    """The vLLM environment is missing or wrong, or the overlay could not be made; the message says which."""


def vllm_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for vLLM subprocesses: CPU platform, no repo root on sys.path (``operator/`` would shadow the
    standard library), no usage reporting, offline model hub, and no inherited ``KVPLAN_``/``VLLM_`` settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVPLAN_", "VLLM_", "PYTHONPATH"))}
    env.update({
        "PYTHONSAFEPATH": "1", "VLLM_TARGET_DEVICE": "cpu", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
    })
    env.update(extra or {})
    return env


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, cwd="/", env=vllm_env())


def make_overlay(base_python: Path, dest: Path, repo: Path) -> Path:
    """Make the overlay at ``dest`` on the vLLM environment of ``base_python``; its interpreter."""
    if not base_python.exists():
        raise OverlayError(f"no vLLM environment at {base_python}: install vllm=={VLLM_VERSION} there")
    probe = _run([str(base_python), "-c", "import json, sysconfig, importlib.metadata as m; "
                  "print(json.dumps([sysconfig.get_paths()['purelib'], m.version('vllm')]))"])
    if probe.returncode != 0:
        raise OverlayError(f"{base_python} cannot report its vLLM: {probe.stderr[-2000:]}")
    site, version = json.loads(probe.stdout)
    if version != VLLM_VERSION:
        raise OverlayError(f"{base_python} has vllm {version}; kvplan's plugins are built for {VLLM_VERSION}")
    made = _run([str(base_python), "-m", "venv", "--without-pip", str(dest)])
    if made.returncode != 0:
        raise OverlayError(f"cannot create the overlay environment at {dest}: {made.stderr}")
    python = dest / "bin" / "python"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    Path(purelib.stdout.strip(), "kvplan_vllm_base.pth").write_text(f"import site; site.addsitedir({site!r})\n")
    # kvplan (kvcore, the operator, kvplan_vllm) and kvplan-dev (this tooling: the vLLM driver) are two
    # distributions of the one checkout.
    install = _run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "-e",
                    str(repo), "-e", str(repo / "kvplan_dev")])
    if install.returncode != 0:
        raise OverlayError(f"pip install -e {repo} -e {repo / 'kvplan_dev'} into the overlay failed:\n"
                           f"{install.stdout[-2000:]}\n"
                           f"{install.stderr[-4000:]}")
    return python


def run_engine_driver(python: Path, scenario: dict[str, object], workdir: Path) -> dict[str, object]:
    """Run the engine loop of :mod:`kvplan_dev.vllm_driver` on ``scenario`` in the overlay; its JSON result. Raises
    :class:`OverlayError` with the log tail if it fails."""
    scenario = {**scenario, "workdir": str(workdir), "out": str(workdir / "result.json")}
    spec = workdir / "scenario.json"
    spec.write_text(json.dumps(scenario))
    log = workdir / "driver.log"
    with log.open("w") as fh:
        proc = subprocess.run([str(python), "-m", "kvplan_dev.vllm_driver", "engine", str(spec)], cwd=str(workdir),
                              env=vllm_env(), stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode != 0 or not (workdir / "result.json").exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:])
        raise OverlayError(f"vLLM driver (engine loop) failed (exit {proc.returncode}); log {log}:\n{tail}")
    return json.loads((workdir / "result.json").read_text())  # type: ignore[no-any-return]
