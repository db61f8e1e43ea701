"""Run the operator image on this machine with podman (Debian's package), as the chart runs it in a pod.

What this sandbox allows, found by trying (Debian 12, root, hybrid cgroup v1/v2 and no CAP_SYS_RESOURCE):

- crun, podman's default runtime here, refuses every container: first ``crun: setrlimit `RLIMIT_NOFILE`: Operation
  not permitted`` (podman asks for 1048576 open files, above the hard limit), and with lowered ``--ulimit`` values
  ``crun: cgroups in hybrid mode not supported, drop all controllers from cgroupv2``;
- ``runc`` (Debian's package) runs containers once ``--ulimit nofile`` and ``nproc`` stay within the current limits.

So the run uses ``podman --runtime runc`` with the process's own limits, host networking (the apiserver and
Prometheus listen on 127.0.0.1), a read-only root filesystem with a tmpfs ``/tmp`` and every capability dropped, as
the chart's securityContext does. The image's own user (10001) is kept.
"""

from __future__ import annotations

import resource
import shutil
import subprocess
from pathlib import Path

from kvplan_dev.process import ManagedProcess

RUNTIME = "runc"


class ContainerError(RuntimeError):
    """podman is missing or refused to run the image; the message carries its exact error."""


def podman() -> str:
    """The podman binary; raises naming the Debian packages when absent."""
    found = shutil.which("podman")
    if found is None or shutil.which(RUNTIME) is None:
        raise ContainerError("podman and runc are needed to run the image: apt-get install podman runc")
    return found


NPROC = 4096
"""Processes/threads per user inside the container. runc could not set this process's own nproc hard limit here
(96365: "error setting rlimit type 6: operation not permitted"); 4096 works and is far above what kopf starts."""


def limits_flags() -> list[str]:
    """``--ulimit`` values within this process's limits (podman's defaults exceed them, and nothing here may raise a
    hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = hard if hard != resource.RLIM_INFINITY else 1048576
    nofile = min(cap, 65536)
    nproc_hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nproc = NPROC if nproc_hard == resource.RLIM_INFINITY else min(NPROC, nproc_hard)
    return [f"--ulimit=nofile={nofile}:{nofile}", f"--ulimit=nproc={nproc}:{nproc}"]


def pull(image: str) -> None:
    """``podman pull`` from the loopback registry (plain HTTP: ``--tls-verify=false``), unless podman already holds
    that exact reference (a digest reference names the same bytes wherever they came from)."""
    if "@sha256:" in image and subprocess.run([podman(), "image", "exists", image], check=False).returncode == 0:
        return
    done = subprocess.run([podman(), "pull", "--quiet", "--tls-verify=false", image], capture_output=True, text=True,
                          timeout=600, check=False)
    if done.returncode != 0:
        raise ContainerError(f"podman pull {image}: exited {done.returncode}: {done.stderr.strip()}")


def run_argv(image: str, mounts: dict[Path, str], env: dict[str, str], args: list[str], name: str) -> list[str]:
    """The ``podman run`` command line (exec form: the image's entrypoint, no shell)."""
    argv = [podman(), "--runtime", RUNTIME, "run", "--rm", f"--name={name}", "--network=host", "--pull=never",
            "--read-only", "--tmpfs=/tmp:rw,size=64m,mode=1777", "--cap-drop=ALL",
            "--security-opt=no-new-privileges", *limits_flags()]
    for source, target in mounts.items():
        argv.append(f"--volume={source}:{target}:ro")
    for key, value in env.items():
        argv.append(f"--env={key}={value}")
    return [*argv, image, *args]


def operator_in_container(image: str, kubeconfig: Path, workdir: Path, args: list[str]) -> ManagedProcess:
    """Start the operator from ``image`` against the cluster of ``kubeconfig`` (its CA file is mounted at the same
    path); stopped like any :class:`ManagedProcess` (podman forwards SIGTERM and removes the container)."""
    pull(image)
    mounted = workdir / "container"
    mounted.mkdir(parents=True, exist_ok=True)
    config = mounted / "kubeconfig"
    config.write_text(kubeconfig.read_text())
    config.chmod(0o644)  # readable by the image's uid 10001
    mounts = {mounted: "/etc/kvplan"}
    import json

    for cluster in json.loads(config.read_text()).get("clusters", []):
        ca = cluster.get("cluster", {}).get("certificate-authority")
        if ca:
            mounts[Path(ca)] = ca
    env = {"KUBECONFIG": "/etc/kvplan/kubeconfig", "KVPLAN_TIMER_TICK_S": "10", "KVPLAN_BACKOFF_BASE_S": "10"}
    name = f"kvplan-operator-{workdir.name}-{abs(hash(str(workdir))) % 10**6}"
    return ManagedProcess("kvplan-operator (container)", run_argv(image, mounts, env, args, name),
                          workdir / "operator.log")
