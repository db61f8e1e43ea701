"""Peak RSS of a real ``kvplan-operator`` process with KVPlans at the caps at once (issue 26, item 4).

The local control plane (etcd + kube-apiserver on loopback), a scripted Prometheus on loopback that answers every
history range query at the caps (``kvplan_dev.prom_caps``: 1,024 values of the class label x 64 buckets x 48
windows = 65,536 series, 57 MiB), and ``kvplan-operator`` as a subprocess with the chart's default settings. Three
KVPlans (``--kvplans``), each in its own namespace so that they reconcile at once (``--namespace-concurrency`` is per
namespace), each with ``--classes`` classes named by that answer. The operator's ``VmRSS`` is sampled every 0.1 s
from ``/proc/<pid>/status`` and its ``VmHWM`` (the kernel's own peak) read at the end, after every KVPlan has been
reconciled once. Compared with the chart's ``resources.limits.memory``.

Usage: ``python benchmarks/operator_memory.py [--kvplans 3] [--classes 16] [--json PATH]``; needs ``make tools``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]


def status_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


def chart_limit_mib() -> float:
    raw = str(yaml.safe_load((REPO / "charts/kvplan-operator/values.yaml").read_text())["resources"]["limits"]["memory"])
    return float(raw[:-2]) * {"Gi": 1024.0, "Mi": 1.0}[raw[-2:]]


def deployment(name: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}}, "spec": {"containers": [
                    {"name": "vllm", "image": "vllm/vllm-openai:v0.33.0",
                     "args": ["--model", "m", "--tensor-parallel-size", "1"]}]}}}}


def run(kvplans: int, classes: int) -> dict[str, Any]:
    from kubernetes import client, config

    from kvplan_dev.cluster import LocalCluster
    from kvplan_dev.process import ManagedProcess
    from kvplan_dev.prom_caps import CapsPrometheus, caps_spec

    names = [f"mem-{i}" for i in range(kvplans)]
    with LocalCluster() as cluster, CapsPrometheus() as prom:
        cluster.kubectl("apply", "-f", str(REPO / "crds" / "kvplans.kvplan.io.yaml"))
        cluster.wait_established(["kvplans.kvplan.io"])
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        for ns in names:
            client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
            client.AppsV1Api(api).create_namespaced_deployment(ns, deployment(f"{ns}-vllm"))
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "PYTHONSAFEPATH": "1",
               "KVPLAN_TIMER_TICK_S": "10", "KVPLAN_BACKOFF_BASE_S": "10",
               "MPLCONFIGDIR": str(cluster.workdir / "mpl")}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        argv = [str(Path(sys.executable).parent / "kvplan-operator"), "--standalone", "--metrics-port=0"]
        argv += [f"--namespace={ns}" for ns in names]
        operator = ManagedProcess("kvplan-operator", argv, cluster.workdir / "operator.log", env=env)
        try:
            pid = operator.record.pid
            deadline = time.monotonic() + 120
            while "Initial authentication has finished" not in operator.log_tail(200):
                if operator.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the operator did not start:\n" + operator.log_tail(40))
                time.sleep(0.2)
            time.sleep(2)
            idle = status_mib(pid, "VmRSS")
            t0 = time.monotonic()
            for ns in names:
                client.CustomObjectsApi(api).create_namespaced_custom_object(
                    "kvplan.io", "v1beta1", ns, "kvplans",
                    {"apiVersion": "kvplan.io/v1beta1", "kind": "KVPlan", "metadata": {"name": "caps"},
                     "spec": caps_spec(prom.url, classes=classes, name=ns)})
            reasons: dict[str, str] = {}
            samples: list[float] = []
            while len(reasons) < len(names):
                if operator.poll() is not None:
                    raise RuntimeError(f"the operator exited with {operator.poll()}:\n" + operator.log_tail(40))
                if time.monotonic() - t0 > 1200:
                    raise RuntimeError("not every KVPlan was reconciled in 20 minutes:\n" + operator.log_tail(40))
                samples.append(status_mib(pid, "VmRSS"))
                for ns in names:
                    if ns in reasons:
                        continue
                    body = client.CustomObjectsApi(api).get_namespaced_custom_object(
                        "kvplan.io", "v1beta1", ns, "kvplans", "caps")
                    conds = {c["type"]: c for c in (body.get("status") or {}).get("conditions") or []}
                    if "Ready" in conds:
                        reasons[ns] = f"{conds['Ready']['reason']}: {conds['Ready']['message'][:160]}"
                time.sleep(0.1)
            took = time.monotonic() - t0
            peak = status_mib(pid, "VmHWM")
        finally:
            operator.stop()
    load = os.getloadavg()
    return {"kvplans": kvplans, "classes": classes, "prometheus_requests": prom.requests,
            "idle_rss_mib": round(idle, 1), "peak_rss_mib": round(peak, 1),
            "peak_sampled_rss_mib": round(max(samples, default=0.0), 1),
            "chart_limit_mib": chart_limit_mib(), "under_limit": peak < chart_limit_mib(),
            "seconds": round(took, 1), "reasons": reasons,
            "machine": f"{platform.machine()}, {os.cpu_count()} cpus, python {platform.python_version()}",
            "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            "load": [round(x, 2) for x in load]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kvplans", type=int, default=3)
    p.add_argument("--classes", type=int, default=16)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    report = run(args.kvplans, args.classes)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0 if report["under_limit"] else 1


if __name__ == "__main__":
    sys.exit(main())
