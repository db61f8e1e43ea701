"""The wheel of kvplan's vLLM plugins (``kvplan-vllm``, ``kvplan_vllm/pyproject.toml``), and the overlay
environment that proves it installs into vLLM 0.33's environment without adding a package.

The plugin's project reads ``kvcore``'s modules from ``../kvcore`` (one source of each module). Building it in
place would leave setuptools' ``build/`` and ``*.egg-info`` inside ``kvplan_vllm/``, where the kvplan wheel's
package discovery would pick them up as packages; so :func:`build_plugin_wheel` builds from a copy of the two
folders in a temporary directory, with ``SOURCE_DATE_EPOCH`` so that the zip's timestamps are the commit's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import kvcore

DIST_NAME = "kvplan-vllm"
WHEEL_PREFIX = "kvplan_vllm"
PROJECT_DIR = "kvplan_vllm"
SOURCE_DIRS = ("kvplan_vllm", "kvcore")
"""The folders the plugin's project reads: its own, and kvcore's (for the few modules it lists)."""
#: Left out of the copy: caches, earlier build output, and kvcore's bundled traces (``kvcore/data``, megabytes the
#: plugin's wheel never carries).
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info", "data")


class PluginWheelError(RuntimeError):
    """The plugin's wheel could not be built or checked; the message says which step and why."""


def build_plugin_wheel(repo: Path, dest: Path, epoch: int | None = None) -> Path:
    """``pip wheel`` of ``kvplan_vllm/pyproject.toml`` (no dependencies, no build isolation: the locked setuptools)
    into ``dest``; the wheel's path."""
    dest.mkdir(parents=True, exist_ok=True)
    version = kvcore.__version__
    for old in dest.glob(f"{WHEEL_PREFIX}-{version}-*.whl"):
        old.unlink()
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    if epoch is not None:
        env["SOURCE_DATE_EPOCH"] = str(epoch)
    with tempfile.TemporaryDirectory(prefix="kvplan-vllm-wheel-") as tmp:
        for name in SOURCE_DIRS:
            shutil.copytree(repo / name, Path(tmp) / name, ignore=_IGNORE)
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                               "-w", str(dest.resolve()), str(Path(tmp) / PROJECT_DIR)],
                              capture_output=True, text=True, env=env, cwd=tmp, check=False)
    if done.returncode != 0:
        raise PluginWheelError(f"pip wheel {PROJECT_DIR}: exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    wheels = sorted(dest.glob(f"{WHEEL_PREFIX}-{version}-*.whl"))
    if len(wheels) != 1:
        raise PluginWheelError(f"pip wheel: expected one {WHEEL_PREFIX}-{version} wheel in {dest}, found {wheels}")
    return wheels[0]


def _run(argv: list[str], step: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, cwd="/", check=False,
                          env={**{k: v for k, v in os.environ.items() if not k.startswith("PYTHONPATH")},
                               "PYTHONSAFEPATH": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    if done.returncode != 0:
        raise PluginWheelError(f"{step}: exited {done.returncode}: {(done.stderr or done.stdout).strip()[-3000:]}")
    return done.stdout


def throwaway_env(base_python: Path, dest: Path) -> Path:
    """A venv at ``dest`` (no pip of its own) whose ``.pth`` adds ``base_python``'s ``site-packages``: it sees
    everything that environment has, and installs write only under ``dest``. Its interpreter."""
    site = _run([str(base_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                "the base environment's site-packages").strip()
    _run([str(base_python), "-m", "venv", "--without-pip", str(dest)], f"venv {dest}")
    python = dest / "bin" / "python"
    own = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
               "the throwaway environment's site-packages").strip()
    Path(own, "kvplan_base_env.pth").write_text(f"import site; site.addsitedir({site!r})\n")
    return python


def freeze(python: Path) -> dict[str, str]:
    """Every distribution ``python`` sees, name (normalised) -> version."""
    out = _run([str(python), "-c", "import json, importlib.metadata as m; print(json.dumps(sorted("
                "{d.metadata['Name'].lower().replace('_', '-'): d.version for d in m.distributions()}.items())))"],
               "list distributions")
    return dict(json.loads(out))


def dry_run_report(python: Path, wheel: Path, report: Path) -> list[tuple[str, str]]:
    """``pip install --dry-run --no-index --report`` of ``wheel`` (its dependencies resolved against what
    ``python`` already has, nothing downloaded): the (name, version) pip would install."""
    _run([str(python), "-m", "pip", "install", "--quiet", "--dry-run", "--no-index", "--report", str(report),
          str(wheel)], f"pip install --dry-run {wheel.name}")
    return [(item["metadata"]["name"], item["metadata"]["version"])
            for item in json.loads(report.read_text())["install"]]


def install(python: Path, wheel: Path) -> None:
    """``pip install --no-index`` of ``wheel`` (dependencies must already be there)."""
    _run([str(python), "-m", "pip", "install", "--quiet", "--no-index", str(wheel)], f"pip install {wheel.name}")
