"""``LocalCluster``: a real etcd + kube-apiserver on free loopback ports, with RBAC and ServiceAccount tokens.

No kubelet, controller-manager or scheduler (like controller-runtime's envtest): objects are stored, validated,
admitted, watched and authorised for real, but Deployments never get Pods. What it sets up, in a temp dir:

- a self-signed serving certificate for ``127.0.0.1``/``localhost`` (the kubeconfig trusts exactly it);
- a static admin token (user ``kvplan-admin`` in group ``system:masters``) via ``--token-auth-file``;
- a ServiceAccount signing key pair, so ``TokenRequest`` works and :meth:`service_account_kubeconfig` can act as a
  ServiceAccount under ``--authorization-mode=RBAC``;
- a kubeconfig at :attr:`LocalCluster.kubeconfig`.

``stop()`` ends exactly the PIDs it started and removes the temp dir. ``detach()`` leaves both running and
returns a JSON-ready state that :func:`stop_detached` accepts later (``kvplan-dev cluster down``).
"""

from __future__ import annotations

import json
import secrets
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Sequence

from kvplan_dev.process import ManagedProcess, ProcessRecord, free_port, stop_record, wait_until
from kvplan_dev.tools import Tools, binary_version, locate_tools

SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
"""The ``iss`` of ServiceAccount tokens; also the default API audience."""
ADMIN_USER = "kvplan-admin"


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)}: exited {done.returncode}: {done.stderr.strip()}")


def make_certs(directory: Path) -> None:
    """Write ``serving.crt/key`` (self-signed, SANs 127.0.0.1 and localhost, 1 year) and ``sa.key/pub``."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "serving.key", "-out", "serving.crt",
             "-days", "365", "-subj", "/CN=kvplan-dev-apiserver",
             "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", cwd=directory)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=directory)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)


def kubeconfig_text(server: str, ca_file: Path, user: str, token: str) -> str:
    """A one-cluster, one-user kubeconfig (JSON is valid YAML) trusting ``ca_file`` and sending ``token``."""
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "kvplan-dev",
        "clusters": [{"name": "kvplan-dev", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "kvplan-dev", "context": {"cluster": "kvplan-dev", "user": user}}],
    }
    return json.dumps(config, indent=2) + "\n"


class LocalCluster:
    """etcd + kube-apiserver on loopback; use as a context manager or call ``start()``/``stop()``."""

    def __init__(self, tools: Tools | None = None, workdir: Path | None = None, ready_timeout_s: float = 180.0,
                 extra_apiserver_args: tuple[str, ...] = (), die_with_parent: bool = True) -> None:
        """``workdir``: where certs, etcd data, logs and the kubeconfig go (default: a new temp dir, removed on
        stop). ``ready_timeout_s``: seconds to wait for etcd health and apiserver ``/readyz`` (cold start on two
        busy cores takes 5-40 s). ``die_with_parent``: the servers get SIGTERM if this Python process dies without
        stopping them; turn it off to :meth:`detach` them (``kvplan-dev cluster up``)."""
        self.tools = tools or locate_tools()
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="kvplan-cluster-"))
        self.ready_timeout_s = ready_timeout_s
        self.extra_apiserver_args = extra_apiserver_args
        self.die_with_parent = die_with_parent
        self.token = secrets.token_hex(16)
        self.kubeconfig = self.workdir / "kubeconfig"
        self.server = ""
        self.etcd_url = ""
        self.apiserver_version = ""
        self.etcd_version = ""
        self._procs: list[ManagedProcess] = []
        self.history: list[ProcessRecord] = []
        """Every process started by this object, for leak checks."""

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # -- start ---------------------------------------------------------------------------------------------------
    def start(self) -> "LocalCluster":
        """Start etcd, then kube-apiserver; wait until ``/readyz`` answers ``ok``. Cleans up if anything fails."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        make_certs(self.workdir)
        self.etcd_version = binary_version(self.tools.etcd)
        self.apiserver_version = binary_version(self.tools.kube_apiserver)
        self._start_etcd()
        self._start_apiserver()
        self.kubeconfig.write_text(kubeconfig_text(self.server, self.workdir / "serving.crt", ADMIN_USER, self.token))

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        argv = [str(self.tools.etcd), "--name", "kvplan-dev", "--data-dir", str(self.workdir / "etcd"),
                "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", f"kvplan-dev=http://127.0.0.1:{peer}",
                "--listen-metrics-urls", f"http://127.0.0.1:{free_port()}",
                "--log-level", "warn"]
        if not self.etcd_version.lstrip("v").startswith("3.4"):
            argv.append("--unsafe-no-fsync")  # 3.5+: tests need no durability, and fsync is slow on shared disks
        proc = ManagedProcess("etcd", argv, self.workdir / "etcd.log", die_with_parent=self.die_with_parent)
        self._procs.append(proc)
        self.history.append(proc.record)

        def healthy() -> bool:
            with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as resp:
                return b'"true"' in resp.read()

        wait_until(healthy, timeout_s=self.ready_timeout_s, what=f"etcd at {self.etcd_url}", proc=proc)

    def _start_apiserver(self) -> None:
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        wd = self.workdir
        (wd / "tokens.csv").write_text(f'{self.token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')
        argv = [str(self.tools.kube_apiserver),
                f"--etcd-servers={self.etcd_url}", "--bind-address=127.0.0.1", f"--secure-port={port}",
                "--advertise-address=127.0.0.1", f"--cert-dir={wd / 'certs'}",
                f"--tls-cert-file={wd / 'serving.crt'}", f"--tls-private-key-file={wd / 'serving.key'}",
                f"--token-auth-file={wd / 'tokens.csv'}", "--authorization-mode=RBAC",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={wd / 'sa.pub'}", f"--service-account-signing-key-file={wd / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true",
                "--endpoint-reconciler-type=none", "--v=1", *self.extra_apiserver_args]
        proc = ManagedProcess("kube-apiserver", argv, wd / "kube-apiserver.log",
                              die_with_parent=self.die_with_parent)
        self._procs.append(proc)
        self.history.append(proc.record)
        context = ssl.create_default_context(cafile=str(wd / "serving.crt"))

        def ready() -> bool:
            request = urllib.request.Request(f"{self.server}/readyz", headers={"Authorization": f"Bearer {self.token}"})
            with urllib.request.urlopen(request, timeout=5, context=context) as resp:
                return bool(resp.status == 200 and resp.read().strip() == b"ok")

        wait_until(ready, timeout_s=self.ready_timeout_s, what=f"kube-apiserver {self.server}/readyz", proc=proc,
                   every_s=0.5)

    # -- stop / detach -------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop the apiserver, then etcd (exactly the PIDs started here); remove the temp dir if we made it."""
        for proc in reversed(self._procs):
            proc.stop()
        self._procs.clear()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def detach(self) -> dict[str, Any]:
        """Leave everything running; return the state that :func:`stop_detached` needs (and the CLI prints)."""
        records = [proc.detach().to_json() for proc in self._procs]
        self._procs.clear()
        return {**self.info(), "workdir": str(self.workdir), "remove_workdir": self._own_workdir,
                "processes": records}

    def info(self) -> dict[str, str]:
        """kubeconfig, server and versions, as strings."""
        return {"kubeconfig": str(self.kubeconfig), "server": self.server, "apiserver_version": self.apiserver_version,
                "etcd_version": self.etcd_version, "etcd_url": self.etcd_url}

    @property
    def pids(self) -> list[int]:
        """PIDs of the running processes started here."""
        return [proc.record.pid for proc in self._procs if proc.poll() is None]

    # -- ServiceAccounts -----------------------------------------------------------------------------------------
    def kubectl(self, *args: str, kubeconfig: Path | None = None, check: bool = True,
                input_text: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster (admin unless ``kubeconfig`` is given); raises with stderr on error."""
        argv = [str(self.tools.kubectl), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args]
        done = subprocess.run(argv, capture_output=True, text=True, input=input_text, timeout=120)
        if check and done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: exited {done.returncode}: {done.stderr.strip()}")
        return done

    def wait_established(self, crds: Sequence[str], timeout_s: float = 120.0) -> None:
        """Wait until every CRD (``plural.group``) is ``Established=True`` *and* its resource answers a LIST.

        ``kubectl wait --for=condition=Established`` is not used: right after an apply it fails with "accessor
        error" while the CRD has no conditions yet. And Established alone is not enough: the apiserver's handler for
        the new resource may answer 404 for a moment after the condition is set, so a watch opened then fails.
        ``timeout_s`` bounds the wait for the condition; it is not a measurement."""
        deadline = time.monotonic() + timeout_s
        for name in crds:
            while True:
                got = self.kubectl("get", "crd", name, "-o", "json", check=False)
                established = got.returncode == 0 and any(
                    c.get("type") == "Established" and c.get("status") == "True"
                    for c in (json.loads(got.stdout).get("status") or {}).get("conditions") or [])
                if established and self.kubectl("get", name, "--all-namespaces", "-o", "name",
                                                check=False).returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"CRD {name} not Established and served after {timeout_s:.0f} s: "
                                       f"{got.stdout.strip()[-500:]} {got.stderr.strip()[-500:]}")
                time.sleep(0.2)

    def service_account_token(self, namespace: str, name: str, duration_s: int = 3600) -> str:
        """A TokenRequest token for ServiceAccount ``namespace/name`` (created if missing), valid ``duration_s``."""
        exists = self.kubectl("-n", namespace, "get", "serviceaccount", name, check=False)
        if exists.returncode != 0:
            self.kubectl("-n", namespace, "create", "serviceaccount", name)
        return self.kubectl("-n", namespace, "create", "token", name, f"--duration={duration_s}s").stdout.strip()

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path | None = None) -> Path:
        """Write a kubeconfig that authenticates as ServiceAccount ``namespace/name`` (RBAC applies to it)."""
        path = path or self.workdir / f"kubeconfig-sa-{namespace}-{name}"
        user = f"system:serviceaccount:{namespace}:{name}"
        token = self.service_account_token(namespace, name)
        path.write_text(kubeconfig_text(self.server, self.workdir / "serving.crt", user, token))
        return path


def stop_detached(state: dict[str, Any]) -> list[str]:
    """Stop the processes of a :meth:`LocalCluster.detach` state (apiserver first); return what was stopped."""
    stopped: list[str] = []
    for data in reversed(state.get("processes", [])):
        record = ProcessRecord.from_json(data)
        if stop_record(record):
            stopped.append(f"{record.name} (pid {record.pid})")
    if state.get("remove_workdir") and state.get("workdir"):
        time.sleep(0.1)
        shutil.rmtree(state["workdir"], ignore_errors=True)
    return stopped
