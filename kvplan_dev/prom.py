"""``LocalPrometheus``: Debian's Prometheus 2.42 on a free loopback port, with history backfilled by promtool.

History is written as OpenMetrics (:mod:`kvplan_dev.openmetrics`) and turned into TSDB blocks with
``promtool tsdb create-blocks-from openmetrics``; Prometheus runs with ``--storage.tsdb.retention.time=100y``
so old blocks are never deleted. Blocks are loaded when Prometheus opens its data dir, so :meth:`backfill` on a
running server restarts it on the same port (about a second). The remote-write receiver is enabled too.

As teams run it: ``tls`` (a server certificate and key, :mod:`kvplan_dev.certs`) and ``basic_auth`` (user ->
password) are written to a ``--web.config.file`` (Prometheus >= 2.24 reads TLS and bcrypt-hashed basic-auth users
from it); the URL becomes ``https://`` and the readiness probe authenticates.
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
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

from kvplan_dev.openmetrics import (
    VLLM_COLON, AnySeries, HistogramSeries, SeriesStats, TraceRow, Window, build_1_2_5_buckets, read_trace,
    write_openmetrics,
)
from kvplan_dev.process import ManagedProcess, ProcessRecord, free_port, stop_record, wait_until
from kvplan_dev.certs import ServerCert
from kvplan_dev.gobuild import BuildError
from kvplan_dev.tools import PROMETHEUS, PROMTOOL, Tools, binary_version

CONFIG = "global:\n  scrape_interval: 15s\n  evaluation_interval: 15s\nscrape_configs: []\n"
"""No scrape targets: every sample comes from backfill or remote write."""


def bcrypt_hash(password: str) -> str:
    """A bcrypt (``$2b$``, cost 10) hash of ``password``, as Prometheus' web config wants, from the system's
    libcrypt (Debian's libxcrypt implements bcrypt; Python's ``crypt`` module is gone in 3.13)."""
    name = ctypes.util.find_library("crypt")
    if name is None:
        raise BuildError("libcrypt not found (Debian: libcrypt1); needed to hash basic-auth passwords")
    lib = ctypes.CDLL(name)
    lib.crypt.restype = ctypes.c_char_p
    lib.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    alphabet = "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    salt = "$2b$10$" + "".join(secrets.choice(alphabet) for _ in range(22))
    out = lib.crypt(password.encode(), salt.encode())
    if not out or not out.startswith(b"$2b$"):
        raise BuildError("libcrypt has no bcrypt ($2b$); cannot hash basic-auth passwords")
    return str(out.decode())


class LocalPrometheus:
    """A Prometheus server on 127.0.0.1; use as a context manager or call ``start()``/``stop()``."""

    def __init__(self, tools: Tools | None = None, workdir: Path | None = None, ready_timeout_s: float = 60.0,
                 retention: str = "100y", die_with_parent: bool = True, tls: ServerCert | None = None,
                 basic_auth: dict[str, str] | None = None, config: str = CONFIG) -> None:
        """``workdir``: data dir, config and log (default: a new temp dir, removed on stop). ``retention``:
        ``--storage.tsdb.retention.time``; 100y keeps backfilled blocks of any age. ``die_with_parent``: see
        :class:`kvplan_dev.process.ManagedProcess` (off for ``kvplan-dev cluster up``). ``tls`` / ``basic_auth``
        (user -> password): served through ``--web.config.file`` (module docstring). ``config``: the whole
        ``prometheus.yml`` (default: no scrape targets; the twin's scrapes its Pods)."""
        self.config = config
        self.tls = tls
        self.basic_auth = dict(basic_auth or {})
        self.prometheus_bin = tools.prometheus if tools else PROMETHEUS
        self.promtool_bin = tools.promtool if tools else PROMTOOL
        for path in (self.prometheus_bin, self.promtool_bin):
            if not path.exists():
                raise BuildError(f"{path}: missing; run `make tools` (apt-get install prometheus)")
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="kvplan-prom-"))
        self.ready_timeout_s = ready_timeout_s
        self.retention = retention
        self.die_with_parent = die_with_parent
        self.port = 0
        self.url = ""
        self.version = ""
        self._proc: ManagedProcess | None = None
        self.history: list[ProcessRecord] = []
        """Every process started by this object (a backfill restart adds one), for leak checks."""

    def __enter__(self) -> "LocalPrometheus":
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    @property
    def data_dir(self) -> Path:
        """The TSDB directory."""
        return self.workdir / "data"

    def start(self) -> "LocalPrometheus":
        """Start (or restart, keeping the port) and wait until ``/-/ready``; cleans up if it fails."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_text(self.config)
        if not self.version:
            self.version = binary_version(self.prometheus_bin)
        self.port = self.port or free_port()
        scheme = "https" if self.tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        argv = [str(self.prometheus_bin), f"--config.file={config}", f"--storage.tsdb.path={self.data_dir}",
                f"--storage.tsdb.retention.time={self.retention}", f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-remote-write-receiver", "--log.level=warn"]
        web = self._web_config()
        if web is not None:
            argv.append(f"--web.config.file={web}")
        self._proc = ManagedProcess("prometheus", argv, self.workdir / "prometheus.log",
                                    die_with_parent=self.die_with_parent)
        self.history.append(self._proc.record)
        headers = {}
        if self.basic_auth:
            user, password = next(iter(self.basic_auth.items()))
            headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        context = None
        if self.tls is not None:  # the probe asks whether it is up, not whether its certificate is good
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE

        def ready() -> bool:
            request = urllib.request.Request(f"{self.url}/-/ready", headers=headers)
            with urllib.request.urlopen(request, timeout=2, context=context) as resp:
                return bool(resp.status == 200)

        wait_until(ready, timeout_s=self.ready_timeout_s, what=f"prometheus {self.url}/-/ready", proc=self._proc)

    def _web_config(self) -> Path | None:
        if self.tls is None and not self.basic_auth:
            return None
        lines = []
        if self.tls is not None:
            lines += ["tls_server_config:", f"  cert_file: {self.tls.cert}", f"  key_file: {self.tls.key}"]
        if self.basic_auth:
            lines.append("basic_auth_users:")
            lines += [f"  {user}: '{bcrypt_hash(password)}'" for user, password in self.basic_auth.items()]
        path = self.workdir / "web.yml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def stop(self, remove: bool = True) -> None:
        """Stop exactly the PID started here; remove the temp dir if we made it and ``remove`` is true."""
        if self._proc is not None:
            self._proc.stop()
            self._proc = None
        if remove and self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def detach(self) -> dict[str, Any]:
        """Leave it running; return the state :func:`stop_detached` needs."""
        records = [self._proc.detach().to_json()] if self._proc is not None else []
        self._proc = None
        return {"prometheus_url": self.url, "prometheus_version": self.version, "workdir": str(self.workdir),
                "remove_workdir": self._own_workdir, "processes": records}

    @property
    def pid(self) -> int | None:
        """PID of the running server, if any."""
        return self._proc.record.pid if self._proc is not None and self._proc.poll() is None else None

    def backfill(self, series: Sequence[AnySeries], window: Window) -> list[SeriesStats]:
        """Write ``series`` over ``window`` as OpenMetrics, create TSDB blocks with promtool, and (re)start
        Prometheus so it serves them. Returns per-series stats (kept/dropped observations, samples)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(exist_ok=True)
        source = self.workdir / f"backfill-{time.time_ns()}.om"
        with source.open("w") as out:
            stats = write_openmetrics(out, series, window)
        was_running = self._proc is not None
        if was_running:
            self.stop(remove=False)
        done = subprocess.run(
            [str(self.promtool_bin), "tsdb", "create-blocks-from", "openmetrics", str(source), str(self.data_dir)],
            capture_output=True, text=True, timeout=600,
        )
        if done.returncode != 0:
            raise RuntimeError(f"promtool create-blocks-from openmetrics {source}: exited {done.returncode}:\n"
                               f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
        source.unlink()
        if was_running:
            self.start()
        return stats


def series_from_trace(
    trace: Path | Sequence[TraceRow], *, labels: dict[str, str], window: Window, compression: float | None = None,
    metric: str = VLLM_COLON, reset_at_s: tuple[float, ...] = (), max_model_len: int = 8192, offset_s: float = 0.0,
) -> HistogramSeries:
    """One histogram series from a trace CSV (or rows). ``compression=None`` fits the trace's arrival span onto
    the window (to within 0.1 %; a 1 h trace over a 6 h window gives compression 1/6); buckets are vLLM's
    ``build_1_2_5_buckets(max_model_len)``."""
    rows = read_trace(trace) if isinstance(trace, Path) else list(trace)
    if not rows:
        raise ValueError(f"trace: no rows in {trace}")
    span = max(r.arrival_s for r in rows) - min(r.arrival_s for r in rows)
    if compression is None:
        # 0.1 % margin so float rounding never pushes the last arrival past the window end (it would be dropped).
        compression = span / ((window.duration_s - offset_s) * 0.999) if span > 0 else 1.0
    first = min(r.arrival_s for r in rows)
    return HistogramSeries(
        labels=labels, output_tokens=[r.output_tokens for r in rows], arrival_s=[r.arrival_s - first for r in rows],
        compression=compression, offset_s=offset_s, reset_at_s=reset_at_s,
        buckets=tuple(float(b) for b in build_1_2_5_buckets(max_model_len)), metric=metric,
    )


def stop_detached(state: dict[str, Any]) -> list[str]:
    """Stop a detached Prometheus by its recorded PID; remove its temp dir."""
    stopped: list[str] = []
    for data in state.get("processes", []):
        record = ProcessRecord.from_json(data)
        if stop_record(record):
            stopped.append(f"{record.name} (pid {record.pid})")
    if state.get("remove_workdir") and state.get("workdir"):
        shutil.rmtree(state["workdir"], ignore_errors=True)
    return stopped
