"""The shared world of ``test_operator_kopf.py`` and the tests that reuse it: the operator under kopf on the real local control plane and a real backfilled Prometheus:."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
import pytest
from operator_world import apply_crds, backfill, kvplan_spec, router_weights, setup


REPO = Path(__file__).resolve().parents[2]


def wait_for(predicate, timeout_s: float, what: str, step_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(step_s)
    pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what} (last: {last!r})")


@pytest.fixture
def operator_env(cluster, monkeypatch):
    apply_crds(cluster, REPO / "crds")
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    monkeypatch.setenv("KVPLAN_TIMER_TICK_S", "2")
    monkeypatch.setenv("KVPLAN_BACKOFF_BASE_S", "2")
    return cluster


def ready(kube, ns):
    body = kube.get_kvplan(ns, "fleet") or {}
    conds = {c["type"]: c for c in body.get("status", {}).get("conditions", [])}
    return conds.get("Ready", {}).get("status") == "True" and body
