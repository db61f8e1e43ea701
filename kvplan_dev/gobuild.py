"""Go builds of the control-plane binaries from the Go module proxy, cached under ``~/.cache/kvplan/<version>/``.

kube-apiserver: ``k8s.io/kubernetes`` cannot be ``go install``ed (its go.mod replaces every ``k8s.io/<staging>``
module with ``./staging/...``), so we build the wrapper in ``gobuild/apiserver`` whose go.mod requires
``k8s.io/kubernetes vX.Y.Z`` and replaces each staging module with its published ``v0.Y.Z``. The replace list is
generated from k/k's own go.mod, so a version bump is one constant in :mod:`kvplan_dev.tools`.

Builds run with ``-v`` into a log file; a progress line (packages compiled / total, elapsed) is printed every
``progress_every_s`` seconds. A file lock serialises concurrent builds of the same binary; the binary is moved
into place only when the build succeeded, so a half-built binary is never used.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import time
from importlib import resources
from pathlib import Path
from typing import Callable

Progress = Callable[[str], None]

GO_FALLBACK = Path("/usr/local/go/bin/go")
_STAGING = re.compile(r"^\s*(k8s\.io/[A-Za-z0-9._-]+)\s*=>\s*\./staging/", re.MULTILINE)


class BuildError(RuntimeError):
    """A build failed; the message carries the command and the tail of the log."""


def find_go() -> Path:
    """The ``go`` binary: on PATH, else ``/usr/local/go/bin/go``."""
    found = shutil.which("go")
    if found:
        return Path(found)
    if GO_FALLBACK.exists():
        return GO_FALLBACK
    raise BuildError("go: not found on PATH nor at /usr/local/go/bin/go (needed to build kube-apiserver)")


def go_env() -> dict[str, str]:
    """Environment for go: the module and build caches stay in their usual shared places (``~/go/pkg/mod``,
    ``~/.cache/go-build``) so every checkout reuses them; ``GOTOOLCHAIN=local`` forbids toolchain downloads."""
    env = dict(os.environ)
    go = find_go()
    env["PATH"] = f"{go.parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("GOPATH", str(Path.home() / "go"))
    env.setdefault("GOCACHE", str(Path.home() / ".cache" / "go-build"))
    env["GOTOOLCHAIN"] = "local"
    env["GOFLAGS"] = " ".join(sorted(set(env.get("GOFLAGS", "").split()) | {"-buildvcs=false"}))
    env["CGO_ENABLED"] = "0"
    return env


def _run_logged(argv: list[str], cwd: Path, log: Path, label: str, progress: Progress, total: int = 0,
                progress_every_s: float = 30.0, extra_env: dict[str, str] | None = None) -> None:
    """Run ``argv`` appending stdout+stderr to ``log``; print progress; raise BuildError with the log tail."""
    started = time.monotonic()
    with log.open("a") as handle:
        handle.write(f"\n$ (cd {cwd} && {' '.join(argv)})\n")
        handle.flush()
        proc = subprocess.Popen(argv, cwd=cwd, env={**go_env(), **(extra_env or {})}, 
                                stdout=handle, stderr=subprocess.STDOUT)
        offset = log.stat().st_size
        compiled = 0
        last = started
        while proc.poll() is None:
            time.sleep(1.0)
            if time.monotonic() - last >= progress_every_s:
                with log.open() as reader:
                    reader.seek(offset)
                    chunk = reader.read()
                    offset = reader.tell()
                compiled += sum(1 for line in chunk.splitlines() if line and not line.startswith(("go:", "#", "$")))
                of = f"/{total}" if total else ""
                progress(f"[{label}] {compiled}{of} packages, {time.monotonic() - started:.0f} s (log: {log})")
                last = time.monotonic()
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise BuildError(f"{label}: `{' '.join(argv)}` in {cwd} exited {proc.returncode}; log {log}:\n{tail}")


class _Lock:
    """An exclusive ``flock`` on ``path`` for the duration of a ``with`` block."""

    def __init__(self, path: Path, progress: Progress | None = None) -> None:
        self.path = path
        self.progress = progress
        self.handle: int | None = None

    def __enter__(self) -> "_Lock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if self.progress is not None:
                self.progress(f"waiting for a concurrent build to finish (lock {self.path}) ...")
            fcntl.flock(self.handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            os.close(self.handle)


def _package_dir(name: str) -> Path:
    return Path(str(resources.files("kvplan_dev") / "gobuild" / name))


def apiserver_gomod(version: str, go: Path) -> str:
    """The wrapper's go.mod for ``k8s.io/kubernetes@version``, replacing each staging module with v0.<minor>."""
    info = subprocess.run(
        [str(go), "mod", "download", "-json", f"k8s.io/kubernetes@{version}"],
        env=go_env(), capture_output=True, text=True, check=False,
    )
    if info.returncode != 0:
        raise BuildError(f"k8s.io/kubernetes@{version}: go mod download failed:\n{info.stdout}{info.stderr}")
    gomod_text = Path(json.loads(info.stdout)["GoMod"]).read_text()
    staging = sorted(set(_STAGING.findall(gomod_text)))
    if not staging:
        raise BuildError(f"k8s.io/kubernetes@{version}: no ./staging replace directives found in its go.mod")
    go_line = re.search(r"^go (\S+)$", gomod_text, re.MULTILINE)
    staged = "v0." + version.split(".", 1)[1]
    lines = ["module kvplan.dev/kube-apiserver", "", f"go {go_line.group(1) if go_line else '1.24'}", "",
             f"require k8s.io/kubernetes {version}", "", "replace ("]
    lines += [f"\t{module} => {module} {staged}" for module in staging]
    lines += [")", ""]
    return "\n".join(lines)


def build_apiserver(version: str, dest: Path, logs: Path, progress: Progress) -> Path:
    """Build kube-apiserver ``version`` (e.g. ``v1.37.2``) to ``dest`` unless it is already there."""
    return _build_kube("kube-apiserver", ".", version, dest, logs, progress,
                       "cold: tens of minutes on 2 cores")


KUBE_COMPONENTS = ("kube-controller-manager", "kube-scheduler")
"""The other control-plane commands of ``k8s.io/kubernetes`` the twin runs, each a ``main`` package of the
apiserver's wrapper module (``gobuild/apiserver/<component>/main.go``), so all share its go.mod and build cache."""


def build_kube_component(component: str, version: str, dest: Path, logs: Path, progress: Progress) -> Path:
    """Build ``component`` (one of :data:`KUBE_COMPONENTS`) of ``k8s.io/kubernetes@version`` to ``dest`` unless
    it is there, from the wrapper module staged as for kube-apiserver (it holds every component's main; the pinned
    go.mod/go.sum cover them all, and ``go mod tidy`` resolves from the same k/k go.mod otherwise)."""
    if component not in KUBE_COMPONENTS:
        raise BuildError(f"{component}: not one of {KUBE_COMPONENTS}")
    return _build_kube(component, f"./{component}", version, dest, logs, progress, "shared with kube-apiserver's cache")


def _build_kube(label: str, package: str, version: str, dest: Path, logs: Path, progress: Progress,
                note: str) -> Path:
    """``go build`` ``package`` of the staged wrapper module into ``dest`` (one lock for the module's directory)."""
    src = dest.parent / "src-apiserver"
    with _Lock(src.with_suffix(".lock"), progress):
        if dest.exists():
            return dest
        go = find_go()
        src.mkdir(parents=True, exist_ok=True)
        log = logs / f"build-{label}-{version}.log"
        _stage_wrapper("apiserver", src, f"k8s.io/kubernetes {version}", lambda: apiserver_gomod(version, go))
        progress(f"[{label} {version}] resolving modules (go mod tidy) ...")
        _run_logged([str(go), "mod", "tidy"], src, log, label, progress)
        total = _count_packages(go, src / package)
        progress(f"[{label} {version}] compiling {total} packages ({note}) ...")
        tmp = dest.with_name(dest.name + ".tmp")
        _run_logged([str(go), "build", "-v", "-trimpath", "-ldflags", _kube_ldflags(version), "-o", str(tmp),
                     package], src, log, label, progress, total)
        tmp.replace(dest)
        return dest


def _kube_ldflags(version: str) -> str:
    """``-s -w`` plus the version variables k/k's own build sets (``--version`` reports ``version``)."""
    minor = version.lstrip("v").split(".")[1]
    return " ".join([
        "-s -w",
        f"-X k8s.io/component-base/version.gitVersion={version}",
        f"-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor={minor}",
        "-X k8s.io/component-base/version.gitTreeState=clean",
        f"-X k8s.io/component-base/version.buildDate={time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
    ])


def build_go_main(label: str, module_path: str, version: str, dest: Path, logs: Path, progress: Progress,
                  extra_ldflags: str = "") -> Path:
    """``go install module_path@version`` into ``dest.parent``; for mains without replace directives (helm).
    ``extra_ldflags`` are appended to ``-s -w`` (helm's version variables, as its own Makefile sets them)."""
    with _Lock(dest.with_suffix(".lock"), progress):
        if dest.exists():
            return dest
        go = find_go()
        log = logs / f"build-{label}-{version}.log"
        gobin = dest.parent / "gobin.tmp"
        gobin.mkdir(parents=True, exist_ok=True)
        progress(f"[{label} {version}] go install {module_path}@{version} ...")
        ldflags = f"-s -w -X helm.sh/helm/v3/internal/version.version={version}" if label == "helm" else "-s -w"
        ldflags = f"{ldflags} {extra_ldflags}".strip()
        env_dir = dest.parent
        argv = [str(go), "install", "-v", "-trimpath", "-ldflags", ldflags, f"{module_path}@{version}"]
        with log.open("a") as handle:
            handle.write(f"GOBIN={gobin}\n")
        _run_logged(argv, env_dir, log, label, progress, extra_env={"GOBIN": str(gobin)})
        built = gobin / Path(module_path).name
        built.replace(dest)
        shutil.rmtree(gobin, ignore_errors=True)
        return dest


def build_etcd(version: str, dest: Path, logs: Path, progress: Progress) -> Path:
    """Build etcd ``version`` (3.5.x) from the wrapper in ``gobuild/etcd`` (it calls ``etcdmain.Main``)."""
    with _Lock(dest.with_suffix(".lock"), progress):
        if dest.exists():
            return dest
        go = find_go()
        src = dest.parent / "src-etcd"
        src.mkdir(parents=True, exist_ok=True)
        log = logs / f"build-etcd-{version}.log"
        _stage_wrapper("etcd", src, f"go.etcd.io/etcd/server/v3 {version}",
                       lambda: f"module kvplan.dev/etcd\n\ngo 1.22\n\nrequire go.etcd.io/etcd/server/v3 {version}\n")
        progress(f"[etcd {version}] resolving modules (go mod tidy) ...")
        _run_logged([str(go), "mod", "tidy"], src, log, "etcd", progress)
        tmp = dest.with_name(dest.name + ".tmp")
        _run_logged([str(go), "build", "-v", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp), "."],
                    src, log, "etcd", progress, _count_packages(go, src))
        tmp.replace(dest)
        return dest


def _stage_wrapper(name: str, src: Path, require: str, generated_gomod: Callable[[], str]) -> None:
    """Put the shipped wrapper ``gobuild/<name>/main.go`` in ``src`` with its pinned ``go.mod``/``go.sum`` when they
    pin ``require`` (``module version``), else a generated ``go.mod`` that ``go mod tidy`` completes."""
    shipped = _package_dir(name)
    shutil.copy(shipped / "main.go", src / "main.go")
    for sub in sorted(shipped.glob("*/main.go")):  # the other mains of the module (kube-controller-manager, ...)
        (src / sub.parent.name).mkdir(exist_ok=True)
        shutil.copy(sub, src / sub.parent.name / "main.go")
    pinned = shipped / "go.mod"
    if pinned.exists() and require in pinned.read_text():
        shutil.copy(pinned, src / "go.mod")
        if (shipped / "go.sum").exists():
            shutil.copy(shipped / "go.sum", src / "go.sum")
    else:
        (src / "go.mod").write_text(generated_gomod())


def _count_packages(go: Path, src: Path) -> int:
    """How many packages the build compiles (for the progress line); 0 if unknown."""
    out = subprocess.run([str(go), "list", "-deps", "."], cwd=src, env=go_env(), capture_output=True, text=True)
    return len(out.stdout.split()) if out.returncode == 0 else 0
