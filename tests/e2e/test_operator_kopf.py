"""The operator under kopf on the real local control plane and a real backfilled Prometheus:

- in-process with ``kopf.testing.KopfRunner``: a KVPlan becomes Ready and the Deployments carry the plan; more
  backfilled traffic -> the next **timer** re-plan changes the router weights; stopping and restarting the
  operator (resume) re-plans without touching any pod template or replica count (no rollout);
- two ``kvplan-operator`` processes with kopf peering (distinct priorities): only one acts, the other stays
  paused; when the active one stops, the standby takes over.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
import pytest
from operator_world import apply_crds, backfill, kvplan_spec, router_weights, setup
from operator_kopf_world import (REPO, operator_env, ready, wait_for)  # noqa: F401 - fixtures are found by name


pytestmark = pytest.mark.e2e


def test_kopf_runner_plans_replans_and_resumes(operator_env, kube_api, namespace, prometheus, traces_dir, caplog):
    import logging

    from kopf.testing import KopfRunner

    caplog.set_level(logging.INFO)

    from kvplan_operator.kube import Kube

    kube = Kube(kube_api)
    end = backfill(prometheus, traces_dir)
    spec = kvplan_spec(prometheus.url)
    spec["replan"] = {"interval": "10s"}  # the shortest interval the operator accepts
    setup(kube_api, namespace, spec)
    args = ["run", "-m", "kvplan_operator.handlers", "--namespace", namespace, "--standalone"]
    with KopfRunner(args, timeout=120) as runner:
        body = wait_for(lambda: ready(kube, namespace), 90, "KVPlan Ready")
        g = body["status"]["plan"]["groups"]["pool-a"]
        dep = kube.get_deployment(namespace, "vllm-a")
        vllm = dep["spec"]["template"]["spec"]["containers"][0]
        assert vllm["args"][vllm["args"].index("--tensor-parallel-size") + 1] == str(g["tp"])
        w0 = router_weights(kube, namespace)
        backfill(prometheus, traces_dir, burst=1, base=False, end=end)
        w1 = wait_for(lambda: (w := router_weights(kube, namespace)) != w0 and w, 90, "timer re-plan to move weights")
        assert w1 != w0
    assert runner.exception is None, runner.stdout
    assert runner.exit_code == 0, runner.stdout
    assert "reconcile (create)" in caplog.text and "reconcile (timer)" in caplog.text
    def pods(name: str) -> tuple:
        d = kube.get_deployment(namespace, name)
        return d["spec"]["template"], d["spec"].get("replicas")

    before = {d: pods(d) for d in ("vllm-a", "vllm-b")}
    first_plan_time = kube.get_kvplan(namespace, "fleet")["status"]["lastPlanTime"]
    with KopfRunner(args, timeout=120) as runner2:
        wait_for(lambda: kube.get_kvplan(namespace, "fleet")["status"]["lastPlanTime"] != first_plan_time, 60,
                 "a re-plan after restart")
    assert runner2.exception is None, runner2.stdout
    assert "reconcile (resume)" in caplog.text
    # The data moved on (windows shift with time), so annotations may be refreshed, but no pod template or
    # replica count changes: a restart causes no rollout.
    assert {d: pods(d) for d in ("vllm-a", "vllm-b")} == before


def test_two_replicas_only_one_acts(operator_env, kube_api, namespace, prometheus, traces_dir, tmp_path):
    """Priority 100 acts, priority 50 stays paused; when 100 stops, 50 takes over (a spec change reaches it)."""
    from kvplan_operator.kube import Kube

    kube = Kube(kube_api)
    backfill(prometheus, traces_dir)
    spec = kvplan_spec(prometheus.url)
    spec["replan"] = {"interval": "10s"}  # the standby's watch window is two of these re-plans
    setup(kube_api, namespace, spec)
    env = dict(os.environ, PYTHONSAFEPATH="1")
    exe = str(Path(sys.executable).parent / "kvplan-operator")
    procs: dict[int, tuple[subprocess.Popen, object]] = {}
    logs = {prio: tmp_path / f"op{prio}.log" for prio in (100, 50)}

    def stop(prio: int) -> None:
        proc, log = procs.pop(prio)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()

    from kvplan_dev.process import free_port

    metrics_port = free_port()
    try:
        for prio in (100, 50):
            log = logs[prio].open("w")
            port = metrics_port if prio == 100 else 0
            procs[prio] = (subprocess.Popen([exe, "--namespace", namespace, "--priority", str(prio),
                                             "--metrics-port", str(port), "--verbose"],
                                            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path), log)
            if prio == 100:  # the acting replica is in the peering object before the standby starts
                wait_for(lambda: "Keep-alive in" in logs[100].read_text(), 90, "priority 100 in the peering object")
        wait_for(lambda: ready(kube, namespace), 90, "KVPlan Ready under two replicas")
        wait_for(lambda: "Pausing the watch-stream for kvplans" in logs[50].read_text(), 90, "the standby to pause")
        # The window in which the paused replica could misbehave is counted in the acting replica's own timer
        # re-plans (two completed after the standby paused), not in seconds.
        seen = kube.get_kvplan(namespace, "fleet")["status"]["lastPlanTime"]
        for _ in range(2):
            wait_for(lambda: (t := kube.get_kvplan(namespace, "fleet")["status"]["lastPlanTime"]) != seen and t, 90,
                     "a timer re-plan by priority 100")
            seen = kube.get_kvplan(namespace, "fleet")["status"]["lastPlanTime"]
        high, low = logs[100].read_text(), logs[50].read_text()
        assert "KopfPeering" in high and "reconcile (create)" in high, high[-3000:]
        assert "reconcile (" not in low, low[-3000:]
        assert "Resuming operations" not in low, low[-3000:]
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as rsp:
            metrics = rsp.read().decode()
        assert f'kvplan_replans_total{{name="fleet",namespace="{namespace}"}}' in metrics
        assert "kvplan_solve_seconds_bucket" in metrics and "kvplan_objective" in metrics
        stop(100)
        kube.custom.patch_namespaced_custom_object("kvplan.io", "v1beta1", namespace, "kvplans", "fleet",
                                                   {"spec": {"replan": {"interval": "45s"}}})
        wait_for(lambda: "reconcile (update)" in logs[50].read_text(), 90, "the standby replica to take over")
    finally:
        for prio in list(procs):
            stop(prio)
    assert "Resuming operations" in logs[50].read_text()
