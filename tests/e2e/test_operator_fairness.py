"""A slow Prometheus in one namespace does not hold back another namespace's re-plans (issue 26, item 3): the real
``kvplan-operator`` process on the real control plane. Namespace A has six KVPlans whose Prometheus paces every byte
below the read timeout (``timeoutSeconds: 60``, so each request lasts a minute); namespace B has one healthy KVPlan
(real backfilled Prometheus, ``replan.interval: 10s``). Before issue 26 the six held all of kopf's workers
(``min(32, cpus + 4)`` = 6 here) and B made no re-plan. Now namespace A has at most ``--namespace-concurrency`` (2)
requests in flight, and B's timer re-plans go on: counted in B's own re-plans, not in seconds (the wait bounds are
against a hang, far above what the re-plans take)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from operator_world import apply_crds, backfill, create_kvplan, kvplan_spec, setup
from slow_server import slow_prometheus
from operator_kopf_world import ready, wait_for

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


def test_six_slow_kvplans_do_not_stop_another_namespace(cluster, kube_api, namespace, prometheus, traces_dir,
                                                        tmp_path):
    from kubernetes import client

    from kvplan_operator.kube import Kube

    apply_crds(cluster, REPO / "crds")
    kube = Kube(kube_api)
    slow_ns = namespace + "-slow"
    client.CoreV1Api(kube_api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=slow_ns)))
    backfill(prometheus, traces_dir)
    healthy = kvplan_spec(prometheus.url)
    healthy["replan"] = {"interval": "10s"}
    with slow_prometheus("status-line", pause=0.2, duration=600.0) as slow:
        spec = kvplan_spec(slow.url)
        spec["prometheus"]["timeoutSeconds"] = 60
        setup(kube_api, slow_ns, spec)
        for i in range(5):
            create_kvplan(kube_api, slow_ns, spec, name=f"slow-{i}")
        env = dict(os.environ, PYTHONSAFEPATH="1", KUBECONFIG=str(cluster.kubeconfig), KVPLAN_TIMER_TICK_S="2",
                   KVPLAN_BACKOFF_BASE_S="2")
        exe = str(Path(sys.executable).parent / "kvplan-operator")
        log_path = tmp_path / "operator.log"
        with log_path.open("w") as log:
            proc = subprocess.Popen([exe, "--namespace", slow_ns, "--namespace", namespace, "--standalone",
                                     "--metrics-port", "0"], stdout=log, stderr=subprocess.STDOUT, env=env,
                                    cwd=tmp_path)
            try:
                wait_for(lambda: slow.in_flight >= 2, 180, "namespace A's requests in flight")
                setup(kube_api, namespace, healthy)  # B's KVPlan arrives while A holds its slots
                wait_for(lambda: ready(kube, namespace), 180, "B's KVPlan Ready while A hangs")
                seen = kube.get_kvplan(namespace, "fleet")["status"]["lastPlanTime"]
                for _ in range(2):
                    wait_for(lambda: (t := kube.get_kvplan(namespace, "fleet")["status"]["lastPlanTime"]) != seen
                             and t, 180, "a timer re-plan of B")
                    seen = kube.get_kvplan(namespace, "fleet")["status"]["lastPlanTime"]
                in_flight, peak = slow.in_flight, slow.peak_in_flight
            finally:
                proc.terminate()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        text = log_path.read_text()
    print(f"\nnamespace A: {peak} requests in flight at most ({in_flight} at the end); B re-planned twice")
    assert peak <= 2, f"namespace A had {peak} requests in flight (limit 2)\n{text[-3000:]}"
    assert in_flight >= 1, "namespace A's slow requests had ended: the test proved nothing"
    assert "NamespaceBusy" in text, text[-3000:]
