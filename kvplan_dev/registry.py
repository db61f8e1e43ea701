"""A local OCI registry on loopback: ``registry serve`` from github.com/distribution/distribution/v3 (built from its
Go module into ``~/.cache/kvplan/registry-<version>/``), plain HTTP on 127.0.0.1, filesystem storage in a folder the
caller chooses (so pushed images and charts outlive the process), deletes enabled.

crane and helm treat ``127.0.0.1:<port>`` as a plain-HTTP registry (helm needs ``--plain-http``).
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from types import TracebackType

from kvplan_dev.process import ManagedProcess, free_port, wait_until

CONFIG = """version: 0.1
log:
  level: info
  formatter: text
storage:
  filesystem:
    rootdirectory: {storage}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
"""


class LocalRegistry:
    """``with LocalRegistry(binary, storage, workdir) as reg: reg.host`` is ``127.0.0.1:<port>``."""

    def __init__(self, binary: Path, storage: Path, workdir: Path, ready_timeout_s: float = 60.0) -> None:
        self.binary = binary
        self.storage = storage
        self.workdir = workdir
        self.ready_timeout_s = ready_timeout_s
        self.port = 0
        self.proc: ManagedProcess | None = None

    @property
    def host(self) -> str:
        """``127.0.0.1:<port>``, the registry part of image and chart references."""
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> "LocalRegistry":
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> "LocalRegistry":
        """Write the config, start ``registry serve`` and wait until ``/v2/`` answers 200."""
        self.storage.mkdir(parents=True, exist_ok=True)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        config = self.workdir / "registry.yml"
        config.write_text(CONFIG.format(storage=self.storage, port=self.port))
        self.proc = ManagedProcess("registry", [str(self.binary), "serve", str(config)], self.workdir / "registry.log")

        def ready() -> bool:
            with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2) as response:
                return int(response.status) == 200

        try:
            wait_until(ready, timeout_s=self.ready_timeout_s, what=f"registry on {self.host}", proc=self.proc)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop exactly the process started here."""
        if self.proc is not None:
            self.proc.stop()
            self.proc = None

    def tags(self, repository: str) -> list[str]:
        """The tags of ``repository`` as the registry lists them (``/v2/<repo>/tags/list``)."""
        with urllib.request.urlopen(f"http://{self.host}/v2/{repository}/tags/list", timeout=10) as response:
            return list(json.load(response).get("tags") or [])
