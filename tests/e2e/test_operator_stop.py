"""SIGTERM stops the operator promptly while a slow Prometheus holds its reconcile (issue 26, item 3): the real
``kvplan-operator`` process on the real control plane, one KVPlan whose Prometheus paces every byte below the read
timeout for 120 s, with ``timeoutSeconds: 60`` and ``--cycle-deadline 300`` (so neither limit ends the request);
once the request is in flight, SIGTERM. kopf's cleanup cuts the request (``deadline.stop_all``), the worker thread
ends its reconcile without writing, and the process exits: within 10 s (the target; without the cut the process
lived until the server stopped, 120 s)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from operator_world import apply_crds, kvplan_spec, setup
from slow_server import slow_prometheus

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
TARGET_S = 10.0


@pytest.mark.parametrize("behaviour", ["status-line", "body-content-length"])
def test_sigterm_during_a_slow_prometheus_request(cluster, kube_api, namespace, tmp_path, behaviour):
    apply_crds(cluster, REPO / "crds")
    with slow_prometheus(behaviour, pause=0.2, duration=120.0) as prom:
        spec = kvplan_spec(prom.url)
        spec["prometheus"]["timeoutSeconds"] = 60
        setup(kube_api, namespace, spec)
        env = dict(os.environ, PYTHONSAFEPATH="1", KUBECONFIG=str(cluster.kubeconfig))
        exe = str(Path(sys.executable).parent / "kvplan-operator")
        log_path = tmp_path / "operator.log"
        with log_path.open("w") as log:
            proc = subprocess.Popen([exe, "--namespace", namespace, "--standalone", "--metrics-port", "0",
                                     "--cycle-deadline", "300"], stdout=log, stderr=subprocess.STDOUT, env=env,
                                    cwd=tmp_path)
            try:
                assert prom.seen.wait(120), "the operator never asked Prometheus:\n" + log_path.read_text()[-3000:]
                t0 = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=110)
                except subprocess.TimeoutExpired:
                    pass
                took = time.monotonic() - t0
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        text = log_path.read_text()
        print(f"\n[{behaviour}] SIGTERM to exit: {took:.2f} s (rc {proc.returncode})")
        assert took < TARGET_S, f"the operator took {took:.1f} s to stop:\n{text[-3000:]}"
        assert proc.returncode == 0, text[-3000:]
        assert "OperatorStopping" in text, text[-3000:]
