"""The operator's workload targets on the real local apiserver with the UPSTREAM CRDs -- KServe's
LLMInferenceService (serving.kserve.io, from the Go module github.com/kserve/kserve v0.17.0) fetched with
``go mod download`` at test setup (kvplan_dev/gomodules.py) -- and a real backfilled Prometheus; the reconcile is
called directly, as in test_operator_reconcile.py:

- a Deployment whose controller ownerReference is an LLMInferenceService (as KServe's single-node workload
  ``<name>-kserve`` is): the LLMInferenceService's ``spec.parallelism``, ``spec.replicas`` and its vLLM container's
  flags and GPUs carry the plan, its other fields and containers are as created, and the Deployment is untouched
  (resourceVersion unchanged); a plain Deployment in the same KVPlan is patched as before;
- a second reconcile writes nothing (no rollout loop: the LLMInferenceService's resourceVersion stays);
- an LLMInferenceService with ``spec.worker`` (multi-node) is refused by name, nothing written;
- a TP4/PP2 layout on 4-GPU nodes, for a group naming a LeaderWorkerSet (the upstream CRD of sigs.k8s.io/lws
  v0.8.0): the LeaderWorkerSet gets size 2 and 4 GPUs per pod, the leader ``vllm serve ... --pipeline-parallel-size
  2 --nnodes 2 --node-rank 0 --master-addr $(LWS_LEADER_ADDRESS)`` and the workers the same with
  ``--node-rank $(LWS_WORKER_INDEX) --headless`` (vLLM 0.33's multiprocessing multi-node form); a second reconcile
  writes nothing.

No KServe or LWS controller runs here: what KServe would then render into its Deployment is KServe's job, and the
Deployment staying as it was is exactly what kvplan promises.
"""

from __future__ import annotations

import copy

import pytest

from kvplan_operator import conditions as C
from kvplan_operator.kube import Kube
from kvplan_operator.targets.vllm_flags import PP_FLAG, TP_FLAG, read_flags
from operator_httproute_world import install_upstream_crds
from operator_world import backfill, cond, create_kvplan, deployment, fetch, kvplan_spec, run

pytestmark = pytest.mark.integration

API = ("serving.kserve.io", "v1alpha2", "llminferenceservices")
ISVC = "chat-isvc"
KSERVE_DEPLOYMENT = f"{ISVC}-kserve"


@pytest.fixture(scope="module")
def workload_crds(cluster):
    """The KVPlan CRD and the upstream LLMInferenceService and LeaderWorkerSet CRDs, Established."""
    from kvplan_dev.gomodules import workload_crds as fetch_crds

    return install_upstream_crds(cluster, fetch_crds, ["llminferenceservices.serving.kserve.io",
                                                       "leaderworkersets.leaderworkerset.x-k8s.io"],
                                 "KServe / LeaderWorkerSet")


def llmisvc_body(extra: dict | None = None) -> dict:
    return {"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
            "metadata": {"name": ISVC, "labels": {"team": "chat"}},
            "spec": {"model": {"uri": "hf://meta-llama/Llama-3.1-70B-Instruct", "name": "llama"}, "replicas": 1,
                     "template": {"containers": [
                         {"name": "main", "image": "vllm/vllm-openai:v0.33.0",
                          "args": ["--max-model-len", "8192", "--tensor-parallel-size", "1"],
                          "env": [{"name": "HF_HOME", "value": "/models"}],
                          "resources": {"limits": {"memory": "200Gi"}}},
                         {"name": "proxy", "image": "busybox"}]}} | (extra or {})}


def create_kserve_world(kube_api, namespace: str, extra: dict | None = None) -> tuple[dict, dict]:
    """The LLMInferenceService and the Deployment KServe's controller would own (controller ownerReference)."""
    from kubernetes import client

    isvc = client.CustomObjectsApi(kube_api).create_namespaced_custom_object(*API[:2], namespace, API[2],
                                                                            llmisvc_body(extra))
    body = deployment(KSERVE_DEPLOYMENT)
    pod = body["spec"]["template"]["spec"]
    pod["containers"] = copy.deepcopy(isvc["spec"]["template"]["containers"])
    body["metadata"]["ownerReferences"] = [{"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService",
                                            "name": ISVC, "uid": isvc["metadata"]["uid"], "controller": True,
                                            "blockOwnerDeletion": True}]
    apps = client.AppsV1Api(kube_api)
    made = apps.create_namespaced_deployment(namespace, body)
    apps.create_namespaced_deployment(namespace, deployment("vllm-b"))
    return isvc, kube_api.sanitize_for_serialization(made)


def spec_with_kserve_group(prom_url: str) -> dict:
    spec = kvplan_spec(prom_url)
    spec["groups"][0]["deployment"] = KSERVE_DEPLOYMENT
    spec["groups"][0]["container"] = "main"
    return spec


def get_isvc(kube: Kube, namespace: str) -> dict:
    body = kube.get_llminferenceservice(namespace, ISVC)
    assert body is not None
    return body


def test_kserve_owned_deployment_is_planned_through_its_llmisvc(workload_crds, kube_api, kube, namespace,
                                                               prometheus, traces_dir):
    backfill(prometheus, traces_dir)
    created, made = create_kserve_world(kube_api, namespace)
    create_kvplan(kube_api, namespace, spec_with_kserve_group(prometheus.url))
    out = run(kube, namespace)
    assert out.ok, out
    assert any(c.startswith(f"LLMInferenceService/{ISVC}") for c in out.changed), out.changed
    assert not any(c.startswith(f"Deployment/{KSERVE_DEPLOYMENT}") for c in out.changed), out.changed
    body = fetch(kube, namespace)
    assert cond(body, C.READY)["status"] == "True", body["status"]
    g = body["status"]["plan"]["groups"]["pool-a"]

    isvc = get_isvc(kube, namespace)
    assert isvc["spec"]["parallelism"] == {"tensor": g["tp"], "pipeline": g["pp"]}
    assert isvc["spec"]["replicas"] == g["replicas"]
    main, proxy = isvc["spec"]["template"]["containers"]
    assert (main["name"], proxy) == ("main", created["spec"]["template"]["containers"][1])
    flags = read_flags(main)
    assert (flags[TP_FLAG], flags[PP_FLAG] or "1") == (str(g["tp"]), str(g["pp"]))
    assert main["args"][:2] == ["--max-model-len", "8192"]
    assert main["resources"]["limits"] == {"memory": "200Gi", "nvidia.com/gpu": str(g["tp"] * g["pp"])}
    assert main["env"] == created["spec"]["template"]["containers"][0]["env"]
    assert isvc["spec"]["model"] == created["spec"]["model"] and isvc["metadata"]["labels"] == {"team": "chat"}
    assert isvc["spec"]["template"]["nodeSelector"] == {"kvplan.io/pool": "a"}

    dep = kube.get_deployment(namespace, KSERVE_DEPLOYMENT)
    assert dep is not None and dep["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]
    other = kube.get_deployment(namespace, "vllm-b")
    assert other is not None and "kvplan.io/layout" in other["metadata"]["annotations"]  # the plain one is planned

    rv = isvc["metadata"]["resourceVersion"]
    again = run(kube, namespace)
    assert again.ok, again
    assert not any(c.startswith(("LLMInferenceService/", "Deployment/")) for c in again.changed), again.changed
    assert get_isvc(kube, namespace)["metadata"]["resourceVersion"] == rv
    dep = kube.get_deployment(namespace, KSERVE_DEPLOYMENT)
    assert dep is not None and dep["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]


def test_multi_node_llmisvc_is_refused_by_field(workload_crds, kube_api, kube, namespace, prometheus, traces_dir):
    backfill(prometheus, traces_dir)
    worker = {"worker": {"containers": [{"name": "main", "image": "vllm/vllm-openai:v0.33.0"}]}}
    create_kserve_world(kube_api, namespace, worker)
    create_kvplan(kube_api, namespace, spec_with_kserve_group(prometheus.url))
    rv = get_isvc(kube, namespace)["metadata"]["resourceVersion"]
    out = run(kube, namespace)
    assert not out.ok and out.reason == C.UNSUPPORTED_WORKLOAD_FIELD, out
    assert "spec.worker" in cond(fetch(kube, namespace), C.READY)["message"]
    assert get_isvc(kube, namespace)["metadata"]["resourceVersion"] == rv
    other = kube.get_deployment(namespace, "vllm-b")
    assert other is not None and "kvplan.io/layout" not in (other["metadata"].get("annotations") or {})


LWS_API = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
WIDE = "vllm-wide"


def lws_body() -> dict:
    argv = ["vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct"]

    def template(role: str, args: list[str]) -> dict:
        return {"metadata": {"labels": {"role": role}}, "spec": {"containers": [
            {"name": "vllm", "image": "vllm/vllm-openai:v0.33.0", "command": argv, "args": args,
             "resources": {"limits": {"memory": "500Gi"}}}]}}

    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": WIDE},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {
                "size": 1, "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": template("leader", ["--port", "8000", "--tensor-parallel-size", "4"]),
                "workerTemplate": template("worker", ["--tensor-parallel-size", "4"])}}}


def test_tp4_pp2_across_two_nodes_is_written_as_a_leaderworkerset(workload_crds, kube_api, kube, namespace,
                                                                  prometheus, traces_dir):
    from kubernetes import client

    from kvplan_operator.targets.vllm_flags import read_flag

    backfill(prometheus, traces_dir)
    api = client.CustomObjectsApi(kube_api)
    created = api.create_namespaced_custom_object(*LWS_API[:2], namespace, LWS_API[2], lws_body())
    spec = kvplan_spec(prometheus.url)
    spec["groups"] = [{"name": "wide", "deployment": WIDE, "container": "vllm", "model": "llama-70b",
                       "workloadRef": {"kind": "LeaderWorkerSet", "name": WIDE},
                       "nodePool": {"gpuCount": 8, "gpusPerNode": 4}, "layouts": [{"tp": 4, "pp": 2}]}]
    create_kvplan(kube_api, namespace, spec)
    out = run(kube, namespace)
    assert out.ok, out
    assert any(c.startswith(f"LeaderWorkerSet/{WIDE}") for c in out.changed), out.changed
    body = fetch(kube, namespace)
    g = body["status"]["plan"]["groups"]["wide"]
    assert (g["tp"], g["pp"]) == (4, 2)

    lws = api.get_namespaced_custom_object(*LWS_API[:2], namespace, LWS_API[2], WIDE)
    lwt = lws["spec"]["leaderWorkerTemplate"]
    assert lwt["size"] == 2 and lws["spec"]["replicas"] == g["replicas"]
    assert lwt["restartPolicy"] == "RecreateGroupOnPodRestart"
    (leader,), (worker,) = lwt["leaderTemplate"]["spec"]["containers"], lwt["workerTemplate"]["spec"]["containers"]
    for c in (leader, worker):
        assert c["command"] == ["vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct"]
        assert c["resources"]["limits"] == {"memory": "500Gi", "nvidia.com/gpu": "4"}
        assert (read_flag(c["args"], "--tensor-parallel-size"), read_flag(c["args"], "--pipeline-parallel-size"),
                read_flag(c["args"], "--nnodes"), read_flag(c["args"], "--master-addr")) == (
                    "4", "2", "2", "$(LWS_LEADER_ADDRESS)")
    assert leader["args"][:2] == ["--port", "8000"] and read_flag(leader["args"], "--node-rank") == "0"
    assert "--headless" not in leader["args"]
    assert read_flag(worker["args"], "--node-rank") == "$(LWS_WORKER_INDEX)" and "--headless" in worker["args"]
    assert lwt["leaderTemplate"]["metadata"] == created["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]
    assert any("spans nodes" in n for n in body["status"]["plan"]["notes"]), body["status"]["plan"]["notes"]

    rv = lws["metadata"]["resourceVersion"]
    again = run(kube, namespace)
    assert again.ok and not any(c.startswith("LeaderWorkerSet/") for c in again.changed), again.changed
    assert api.get_namespaced_custom_object(*LWS_API[:2], namespace, LWS_API[2], WIDE)["metadata"][
        "resourceVersion"] == rv
