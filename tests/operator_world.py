"""Helpers shared by the operator's integration and e2e tests: a KVPlan spec and serving Deployments for two
pools, CRD installation that waits for Established, a Prometheus backfill of 6 h from the shared Azure traces, and
small readers over the real apiserver. Plain functions (the fixtures stay in the test modules); ``tests/`` is on
``sys.path`` through the root conftest, so test modules import this as ``operator_world``."""

from __future__ import annotations

import json
import time
from pathlib import Path

from kvcore.planner import plan
from kvplan_dev.openmetrics import Window
from kvplan_dev.prom import series_from_trace
from kvplan_operator import conditions as C
from kvplan_operator.kube import Kube
from kvplan_operator.reconcile import Deps, reconcile
from kvplan_operator.prom import PromClient

REPO = Path(__file__).resolve().parents[1]
LMAX = 8192
HOUR = 3600


def kvplan_spec(prom_url: str, mode: str = "Apply") -> dict:
    rate = 'sum(rate({{__name__=~"vllm[:_]request_generation_tokens_count", model_name="{m}"}}[1h]))'
    return {
        "mode": mode,
        "groups": [
            {"name": "pool-a", "deployment": "vllm-a", "container": "vllm", "model": "llama-70b",
             "nodePool": {"gpuCount": 8, "nodeSelector": {"kvplan.io/pool": "a"}},
             "layouts": [{"tp": 4}, {"tp": 8}]},
            {"name": "pool-b", "deployment": "vllm-b", "container": "vllm", "model": "llama-70b",
             "nodePool": {"gpuCount": 4, "tolerations": [{"key": "pool-b", "operator": "Exists",
                                                          "effect": "NoSchedule"}]},
             "layouts": [{"tp": 4}, {"tp": 2, "pp": 2}]},
        ],
        "classes": [
            {"name": "chat", "inputTokens": 1000, "maxOutputTokens": LMAX, "arrivalRateQuery": rate.format(m="chat"),
             "history": {"selector": 'model_name="chat"', "minSamples": 50}, "costs": {"preemption": 10, "waste": 1}},
            {"name": "code", "inputTokens": 2000, "maxOutputTokens": LMAX, "arrivalRateQuery": rate.format(m="code"),
             "history": {"selector": 'model_name="code"', "minSamples": 50}, "costs": {"preemption": 10, "waste": 1}},
        ],
        "prometheus": {"url": prom_url, "lookback": "6h", "windows": 6, "timeoutSeconds": 5},
        "router": {"configMap": {"name": "llm-router"}},
        "replan": {"interval": "30s"},
    }


def deployment(name: str) -> dict:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": 1, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                {"name": "vllm", "image": "vllm/vllm-openai:v0.33.0",  # the tag gives engine.vllmVersion
                 "args": ["--model", "meta-llama/Llama-3.1-70B-Instruct", "--tensor-parallel-size", "1",
                          "--gpu-memory-utilization", "0.9"],
                 "env": [{"name": "HF_HOME", "value": "/models"}]},
                {"name": "metrics-sidecar", "image": "busybox"}]}},
        },
    }


def apply_crds(cluster, path: Path) -> None:
    """kubectl apply, then wait until every KVPlan/peering CRD is Established and served
    (:meth:`kvplan_dev.cluster.LocalCluster.wait_established`)."""
    cluster.kubectl("apply", "-f", str(path))
    names = ["kvplans.kvplan.io"] + (["kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"] if path.is_dir() else [])
    cluster.wait_established(names)


def backfill(prometheus, traces_dir, *, burst: int = 0, base: bool = True, end: float | None = None) -> float:
    """6 h of chat (Azure conv) and code (Azure code) history ending at ``end`` (default now - 90 s).

    ``burst``: that many extra copies of the chat trace squeezed into the window's last hour, as new series
    (label ``engine=burst<i>``); ``base=False`` adds only those (re-writing a series with shifted timestamps would
    interleave two counters and look like resets).
    """
    end = time.time() - 90 if end is None else end
    window = Window(end_unix_s=end, duration_s=6 * HOUR, step_s=30)
    series = []
    if base:
        series += [
            series_from_trace(traces_dir / "azure2023_conv.csv", labels={"model_name": "chat", "engine": "0"},
                              window=window, max_model_len=LMAX),
            series_from_trace(traces_dir / "azure2023_code.csv", labels={"model_name": "code", "engine": "0"},
                              window=window, max_model_len=LMAX),
        ]
    for i in range(int(burst)):
        series.append(series_from_trace(traces_dir / "azure2023_conv.csv",
                                        labels={"model_name": "chat", "engine": f"burst{i}"}, window=window,
                                        max_model_len=LMAX, offset_s=5 * HOUR))
    prometheus.backfill(series, window)
    return end


def setup(kube_api, namespace, spec, *, deployments=("vllm-a", "vllm-b")) -> dict:
    from kubernetes import client

    apps = client.AppsV1Api(kube_api)
    for d in deployments:
        apps.create_namespaced_deployment(namespace, deployment(d))
    return create_kvplan(kube_api, namespace, spec)


def create_kvplan(kube_api, namespace, spec, *, name: str = "fleet", version: str = "v1beta1") -> dict:
    """Create a KVPlan as ``kvplan.io/<version>``: the object the apiserver stored (its ApiException if refused)."""
    from kubernetes import client

    return client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
        "kvplan.io", version, namespace, "kvplans",
        {"apiVersion": f"kvplan.io/{version}", "kind": "KVPlan", "metadata": {"name": name}, "spec": spec})


def refused(kube_api, namespace, spec, *, version: str = "v1beta1"):
    """The apiserver's refusal (ApiException) of a KVPlan with ``spec``; fails the test if it is accepted."""
    import pytest
    from kubernetes import client

    with pytest.raises(client.ApiException) as info:
        create_kvplan(kube_api, namespace, spec, name="bad", version=version)
    return info.value


def detail(kube: Kube, namespace: str, name: str = "fleet") -> dict:
    """The KVPlan's plan detail document (joined by tests/operator_checks.py, not the operator's reader)."""
    from operator_checks import detail_document

    doc = detail_document(lambda n: kube.get_configmap(namespace, n), name)
    assert doc is not None, f"no plan detail ConfigMap {name}-plan in {namespace}"
    return doc


def fetch(kube: Kube, namespace: str) -> dict:
    body = kube.get_kvplan(namespace, "fleet")
    assert body is not None
    return body


def run(kube: Kube, namespace: str, **kw) -> object:
    deps = Deps(kube=kube, prom_factory=PromClient.connect, planner=plan,
                backoff_base_s=1.0, **kw)
    return reconcile(fetch(kube, namespace), deps)


def cond(body: dict, type_: str) -> dict:
    c = C.find(body.get("status", {}).get("conditions", []), type_)
    assert c is not None, (type_, body.get("status"))
    return dict(c)


def versions(kube: Kube, namespace: str) -> dict:
    out = {}
    for d in ("vllm-a", "vllm-b"):
        body = kube.get_deployment(namespace, d)
        out[d] = body["metadata"]["resourceVersion"] if body else None
    for cm in ("llm-router", "fleet-kvplan"):
        body = kube.get_configmap(namespace, cm)
        out[cm] = body["metadata"]["resourceVersion"] if body else None
    return out


def router_weights(kube: Kube, namespace: str) -> dict:
    cm = kube.get_configmap(namespace, "llm-router")
    assert cm is not None
    doc = json.loads(cm["data"]["routing.json"])
    return {c: v["weights"] for c, v in doc["classes"].items()} | {"_admit": {c: v["admit"] for c, v in doc["classes"].items()}}
