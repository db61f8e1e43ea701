"""The node agent: the twin's stand-in for the kubelet on every twin node (dev/test tooling).

Each pass of its loop (every ``sync_s``) lists the Pods bound to its nodes and, per Pod:

1. **new**: gives it a loopback IP of its own (``127.x.y.z``; every Pod's server listens on its container port,
   as in a pod network), mounts its volumes (:mod:`.volumes`), resolves its environment (values, ``fieldRef``,
   ConfigMap and Secret keys) and starts its vLLM container as a real ``vllm serve`` on CPU (:mod:`.pod_command`,
   the step clock of the layout it asks for, :mod:`.step_clock`), in the cached vLLM environment's overlay;
2. **running**: probes the readiness probe's path (``/health``) on the Pod's IP; an exited server is restarted
   after the kubelet's back-off (doubling from ``backoff_s``), ``restartCount`` counting; ConfigMap volumes are
   re-synced every ``configmap_delay_s``;
3. **deleted** (``deletionTimestamp``): SIGTERM, at most the Pod's grace period (capped at ``max_grace_s``), then
   the final delete with grace 0 and the Pod's UID as precondition, as the kubelet does.

Status is written through ``pods/status`` only when it changed (:func:`.pod_status.status_key`). Ready Pods'
servers are Prometheus targets (:mod:`.scrape`). ``stop()`` stops every server it started.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import traceback
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from kvcore.profiles.models import CONFIGS

from kvplan_dev.process import ManagedProcess
from kvplan_dev.twin.pod_command import PodCommandError, ServeCommand, serve_command
from kvplan_dev.twin.pod_env import EnvNotReady, container_env
from kvplan_dev.twin.pod_ips import PodIps
from kvplan_dev.twin.pod_status import ContainerView, pod_status, status_key
from kvplan_dev.twin.scrape import ScrapeTargets
from kvplan_dev.twin.step_clock import ENV as CLOCK_ENV
from kvplan_dev.twin.step_clock import ClockSpec, StepClock
from kvplan_dev.twin.volumes import PodVolumes, VolumeNotReady
from kvplan_dev.vllm_cpu import EXECUTOR, write_model_dir
from kvplan_dev.vllm_overlay import vllm_env

BLOCK_SIZE = 16
"""vLLM's default KV block size on CUDA (``--block-size`` in the args overrides it)."""


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def catalogue_model(name: str, aliases: Mapping[str, str]) -> str:
    """The kvcore catalogue model a ``--model`` names: an alias, a catalogue name, or a catalogue entry's
    Hugging Face repository; :class:`PodCommandError` otherwise."""
    if name in aliases:
        return aliases[name]
    if name in CONFIGS:
        return name
    for catalogue_name, (repo, _) in CONFIGS.items():
        if repo == name:
            return catalogue_name
    raise PodCommandError(f"--model {name!r}: not a kvcore catalogue model, nor one of its Hugging Face repositories, "
                          "nor a twin alias; the step clock needs the model's shape")


@dataclass
class AgentConfig:
    """The agent's knobs (seconds unless named otherwise)."""

    python: Path
    """The interpreter of the vLLM environment's overlay (vLLM plus kvplan and kvplan-dev)."""
    workdir: Path
    nodes: dict[str, str]
    """Node name -> kvcore catalogue GPU type."""
    models: dict[str, str] = field(default_factory=dict)
    """``--model`` value -> kvcore catalogue model (besides the catalogue's own names and repositories)."""
    time_scale: float = 1.0
    kv_scale: float = 1.0
    sync_s: float = 0.5
    configmap_delay_s: float = 2.0
    backoff_s: float = 2.0
    max_backoff_s: float = 60.0
    max_grace_s: float = 30.0


@dataclass
class _Run:
    """One Pod the agent serves."""

    uid: str
    namespace: str
    name: str
    node: str
    ip: str
    start_time: str
    container: ContainerView
    volumes: PodVolumes
    command: ServeCommand | None = None
    process: ManagedProcess | None = None
    next_start: float = 0.0
    synced_at: float = 0.0
    written: tuple[Any, ...] = ()

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.command.port if self.command else 8000}"


class NodeAgent:
    """Serves the Pods bound to ``config.nodes`` until :meth:`stop`; ``api``: a ``kubernetes.client.CoreV1Api``."""

    def __init__(self, api: Any, config: AgentConfig, scrape: ScrapeTargets | None = None) -> None:
        self.api = api
        self.config = config
        self.scrape = scrape
        self.ips = PodIps()
        self.runs: dict[str, _Run] = {}
        self.errors: list[str] = []
        """Exceptions of the loop itself (a test asserts there are none)."""
        self.starts = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def start(self) -> "NodeAgent":
        self._thread = threading.Thread(target=self._loop, name="twin-node-agent", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the loop, then stop every server it started (SIGTERM, then SIGKILL)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        with self._lock:
            for run in list(self.runs.values()):
                self._kill(run)
            self.runs.clear()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync_once()
            except Exception:  # noqa: BLE001 - the agent keeps serving; the error is kept for the test to see
                self.errors.append(traceback.format_exc(limit=8))
            self._stop.wait(self.config.sync_s)

    # -- one pass --------------------------------------------------------------------------------------------------
    def sync_once(self) -> None:
        """One pass over the Pods bound to the agent's nodes."""
        pods = self._pods()
        with self._lock:
            seen = set()
            for pod in pods:
                uid = str(pod["metadata"]["uid"])
                seen.add(uid)
                if pod["metadata"].get("deletionTimestamp"):
                    self._terminate(pod)
                    continue
                run = self.runs.get(uid) or self._admit(pod)
                self._tick(run, pod)
            for uid in set(self.runs) - seen:  # deleted behind our back (force delete): stop its server
                self._kill(self.runs.pop(uid))

    def _pods(self) -> list[dict[str, Any]]:
        resp = self.api.list_pod_for_all_namespaces(_preload_content=False)
        items = json.loads(resp.data)["items"]
        return [p for p in items if p["spec"].get("nodeName") in self.config.nodes]

    def _read_configmap(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self._read("configmap", namespace, name)

    def _read(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        reader = self.api.read_namespaced_config_map if kind == "configmap" else self.api.read_namespaced_secret
        try:
            return json.loads(reader(name, namespace, _preload_content=False).data)  # type: ignore[no-any-return]
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _admit(self, pod: Mapping[str, Any]) -> _Run:
        meta, spec = pod["metadata"], pod["spec"]
        uid = str(meta["uid"])
        container = spec["containers"][0]
        workdir = self.config.workdir / "pods" / f"{meta['namespace']}_{meta['name']}_{uid[:8]}"
        run = _Run(uid, str(meta["namespace"]), str(meta["name"]), str(spec["nodeName"]), self.ips.allocate(),
                   now_rfc3339(), ContainerView(str(container["name"]), str(container.get("image", ""))),
                   PodVolumes(pod, workdir / "volumes", self._read_configmap))
        self.runs[uid] = run
        return run

    def _tick(self, run: _Run, pod: Mapping[str, Any]) -> None:
        c = run.container
        if run.process is not None and run.process.poll() is not None:
            code = run.process.poll() or 0
            run.process = None
            c.last_exit = (code, "Error" if code else "Completed", now_rfc3339())
            c.started_at, c.ready = None, False
            backoff = min(self.config.max_backoff_s, self.config.backoff_s * 2 ** c.restarts)
            c.waiting = ("CrashLoopBackOff", f"back-off {backoff:g}s restarting failed container={c.name} "
                         f"pod={run.name}")
            run.next_start = time.monotonic() + backoff
            c.restarts += 1
            if self.scrape is not None:
                self.scrape.remove(run.address)
        if run.process is None and time.monotonic() >= run.next_start:
            self._start(run, pod)
        elif run.process is not None:
            if time.monotonic() - run.synced_at >= self.config.configmap_delay_s:
                self._sync_volumes(run)
            c.ready = self._probe(run)
        self._write_status(run)

    def _sync_volumes(self, run: _Run) -> None:
        try:
            run.volumes.sync()
        except VolumeNotReady:
            pass  # a ConfigMap deleted under a running Pod: the kubelet keeps the last payload too
        run.synced_at = time.monotonic()

    def _start(self, run: _Run, pod: Mapping[str, Any]) -> None:
        container = pod["spec"]["containers"][0]
        try:
            run.volumes.sync()
            run.synced_at = time.monotonic()
            env = container_env(container, pod, run.ip, self._read)
            run.command = serve_command(container, run.volumes.mounts(container))
            argv, extra = self._argv(run, run.command, env)
        except (VolumeNotReady, EnvNotReady) as exc:
            run.container.waiting = ("ContainerCreating" if isinstance(exc, VolumeNotReady)
                                     else "CreateContainerConfigError", str(exc))
            run.next_start = time.monotonic() + self.config.backoff_s
            return
        except (PodCommandError, ValueError) as exc:
            run.container.waiting = ("CreateContainerError", str(exc))
            run.next_start = time.monotonic() + self.config.max_backoff_s
            return
        log = run.volumes.root.parent / f"vllm-serve-{run.container.restarts}.log"
        run.process = ManagedProcess(f"vllm-serve {run.namespace}/{run.name}", argv, log, env=vllm_env(extra))
        self.starts += 1
        run.container.started_at, run.container.waiting, run.container.ready = now_rfc3339(), None, False

    def _argv(self, run: _Run, cmd: ServeCommand, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        spec = ClockSpec(self.config.nodes[run.node], catalogue_model(cmd.model, self.config.models), cmd.tp, cmd.pp,
                         self.config.time_scale, self.config.kv_scale).fitted()
        max_len = cmd.max_model_len or 8192
        block = int(_flag(cmd.args, "--block-size") or BLOCK_SIZE)
        blocks = StepClock(spec).kv_blocks(block, max_len)
        model = write_model_dir(run.volumes.root.parent / "model", max_position_embeddings=max_len)
        argv = [str(self.config.python), "-c", "from vllm.entrypoints.cli.main import main; main()", "serve",
                str(model), *cmd.args, "--host", run.ip, "--skip-tokenizer-init", "--enforce-eager",
                "--num-gpu-blocks-override", str(blocks), "--distributed-executor-backend", EXECUTOR]
        return argv, {**{k: cmd.rewrite(v) for k, v in env.items()}, CLOCK_ENV: spec.to_env()}

    def _probe(self, run: _Run) -> bool:
        try:
            with urllib.request.urlopen(f"http://{run.address}/health", timeout=2) as resp:
                ok = bool(resp.status == 200)
        except OSError:
            ok = False
        if ok and self.scrape is not None:
            self.scrape.add(run.address, {"namespace": run.namespace, "pod": run.name,
                                          "container": run.container.name, "node": run.node})
        return ok

    def _write_status(self, run: _Run) -> None:
        status = pod_status(run.container, pod_ip=run.ip, host_ip="127.0.0.1", start_time=run.start_time,
                            now=now_rfc3339())
        key = status_key(status)
        if key == run.written:
            return
        self.api.patch_namespaced_pod_status(run.name, run.namespace, {"status": status})
        run.written = key

    def _terminate(self, pod: Mapping[str, Any]) -> None:
        from kubernetes.client import V1DeleteOptions, V1Preconditions
        from kubernetes.client.exceptions import ApiException

        uid = str(pod["metadata"]["uid"])
        run = self.runs.pop(uid, None)
        if run is not None:
            grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 30)
            self._kill(run, grace_s=min(grace, self.config.max_grace_s))
        try:
            self.api.delete_namespaced_pod(
                pod["metadata"]["name"], pod["metadata"]["namespace"],
                body=V1DeleteOptions(grace_period_seconds=0, preconditions=V1Preconditions(uid=uid)))
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise

    def _kill(self, run: _Run, grace_s: float = 10.0) -> None:
        if self.scrape is not None:
            self.scrape.remove(run.address)
        if run.process is not None:
            group = run.process.record.pid  # its own session: the API server and its engine core
            run.process.stop(grace_s=grace_s)
            run.process = None
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.ips.release(run.ip)


def _flag(args: tuple[str, ...], name: str) -> str | None:
    for i, token in enumerate(args[:-1]):
        if token == name:
            return args[i + 1]
    return None


__all__ = ["AgentConfig", "NodeAgent", "catalogue_model"]
