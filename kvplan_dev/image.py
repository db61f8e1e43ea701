"""The operator image, built without a container engine: three reproducible layer tarballs and an image config.

Route (``make release``): a Debian bookworm root filesystem made by ``mmdebstrap --variant=extract`` with only
CPython 3.11 and what it links (no shell, no package manager configured, no maintainer scripts run); the runtime
dependencies pinned with their sha256 in ``requirements/operator.lock``, installed as manylinux wheels by pip into
``/opt/kvplan/lib``; the kvplan wheel (kvcore, kvplan_operator, kvplan_vllm; never kvplan_dev) on top. Each layer is
a gzipped tar written here with sorted entries, owner 0:0, one mtime (``SOURCE_DATE_EPOCH``, the commit time) and
``.pyc`` files in unchecked-hash mode, so the same commit, lock and Debian packages give the same bytes.
``crane`` (go-containerregistry, built from its Go module) appends the layers and sets the config
(:func:`config_flags`): entrypoint ``python3.11 -m kvplan_operator.main`` in exec form (no shell is needed to start
it, and there is none in the image), user ``10001:10001``, the OCI labels of :func:`oci_labels`.

Why not buildah/podman: the Dockerfile's base (``python:3.11-slim``) comes from Docker Hub, which this machine
cannot reach, so the base has to come from Debian's archive either way; buildah would then need a working OCI
runtime for each ``RUN`` step, which this sandbox only offers with runc and lowered rlimits (crun refuses:
"cgroups in hybrid mode not supported"); and its layers carry build-time mtimes. Plain tar files need none of that.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Callable, Iterable

import kvcore
from kvplan_dev.locks import OPERATOR_LOCK, read_lock

Progress = Callable[[str], None]

DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ("python3.11-minimal", "libpython3.11-stdlib", "libstdc++6")
"""What mmdebstrap extracts (with their dependencies): the interpreter, its standard library and the C++ runtime
that manylinux wheels may link (numpy, scipy, highspy need libstdc++.so.6); nothing else."""
PYTHON = "/usr/bin/python3.11"
PYTHON_VERSION = "3.11"
SITE = "/opt/kvplan/lib"
UID = 10001
USER = f"{UID}:{UID}"
ENTRYPOINT = (PYTHON, "-m", "kvplan_operator.main")
ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "PYTHONPATH": SITE,
    "PYTHONSAFEPATH": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    "MPLCONFIGDIR": "/tmp/matplotlib",
    "HOME": "/tmp",
}
PORTS = ("8080/tcp", "8081/tcp")
"""Metrics (chart default 8080) and kopf's liveness endpoint (chart default 8081)."""
SOURCE_URL = "https://github.com/kvplan/kvplan"
LICENSE = "Apache-2.0"
WHEEL_PLATFORMS = tuple(f"manylinux_2_{minor}_x86_64" for minor in range(36, 4, -1)) + (
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64")
"""Bookworm's glibc is 2.36, so every manylinux tag up to 2.36 runs (pip expands none of them by itself)."""
DROP_PREFIXES = ("dev/", "usr/share/doc/", "usr/share/man/", "usr/share/info/", "usr/share/locale/",
                 "usr/share/lintian/", "usr/share/bug/", "var/cache/apt/", "var/lib/apt/", "var/log/",
                 "var/lib/dpkg/", "etc/apt/")
"""Left out of the base layer: documentation, translations, apt/dpkg state (the image has no package manager run)."""
SHELLS = ("bin/sh", "bin/bash", "bin/dash", "usr/bin/sh", "usr/bin/bash", "usr/bin/dash", "bin/busybox")


class ImageError(RuntimeError):
    """A step of the image build failed; the message names the step and the command's output tail."""


def oci_labels(revision: str, version: str = kvcore.__version__) -> dict[str, str]:
    """The image's ``org.opencontainers.image.*`` labels; the version is kvcore's, the revision the git commit."""
    return {
        "org.opencontainers.image.title": "kvplan-operator",
        "org.opencontainers.image.description": "Distributionally robust KV-cache, layout and routing planner for "
                                                "vLLM fleets (kopf operator)",
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.revision": revision,
        "org.opencontainers.image.source": SOURCE_URL,
        "org.opencontainers.image.licenses": LICENSE,
        "org.opencontainers.image.base.name": f"debian:{DEBIAN_SUITE} (mmdebstrap: {', '.join(BASE_PACKAGES)})",
    }


def config_flags(revision: str) -> list[str]:
    """``crane mutate`` flags that turn the appended layers into the runnable image."""
    flags = ["--set-platform", "linux/amd64", "--user", USER, "--workdir", "/",
             "--entrypoint", ",".join(ENTRYPOINT), "--cmd", ""]
    for key, value in ENV.items():
        flags += ["--env", f"{key}={value}"]
    for key, value in oci_labels(revision).items():
        flags += ["--label", f"{key}={value}"]
    flags += ["--exposed-ports", ",".join(PORTS)]
    return flags


def _run(argv: list[str], step: str, *, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-30:])
        raise ImageError(f"{step}: `{' '.join(argv[:6])} ...` exited {done.returncode}:\n{tail}")
    return done.stdout


def _tarinfo(path: Path, arcname: str, epoch: int) -> tarfile.TarInfo:
    st = path.lstat()
    info = tarfile.TarInfo(arcname)
    info.mtime = epoch
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        info.type = tarfile.SYMTYPE
        info.linkname = os.readlink(path)
    elif stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    elif stat.S_ISREG(st.st_mode):
        info.size = st.st_size
    else:
        raise ImageError(f"layer: {path} is neither a file, a directory nor a symlink")
    return info


def write_layer(root: Path, out: Path, epoch: int, extra: Iterable[tuple[tarfile.TarInfo, bytes]] = ()) -> Path:
    """``root``'s tree as a deterministic ``.tar.gz`` (sorted, 0:0, mtime ``epoch``), plus ``extra`` entries."""
    paths = sorted(p for p in root.rglob("*"))
    with out.open("wb") as handle, gzip.GzipFile(filename="", fileobj=handle, mode="wb", mtime=0, compresslevel=6) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        added: set[str] = set()
        for path in paths:
            arcname = path.relative_to(root).as_posix()
            info = _tarinfo(path, arcname, epoch)
            added.add(arcname)
            if info.isreg():
                with path.open("rb") as source:
                    tar.addfile(info, source)
            else:
                tar.addfile(info)
        for info, data in extra:
            if info.name in added:
                raise ImageError(f"layer: {info.name} would be written twice")
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return out


def _file(name: str, text: str, epoch: int, mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), epoch, mode
    return info, data


def _dir(name: str, epoch: int, mode: int) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.mtime, info.mode = tarfile.DIRTYPE, epoch, mode
    return info, b""


def compile_pyc(tree: Path, recorded_as: str) -> None:
    """Byte-compile ``tree`` with a CPython 3.11 (the image's version) in unchecked-hash mode: no mtimes in the
    ``.pyc`` files, and the read-only root filesystem never needs a cache write at start-up."""
    python = shutil.which(f"python{PYTHON_VERSION}") or sys.executable
    _run([python, "-m", "compileall", "-q", "-j0", "--invalidation-mode", "unchecked-hash", "-d", recorded_as,
          str(tree)], f"compileall {recorded_as}")


def base_layer(work: Path, out: Path, epoch: int, progress: Progress) -> Path:
    """The Debian root filesystem (mmdebstrap) without documentation, apt/dpkg state or any shell, plus
    ``/etc/passwd`` and ``/etc/group`` naming uid/gid 10001 and a world-writable sticky ``/tmp``."""
    rootfs_tar = work / "debian-rootfs.tar"
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch)}
    progress(f"[image] mmdebstrap --variant=extract {DEBIAN_SUITE}: {', '.join(BASE_PACKAGES)} ...")
    _run(["mmdebstrap", "--quiet", "--variant=extract", f"--include={','.join(BASE_PACKAGES)}", "--format=tar",
          DEBIAN_SUITE, str(rootfs_tar), DEBIAN_MIRROR], "mmdebstrap", env=env)
    root = work / "base"
    root.mkdir()
    with tarfile.open(rootfs_tar) as tar:
        members = []
        for member in tar.getmembers():
            name = member.name.removeprefix("./")
            if not name or name == "." or any((name + "/").startswith(p) for p in DROP_PREFIXES):
                continue
            if member.ischr() or member.isblk() or member.isfifo():
                continue
            member.name = name
            members.append(member)
        tar.extractall(root, members=members, filter="fully_trusted")
    shells = [s for s in SHELLS if (root / s).exists() or (root / s).is_symlink()]
    if shells:
        raise ImageError(f"base: the Debian extract contains shells {shells}; the image must not")
    if not (root / PYTHON.lstrip("/")).exists():
        raise ImageError(f"base: {PYTHON} missing from the Debian extract")
    compile_pyc(root / "usr/lib/python3.11", "/usr/lib/python3.11")
    passwd = f"root:x:0:0:root:/root:/usr/sbin/nologin\nkvplan:x:{UID}:{UID}:kvplan:/tmp:/usr/sbin/nologin\n"
    group = f"root:x:0:\nkvplan:x:{UID}:\n"
    for name in ("etc/passwd", "etc/group", "tmp"):
        target = root / name
        if target.is_dir():
            target.rmdir()
        elif target.exists():
            target.unlink()
    extra = [_file("etc/passwd", passwd, epoch), _file("etc/group", group, epoch), _dir("tmp", epoch, 0o1777)]
    return write_layer(root, out, epoch, extra)


def _locked_requirements(work: Path) -> Path:
    """``requirements/operator.lock`` reduced to the pins for CPython 3.11 on Linux (markers evaluated for the
    image, not for whatever Python runs the release), with their hashes."""
    from packaging.markers import Marker

    env = {"python_version": PYTHON_VERSION, "python_full_version": PYTHON_VERSION + ".2", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
           "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}
    lines = []
    for pin in read_lock(OPERATOR_LOCK):
        if pin.marker and not Marker(pin.marker).evaluate(env):
            continue
        lines.append(f"{pin.name}=={pin.version} " + " ".join(f"--hash=sha256:{h}" for h in pin.hashes))
    path = work / "image-requirements.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def _pip_target(requirements: list[str], target: Path, step: str) -> None:
    _run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", "--only-binary=:all:",
          *[f"--platform={tag}" for tag in WHEEL_PLATFORMS], "--implementation", "cp", "--python-version", PYTHON_VERSION,
          "--abi", "cp311", "--abi", "abi3", "--abi", "none", "--target", str(target), *requirements], step)


def deps_layer(work: Path, out: Path, epoch: int, progress: Progress) -> Path:
    """Every runtime dependency from the lock (hash-checked) as wheels for CPython 3.11 / manylinux x86_64."""
    progress(f"[image] pip: {OPERATOR_LOCK.name} (hash-checked wheels for CPython {PYTHON_VERSION}) ...")
    stage = work / "deps"
    target = stage / SITE.lstrip("/")
    _pip_target(["--require-hashes", "-r", str(_locked_requirements(work))], target, "pip install (lock)")
    _strip_bin(target)
    compile_pyc(target, SITE)
    return write_layer(stage, out, epoch)


def app_layer(wheel: Path, work: Path, out: Path, epoch: int, progress: Progress) -> Path:
    """The kvplan wheel itself (built from this checkout)."""
    progress(f"[image] the kvplan wheel {wheel.name} ...")
    stage = work / "app"
    target = stage / SITE.lstrip("/")
    _pip_target([str(wheel)], target, "pip install (kvplan wheel)")
    _strip_bin(target)
    compile_pyc(target, SITE)
    return write_layer(stage, out, epoch)


def _strip_bin(target: Path) -> None:
    """pip --target writes console scripts whose shebang names the build machine's Python (the image starts the
    operator with ``python3.11 -m`` instead), and a ``direct_url.json`` naming the path the wheel was installed from
    (which would make the layer depend on the build folder); both go, and RECORD forgets them."""
    shutil.rmtree(target / "bin", ignore_errors=True)
    for direct in target.glob("*.dist-info/direct_url.json"):
        record = direct.parent / "RECORD"
        direct.unlink()
        if record.exists():
            lines = record.read_text().splitlines(keepends=True)
            record.write_text("".join(line for line in lines if not line.startswith(
                f"{direct.parent.name}/direct_url.json,") and not line.startswith("../../bin/")))


def build_wheel(repo: Path, dest: Path) -> Path:
    """``pip wheel`` of this checkout (no dependencies, no build isolation: the locked setuptools)."""
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(dest),
          str(repo)], "pip wheel", env={**os.environ, "PYTHONSAFEPATH": "1"})
    wheels = sorted(dest.glob(f"kvplan-{kvcore.__version__}-*.whl"))
    if len(wheels) != 1:
        raise ImageError(f"pip wheel: expected one kvplan-{kvcore.__version__} wheel in {dest}, found {wheels}")
    return wheels[0]


def build_layers(repo: Path, out_dir: Path, epoch: int, progress: Progress) -> list[Path]:
    """The three layers (base, deps, app) as ``.tar.gz`` files in ``out_dir``, bottom first."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kvplan-image-") as tmp:
        work = Path(tmp)
        wheel = build_wheel(repo, out_dir)
        return [base_layer(work, out_dir / "layer-0-base.tar.gz", epoch, progress),
                deps_layer(work, out_dir / "layer-1-deps.tar.gz", epoch, progress),
                app_layer(wheel, work, out_dir / "layer-2-app.tar.gz", epoch, progress)]
