"""The operator's reconcile on the real local control plane (etcd + kube-apiserver) and a real Prometheus
backfilled from the shared Azure traces, called directly (the kopf wiring is in tests/e2e):

- CRD + two Deployments on two node pools + a KVPlan -> the Deployments carry the planned TP/PP args, GPU limits,
  pool selectors/tolerations and reservation env; the router ConfigMap has per-class weights; status Ready;
- more backfilled traffic -> the next re-plan changes the router weights;
- DryRun changes nothing in the cluster; a schema violation is refused by the apiserver (CEL and ranges);
- Prometheus stopped -> Degraded, nothing changed; a crash mid-apply -> the next reconcile converges and the one
  after writes nothing; a missing Deployment (or one in another namespace) -> condition, nothing applied;
- an HPA on a Deployment -> replicas left alone.
"""

from __future__ import annotations

import pytest

from kvplan_operator import conditions as C
from kvplan_operator.kube import Kube
from operator_world import (
    backfill,
    create_kvplan,
    detail,
    cond,
    deployment,
    fetch,
    kvplan_spec,
    refused,
    router_weights,
    run,
    setup,
    versions,
)

pytestmark = pytest.mark.integration


def test_apply_plan_to_two_pools(crd, cluster, kube_api, kube, namespace, prometheus, traces_dir):
    backfill(prometheus, traces_dir)
    setup(kube_api, namespace, kvplan_spec(prometheus.url))
    out = run(kube, namespace)
    assert out.ok, out
    body = fetch(kube, namespace)
    assert cond(body, C.READY)["status"] == "True", body["status"]
    assert cond(body, C.APPLIED)["reason"] == C.APPLY_SUCCEEDED
    st = body["status"]
    assert st["observedGeneration"] == body["metadata"]["generation"] and st["lastPlanTime"]
    for group, dep_name in (("pool-a", "vllm-a"), ("pool-b", "vllm-b")):
        g = st["plan"]["groups"][group]
        d = kube.get_deployment(namespace, dep_name)
        pod = d["spec"]["template"]["spec"]
        vllm = next(c for c in pod["containers"] if c["name"] == "vllm")
        args = vllm["args"]
        assert args[args.index("--tensor-parallel-size") + 1] == str(g["tp"])
        assert args[args.index("--pipeline-parallel-size") + 1] == str(g["pp"])
        assert args[:2] == ["--model", "meta-llama/Llama-3.1-70B-Instruct"] and "--gpu-memory-utilization" in args
        assert vllm["resources"]["limits"]["nvidia.com/gpu"] == str(g["tp"] * g["pp"])
        assert d["spec"]["replicas"] == g["replicas"]
        env = {e["name"]: e for e in vllm["env"]}
        assert env["HF_HOME"]["value"] == "/models"
        assert set(env) == {"HF_HOME"}  # no per-class env: nothing would read it
        assert d["metadata"]["annotations"]["kvplan.io/owner"] == f"{namespace}/fleet"
        assert [c["name"] for c in pod["containers"]] == ["vllm", "metrics-sidecar"]
        if group == "pool-a":
            assert pod["nodeSelector"] == {"kvplan.io/pool": "a"}
        else:
            assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
            assert pod["tolerations"] == [{"key": "pool-b", "operator": "Exists", "effect": "NoSchedule"}]
    assert not [k for k in kube.get_configmap(namespace, "fleet-kvplan").get("data") or {}
                if k.startswith("KVPLAN_RESERVE_")]
    classes = detail(kube, namespace)["classes"]
    weights = router_weights(kube, namespace)
    for c in ("chat", "code"):
        assert weights[c] == pytest.approx(classes[c]["routing"], abs=1e-3)
    assert classes["chat"]["samples"] > 1000 and st["objective"]["total"] > 0
    assert st["plan"]["detail"]["configMaps"] == ["fleet-plan"] and st["plan"]["classCounts"]["total"] == 2
    table = cluster.kubectl("get", "kvp", "-n", namespace).stdout.split("\n")
    assert table[0].split()[:7] == ["NAME", "READY", "REASON", "OBJECTIVE", "GROUPS", "CLASSES", "LAST"], table
    assert table[1].split()[:3] == ["fleet", "True", "Reconciled"] and table[1].split()[4:6] == ["2", "2"], table
    wide = cluster.kubectl("get", "kvp", "-n", namespace, "-o", "wide").stdout.split("\n")
    assert "REFUSED" in wide[0].split() and wide[1].split()[wide[0].split().index("REFUSED")] == "0", wide
    events = kube.core.list_namespaced_event(namespace).items
    reasons = sorted(e.reason for e in events if e.involved_object.kind == "KVPlan")
    assert reasons == ["ApplySucceeded", "Healthy", "KnobsInForce", "PlanSucceeded", "Reconciled",
                       "StepTimesFromProfile"], reasons  # backfilled series hold no engine steps
    before = versions(kube, namespace)
    again = run(kube, namespace)
    assert again.ok and again.changed == [] and versions(kube, namespace) == before
    assert len(kube.core.list_namespaced_event(namespace).items) == len(events)  # no transition, no event


def test_more_traffic_changes_weights(crd, kube_api, kube, namespace, prometheus, traces_dir):
    end = backfill(prometheus, traces_dir)
    setup(kube_api, namespace, kvplan_spec(prometheus.url))
    assert run(kube, namespace).ok
    w0 = router_weights(kube, namespace)
    rate0 = detail(kube, namespace)["classes"]["chat"]["arrivalRate"]
    backfill(prometheus, traces_dir, burst=1, base=False, end=end)  # + the chat trace again, in the last hour
    out = run(kube, namespace)
    assert out.ok, out
    body = fetch(kube, namespace)
    assert detail(kube, namespace)["classes"]["chat"]["arrivalRate"] > 5 * rate0
    w1 = router_weights(kube, namespace)
    assert w1 != w0, (w0, w1)
    assert body["status"]["diff"] is not None


def test_dry_run_changes_nothing(crd, kube_api, kube, namespace, prometheus, traces_dir):
    backfill(prometheus, traces_dir)
    setup(kube_api, namespace, kvplan_spec(prometheus.url, mode="DryRun"))
    before = versions(kube, namespace)
    assert run(kube, namespace).ok
    assert versions(kube, namespace) == before
    body = fetch(kube, namespace)
    assert cond(body, C.APPLIED)["reason"] == C.DRY_RUN and body["status"]["plan"]["groups"]["pool-a"]["tp"] >= 1


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        pytest.param(lambda s: s["classes"][0].update(slo={"mu": 1, "sigma": 1, "lambda": 10}), "exactly one of costs",
                     id="costs-and-slo"),
        pytest.param(lambda s: s["groups"][0].update(layouts=[{"tp": 3}]), "tp", id="tp-enum"),
        pytest.param(lambda s: s["groups"][0]["nodePool"].update(gpuCount=0), "gpuCount", id="gpu-count-range"),
        pytest.param(lambda s: s.update(mode="Sometimes"), "mode", id="mode-enum"),
        pytest.param(lambda s: s.update(robustness={"policy": "absolute"}), "policy absolute needs eps",
                     id="absolute-without-eps"),
        pytest.param(lambda s: s["groups"][1].update(name="pool-a"), "spec.groups[1]: Duplicate value",
                     id="duplicate-group"),  # list-map key: checked in linear time (the CRD says why)
        pytest.param(lambda s: s.pop("prometheus"), "prometheus", id="missing-prometheus"),
        pytest.param(lambda s: s["prometheus"].update(url="http://127.0.0.1:9090/#"), "spec.prometheus.url",
                     id="url-fragment"),
        pytest.param(lambda s: s["prometheus"].update(url="http://tok@127.0.0.1:9090"), "spec.prometheus.url",
                     id="url-userinfo"),
        pytest.param(lambda s: s["prometheus"].update(lookback="1m"), "lookback must be between 5m and 30d",
                     id="lookback-too-short"),
        pytest.param(lambda s: s["prometheus"].update(lookback="31d"), "lookback must be between 5m and 30d",
                     id="lookback-too-long"),
        pytest.param(lambda s: s["prometheus"].update(timeoutSeconds=0.5), "timeoutSeconds", id="timeout-min"),
        pytest.param(lambda s: s["replan"].update(interval="5s"), "interval must be between 10s and 24h",
                     id="interval-too-short"),
        pytest.param(lambda s: s["router"]["configMap"].update(key="routing/json"), "key", id="configmap-key"),
        pytest.param(lambda s: s["router"]["configMap"].update(name="a-plan-2"), "reserved for KVPlans' own",
                     id="router-name-reserved"),
        pytest.param(lambda s: s["groups"][0].update(inferencePool="Pool_A"), "inferencePool", id="pool-name"),
        pytest.param(lambda s: s["classes"][0]["costs"].update(preemption=1e308), "preemption", id="cost-1e308"),
        pytest.param(lambda s: s["classes"][0].update(prefixTokens=10**8), "prefixTokens", id="prefix-huge"),
        pytest.param(lambda s: s["groups"][0].update(modelConfig={"num_hidden_layers": 80},
                                                     modelConfigRef={"name": "cfg"}),
                     "give modelConfig or modelConfigRef, not both", id="model-config-twice"),
        pytest.param(lambda s: s["groups"][0].update(modelConfigRef={"name": "cfg", "key": "a/b"}),
                     "modelConfigRef.key", id="model-config-key"),
        pytest.param(lambda s: s["groups"][0]["nodePool"].update(gpuSpec={**GPU_SPEC, "memoryBytes": 0}),
                     "gpuSpec.memoryBytes", id="gpu-spec-no-memory"),
        pytest.param(lambda s: s["groups"][0]["nodePool"].update(gpuSpec={**GPU_SPEC, "name": "H100-SXM"}),
                     "gpuSpec.name is a catalogue GPU type", id="gpu-spec-catalogue-name"),
        pytest.param(lambda s: s["groups"][0]["nodePool"].update(gpuSpec={**GPU_SPEC, "interconnect": "ib"}),
                     "gpuSpec.interconnect", id="gpu-spec-interconnect"),
        pytest.param(lambda s: s["groups"][0]["nodePool"].update(gpuSpec={"name": "x", "memoryBytes": 1e9}),
                     "gpuSpec.hbmBytesPerSecond", id="gpu-spec-missing-figure"),
        pytest.param(lambda s: s["groups"][0]["nodePool"].update(gpuSpec={**GPU_SPEC, "nodeLabel": ""},
                                                                  nodeSelector={}),
                     "a gpuSpec needs gpuSpec.nodeLabel or nodeSelector", id="gpu-spec-unplaced"),
        pytest.param(lambda s: s.update(capacity={"stepTimes": {"windowSeconds": 1}}),
                     "capacity.stepTimes.windowSeconds", id="step-times-window"),
        pytest.param(lambda s: s.update(capacity={"stepTimes": {"minWindows": 2}}),
                     "capacity.stepTimes.minWindows", id="step-times-min-windows"),
    ],
)
def test_schema_violation_refused_by_apiserver(crd, kube_api, namespace, mutate, needle):
    spec = kvplan_spec("http://127.0.0.1:9")
    mutate(spec)
    error = refused(kube_api, namespace, spec, version="v1alpha1")  # the deprecated version: the same schema
    assert error.status == 422
    assert needle in error.body


GPU_SPEC = {"name": "gh200-96gb", "memoryBytes": 96e9, "hbmBytesPerSecond": 4.0e12, "bf16Flops": 989e12,
            "family": "h100", "nodeLabel": "nvidia.com/gpu.product=NVIDIA-GH200-96GB-HBM3"}


def test_a_gpu_spec_is_stored_with_its_defaults_and_parses(crd, kube_api, namespace):
    """The apiserver keeps a group's gpuSpec (not pruned), fills its defaults, and the operator's parse of the
    stored object is the GPU given (gpuType, which the CRD defaults beside it, is replaced)."""
    from kvplan_operator.spec import parse_spec

    spec = kvplan_spec("http://127.0.0.1:9")
    spec["groups"][0]["nodePool"]["gpuSpec"] = dict(GPU_SPEC)
    spec["groups"][0]["nodePool"].pop("nodeSelector", None)   # placed by the spec's node label
    created = create_kvplan(kube_api, namespace, spec, name="own-gpu", version="v1alpha1")
    stored = created["spec"]["groups"][0]["nodePool"]
    assert stored["gpuType"] == "A100-80GB"   # the CRD's default, beside the spec
    assert stored["gpuSpec"]["interconnect"] == "pcie" and stored["gpuSpec"]["resource"] == "nvidia.com/gpu"
    pool = parse_spec(created["spec"]).groups[0].node_pool
    assert pool.gpu_name == "gh200-96gb" and pool.gpu().memory_bytes == 96e9
    assert pool.selector() == {"nvidia.com/gpu.product": "NVIDIA-GH200-96GB-HBM3"}


@pytest.mark.parametrize(("lookback", "interval"), [("5m", "10s"), ("30d", "24h"), ("720h", "1h"), ("300s", "30s")])
def test_duration_bounds_accept_their_ends(crd, kube_api, namespace, lookback, interval):
    """The CEL rules accept the bounds themselves in every unit the pattern allows (and parse_spec agrees)."""
    from kvplan_operator.spec import parse_spec

    spec = kvplan_spec("http://127.0.0.1:9")
    spec["prometheus"].update(lookback=lookback, windows=1)
    spec["replan"].update(interval=interval)
    created = create_kvplan(kube_api, namespace, spec, name="edge", version="v1alpha1")
    parse_spec(created["spec"])


def test_defaults_applied_by_apiserver(crd, kube_api, kube, namespace):
    spec = kvplan_spec("http://127.0.0.1:9")
    del spec["groups"][0]["layouts"]
    setup(kube_api, namespace, spec, deployments=())
    s = fetch(kube, namespace)["spec"]
    assert s["groups"][0]["layouts"] == [{"tp": 1, "pp": 1}, {"tp": 2, "pp": 1}, {"tp": 4, "pp": 1}, {"tp": 8, "pp": 1}]
    assert s["groups"][1]["nodePool"]["gpuType"] == "A100-80GB" and s["groups"][1]["nodePool"]["gpusPerNode"] == 8
    assert s["costs"] == {"kappa": 0.2, "cSlo": 5, "cRej": 5000} and s["replan"]["minImprovement"] == 0.05
    assert s["robustness"] == {"policy": "drift"}


def test_prometheus_stopped_degraded_nothing_changed(crd, kube_api, kube, namespace, prometheus, traces_dir):
    backfill(prometheus, traces_dir)
    setup(kube_api, namespace, kvplan_spec(prometheus.url))
    assert run(kube, namespace).ok
    before = versions(kube, namespace)
    good = fetch(kube, namespace)["status"]["plan"], detail(kube, namespace)
    prometheus.stop(remove=False)
    out = run(kube, namespace)
    assert not out.ok and out.reason == C.PROMETHEUS_UNAVAILABLE and out.retry_after is not None
    body = fetch(kube, namespace)
    assert cond(body, C.DEGRADED)["status"] == "True" and cond(body, C.DEGRADED)["reason"] == C.PROMETHEUS_UNAVAILABLE
    assert cond(body, C.READY)["status"] == "True"  # the last good plan is still in force
    assert (body["status"]["plan"], detail(kube, namespace)) == good
    assert versions(kube, namespace) == before
    prometheus.start()
    assert run(kube, namespace).ok
    assert cond(fetch(kube, namespace), C.DEGRADED)["status"] == "False"


class CrashAfterFirstDeployment(Kube):
    """The operator process dies right after its first Deployment patch (before status)."""

    def patch_deployment(self, namespace, name, patch):
        super().patch_deployment(namespace, name, patch)
        raise SystemExit("operator killed mid-apply")


def test_restart_mid_apply_converges(crd, kube_api, kube, namespace, prometheus, traces_dir):
    backfill(prometheus, traces_dir)
    setup(kube_api, namespace, kvplan_spec(prometheus.url))
    with pytest.raises(SystemExit):
        run(CrashAfterFirstDeployment(kube_api), namespace)
    assert "status" not in fetch(kube, namespace) or not fetch(kube, namespace)["status"].get("plan")
    out = run(kube, namespace)  # the restarted operator
    assert out.ok, out
    assert not any(c.startswith("Deployment/vllm-a") for c in out.changed), out.changed  # already done
    body = fetch(kube, namespace)
    for group, dep_name in (("pool-a", "vllm-a"), ("pool-b", "vllm-b")):
        g = body["status"]["plan"]["groups"][group]
        ann = kube.get_deployment(namespace, dep_name)["metadata"]["annotations"]["kvplan.io/layout"]
        assert ann == f"tp={g['tp']},pp={g['pp']},replicas={g['replicas']}"
    before = versions(kube, namespace)
    assert run(kube, namespace).changed == [] and versions(kube, namespace) == before


def test_missing_deployment_and_other_namespace(crd, kube_api, kube, namespace, prometheus, traces_dir):
    from kubernetes import client

    backfill(prometheus, traces_dir)
    other = f"{namespace}-other"
    client.CoreV1Api(kube_api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    client.AppsV1Api(kube_api).create_namespaced_deployment(other, deployment("vllm-b"))
    setup(kube_api, namespace, kvplan_spec(prometheus.url), deployments=("vllm-a",))
    before = versions(kube, namespace)
    other_rv = kube.get_deployment(other, "vllm-b")["metadata"]["resourceVersion"]
    out = run(kube, namespace)
    assert out.reason == C.DEPLOYMENT_MISSING
    body = fetch(kube, namespace)
    assert cond(body, C.READY)["reason"] == C.DEPLOYMENT_MISSING
    assert f"vllm-b not found in namespace {namespace}" in cond(body, C.READY)["message"]
    assert versions(kube, namespace) == before
    assert kube.get_deployment(other, "vllm-b")["metadata"]["resourceVersion"] == other_rv
    client.CoreV1Api(kube_api).delete_namespace(other)


def test_hpa_keeps_replicas(crd, kube_api, kube, namespace, prometheus, traces_dir):
    from kubernetes import client

    backfill(prometheus, traces_dir)
    client.AutoscalingV2Api(kube_api).create_namespaced_horizontal_pod_autoscaler(namespace, {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "vllm-a"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm-a"},
                 "minReplicas": 1, "maxReplicas": 4}})
    setup(kube_api, namespace, kvplan_spec(prometheus.url))
    assert run(kube, namespace).ok
    body = fetch(kube, namespace)
    assert kube.get_deployment(namespace, "vllm-a")["spec"]["replicas"] == 1
    assert body["status"]["plan"]["groups"]["pool-a"]["replicasManagedBy"] == "HorizontalPodAutoscaler/vllm-a"
    assert body["status"]["plan"]["groups"]["pool-a"]["replicasReason"] == C.REPLICAS_BY_AUTOSCALER
    assert any("replicas left to HorizontalPodAutoscaler/vllm-a" in n for n in body["status"]["plan"]["notes"])


LLAMA_70B_CONFIG = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 80, "hidden_size": 8192,
                    "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 28672,
                    "vocab_size": 128256, "torch_dtype": "bfloat16"}


def test_model_config_from_a_configmap(crd, kube_api, kube, namespace, prometheus, traces_dir):
    """groups[].modelConfigRef on the real apiserver: the key defaults to config.json (the CRD's default), the
    shape is planned, and without the ConfigMap the cycle is ModelConfigMissing with nothing changed."""
    import json

    from kubernetes import client

    backfill(prometheus, traces_dir)
    spec = kvplan_spec(prometheus.url)
    spec["groups"][0].update(model="my-70b", modelConfigRef={"name": "my-70b-config"})
    client.CoreV1Api(kube_api).create_namespaced_config_map(namespace, {
        "metadata": {"name": "my-70b-config"}, "data": {"config.json": json.dumps(LLAMA_70B_CONFIG)}})
    stored = setup(kube_api, namespace, spec)
    assert stored["spec"]["groups"][0]["modelConfigRef"] == {"name": "my-70b-config", "key": "config.json"}
    out = run(kube, namespace)
    assert out.ok, out
    assert cond(fetch(kube, namespace), C.READY)["status"] == "True"
    client.CoreV1Api(kube_api).delete_namespaced_config_map("my-70b-config", namespace)
    before = versions(kube, namespace)
    out = run(kube, namespace)
    assert out.reason == C.MODEL_CONFIG_MISSING, out
    assert "spec.groups[0].modelConfigRef[my-70b-config/config.json]: ConfigMap my-70b-config not found" in out.message
    body = fetch(kube, namespace)
    assert cond(body, C.DEGRADED)["reason"] == C.MODEL_CONFIG_MISSING
    assert cond(body, C.READY)["status"] == "True"  # the last good plan stays in force
    assert versions(kube, namespace) == before
