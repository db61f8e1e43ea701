"""How Prometheus finds the twin's Pods: a ``file_sd_configs`` target file the node agent rewrites (atomically)
whenever a Pod's server starts or stops.

A cluster's Prometheus finds Pods with ``kubernetes_sd_configs`` (role ``pod``) and relabels the discovered
``__meta_kubernetes_*`` labels into ``namespace``, ``pod`` and ``container``; the twin gives each target exactly
those labels (and ``node``), so the series the operator reads carry the labels a Kubernetes scrape adds, with no
service discovery against the twin's apiserver.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Mapping

JOB = "kubernetes-pods"


def _duration(seconds: float) -> str:
    """A Prometheus duration (integer units only: ``1600ms``, not ``1.6s``)."""
    return f"{max(1, round(seconds * 1000))}ms"


def scrape_config(targets_file: Path, interval_s: float = 2.0) -> str:
    """The whole ``prometheus.yml``: one job reading ``targets_file``, scraped every ``interval_s``."""
    every, timeout = _duration(interval_s), _duration(max(1.0, interval_s * 0.8))
    return (f"global:\n  scrape_interval: {every}\n  evaluation_interval: {every}\n"
            f"scrape_configs:\n  - job_name: {JOB}\n    scrape_interval: {every}\n    scrape_timeout: {timeout}\n"
            f"    file_sd_configs:\n      - files: [{json.dumps(str(targets_file))}]\n        refresh_interval: 1s\n")


class ScrapeTargets:
    """The target file: one entry per serving Pod (``address`` -> its labels)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._targets: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()
        self._write()

    def add(self, address: str, labels: Mapping[str, str]) -> None:
        with self._lock:
            self._targets[address] = dict(labels)
            self._write()

    def remove(self, address: str) -> None:
        with self._lock:
            if self._targets.pop(address, None) is not None:
                self._write()

    def _write(self) -> None:
        entries = [{"targets": [address], "labels": labels} for address, labels in sorted(self._targets.items())]
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(entries, indent=1) + "\n")
        os.replace(tmp, self.path)


__all__ = ["JOB", "ScrapeTargets", "scrape_config"]
