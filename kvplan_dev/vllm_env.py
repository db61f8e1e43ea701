"""The real ``vllm==0.33.0`` from the package index, in its own venv cached under ``~/.cache/kvplan/vllm-0.33.0``.

The parity tier (``tests/vllm``, ``make parity``) runs vLLM's own V1 ``Scheduler`` on CPU in a subprocess of this
venv; kvplan's venv never imports vLLM. The venv is installed from the hash-pinned lock file
``requirements/vllm-0.33.0.lock`` (vLLM and its whole resolved dependency set, written by ``scripts/lock_vllm.py``)
with ``pip install --require-hashes --no-deps``, so a fresh clone resolves exactly what was tested. It needs CPython
3.11 on Linux x86_64 (the wheels in the lock) and the package index.

- Built once, under a file lock (a concurrent ``make test`` waits for it), with a progress line every 30 s; the pip
  log goes to ``~/.cache/kvplan/logs/vllm-0.33.0.log``.
- A stamp file holds the lock file's sha256; a changed lock rebuilds the venv from scratch. A venv without the stamp
  (an interrupted install) is removed and built again.
- The cache root is ``$KVPLAN_CACHE`` or ``~/.cache/kvplan``, as for the other tools.

First build: its time and size are in the README, "The vLLM environment".
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from kvplan_dev.gobuild import BuildError, Progress, _Lock
from kvplan_dev.tools import cache_root, logs_dir

VLLM_VERSION = "0.33.0"
REPO = Path(__file__).resolve().parent.parent
LOCK_FILE = REPO / "requirements" / f"vllm-{VLLM_VERSION}.lock"
STAMP = ".kvplan-lock-sha256"


def env_dir() -> Path:
    """Where the venv lives: ``<cache root>/vllm-<version>``."""
    return cache_root() / f"vllm-{VLLM_VERSION}"


def env_python() -> Path:
    return env_dir() / "bin" / "python"


def lock_digest(lock: Path = LOCK_FILE) -> str:
    if not lock.exists():
        raise BuildError(f"vllm env: the lock file {lock} is missing (regenerate it with scripts/lock_vllm.py)")
    return hashlib.sha256(lock.read_bytes()).hexdigest()


def is_ready() -> bool:
    """True when the venv exists and was installed from the current lock file."""
    stamp = env_dir() / STAMP
    return env_python().exists() and stamp.exists() and stamp.read_text().strip() == lock_digest()


def _subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONSAFEPATH"] = "1"  # never import the repository's operator/ as the stdlib's
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    return env


def _base_python() -> str:
    """CPython 3.11 to create the venv with (the interpreter running kvplan, which is 3.11)."""
    if sys.version_info[:2] != (3, 11):
        found = shutil.which("python3.11")
        if not found:
            raise BuildError("vllm env: CPython 3.11 is needed (the lock pins cp311 wheels); python3.11 not found")
        return found
    return getattr(sys, "_base_executable", sys.executable)


def _pip_progress(log: Path, offset: int, total: int) -> str:
    with log.open(errors="replace") as reader:
        reader.seek(offset)
        text = reader.read()
    collected = len(re.findall(r"^Collecting ", text, re.MULTILINE))
    sizes = re.findall(r"\(([\d.]+) (kB|MB|GB)\)", text)
    mb = sum(float(v) * {"kB": 1 / 1024, "MB": 1.0, "GB": 1024.0}[u] for v, u in sizes)
    phase = "installing" if "Installing collected packages" in text else "downloading"
    return f"{phase}: {collected}/{total} packages collected, {mb:,.0f} MB downloaded"


def ensure_vllm_env(progress: Progress = print, progress_every_s: float = 30.0) -> Path:
    """Install the venv unless it is current; returns its python. Raises :class:`BuildError` loudly."""
    if is_ready():
        return env_python()
    target = env_dir()
    with _Lock(target.with_name(target.name + ".lock"), progress):
        if is_ready():
            return env_python()
        digest = lock_digest()
        total = sum(1 for line in LOCK_FILE.read_text().splitlines() if "==" in line and not line.startswith("#"))
        if target.exists():
            progress(f"[vllm] removing an incomplete or outdated venv at {target}")
            shutil.rmtree(target)
        log = logs_dir() / f"vllm-{VLLM_VERSION}.log"
        progress(f"[vllm] installing vllm=={VLLM_VERSION} and {total - 1} pinned dependencies into {target} "
                 f"(first time: ~4.6 GB download, ~9.4 GB disk, several minutes; log: {log})")
        started = time.monotonic()
        env = _subprocess_env()
        tmp = target.parent
        tmp.mkdir(parents=True, exist_ok=True)
        with log.open("w") as handle:
            for argv in (
                [_base_python(), "-m", "venv", str(target)],
                [str(env_python()), "-m", "pip", "install", "--no-cache-dir", "--progress-bar", "off",
                 "--require-hashes", "--no-deps", "-r", str(LOCK_FILE)],
            ):
                handle.write(f"$ {' '.join(argv)}\n")
                handle.flush()
                offset = log.stat().st_size
                proc = subprocess.Popen(argv, cwd=tmp, env=env, stdout=handle, stderr=subprocess.STDOUT)
                last = time.monotonic()
                while proc.poll() is None:
                    time.sleep(1.0)
                    if "pip" in argv and time.monotonic() - last >= progress_every_s:
                        last = time.monotonic()
                        progress(f"[vllm] {_pip_progress(log, offset, total)}, {last - started:.0f} s")
                if proc.returncode != 0:
                    tail = log.read_text(errors="replace")[-3000:]
                    raise BuildError(f"vllm env: `{' '.join(argv)}` exited {proc.returncode}; log {log}:\n{tail}")
        check = subprocess.run([str(env_python()), "-c", "import vllm, sys; sys.stdout.write(vllm.__version__)"],
                               cwd=tmp, env=env, capture_output=True, text=True)
        if check.returncode != 0 or check.stdout.strip() != VLLM_VERSION:
            raise BuildError(f"vllm env: `import vllm` failed or reported {check.stdout.strip()!r}:\n"
                             f"{check.stderr[-3000:]}")
        (target / STAMP).write_text(digest + "\n")
        progress(f"[vllm] ready in {time.monotonic() - started:.0f} s: {env_python()}")
    return env_python()


def locate_vllm_python() -> Path:
    """The venv's python without installing; raises :class:`BuildError` saying how to get it."""
    if not is_ready():
        raise BuildError(f"the vLLM {VLLM_VERSION} environment is not installed at {env_dir()}: run `make vllm-env` "
                         "(kvplan-dev tools ensure --vllm)")
    return env_python()
