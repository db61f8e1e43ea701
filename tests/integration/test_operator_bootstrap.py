"""The classification file's bootstrap on a real kube-apiserver and Prometheus: examples/kvplan-70b.yaml (every
class from kvplan's stat logger, ``history.source: kvplan``) over examples/vllm-deployments.yaml on a fresh cluster,
with no classified series in Prometheus. The first reconcile writes each Deployment group's classification file
(the example's prompt-length rules and fleet default, nothing reserved) into the state ConfigMap and mounts it;
Ready stays False (``MetricAbsent``) with the bootstrap's message, Applied says the file was mounted; a second
reconcile writes nothing."""

from __future__ import annotations

import json

from kvcore.reservation_file import parse_reservations
from kvplan_operator import conditions as C
from operator_checks import knob_disagreements  # type: ignore[import-not-found]
from operator_world import REPO, cond  # type: ignore[import-not-found]

GROUPS = {"interactive": "vllm-llama70b-interactive", "batch": "vllm-llama70b-batch"}


def test_the_example_mounts_its_classification_file_before_any_history(crd, cluster, kube_api, kube, namespace,
                                                                         prometheus):
    import yaml

    from kvcore.planner import plan
    from kvplan_operator.prom import PromClient
    from kvplan_operator.reconcile import Deps, reconcile

    doc = yaml.safe_load((REPO / "examples" / "kvplan-70b.yaml").read_text())
    doc["spec"]["prometheus"]["url"] = prometheus.url
    cluster.kubectl("-n", namespace, "apply", "-f", str(REPO / "examples" / "vllm-deployments.yaml"))
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input_text=json.dumps(doc))
    before = {g: kube.get_deployment(namespace, d) for g, d in GROUPS.items()}
    deps = Deps(kube=kube, prom_factory=PromClient.connect, planner=plan, backoff_base_s=1.0)
    out = reconcile(kube.get_kvplan(namespace, "llama-70b"), deps)
    body = kube.get_kvplan(namespace, "llama-70b")
    assert not out.ok and out.reason == C.METRIC_ABSENT, (out, body.get("status"))
    ready, applied = cond(body, C.READY), cond(body, C.APPLIED)
    assert ready["status"] == "False" and ready["reason"] == C.METRIC_ABSENT
    assert ("classification file mounted in Deployment vllm-llama70b-batch, vllm-llama70b-interactive since"
            in ready["message"]) and "awaiting classified history of class chat, code, batch" in ready["message"]
    assert applied["status"] == "True" and applied["reason"] == C.CLASSIFICATION_FILE_MOUNTED
    note = body["status"]["lastError"]["classificationFile"]
    assert sorted(note["deployments"]) == sorted(GROUPS.values()) and note["mountedAt"]
    state = kube.get_configmap(namespace, "llama-70b-kvplan")
    for g, name in GROUPS.items():
        d = kube.get_deployment(namespace, name)
        c = next(c for c in d["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
        old = next(c for c in before[g]["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
        assert {"name": "kvplan-reservations", "mountPath": "/etc/kvplan", "readOnly": True} in c["volumeMounts"]
        assert {"name": "KVPLAN_RESERVATIONS_FILE", "value": f"/etc/kvplan/reservations-{g}.json"} in c["env"]
        assert c["args"] == old["args"] and d["spec"]["replicas"] == before[g]["spec"]["replicas"]  # only the mount
        res = parse_reservations(state["data"][f"reservations-{g}.json"])
        assert set(res.reserve_tokens.values()) == {0} and res.plan is None and res.default_class == "batch"
        assert [(r.max_prompt_tokens, r.klass) for r in res.prompt_length_rules] == [(999, "chat"), (1999, "code")]
    assert knob_disagreements(deployments={g: kube.get_deployment(namespace, d) for g, d in GROUPS.items()},
                              groups={g: g for g in GROUPS}, status=body["status"], state=state) == []
    versions = {d: kube.get_deployment(namespace, d)["metadata"]["resourceVersion"] for d in GROUPS.values()}
    state_version = state["metadata"]["resourceVersion"]
    again = reconcile(kube.get_kvplan(namespace, "llama-70b"), deps)
    assert again.reason == C.METRIC_ABSENT and again.changed == []
    assert {d: kube.get_deployment(namespace, d)["metadata"]["resourceVersion"] for d in GROUPS.values()} == versions
    assert kube.get_configmap(namespace, "llama-70b-kvplan")["metadata"]["resourceVersion"] == state_version
    assert cond(kube.get_kvplan(namespace, "llama-70b"), C.READY)["message"] == ready["message"]
