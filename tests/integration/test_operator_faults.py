"""A few of the fault-injection scenarios of tests/unit/operator/test_op_faults.py for real, on the local kube-apiserver +
etcd and Debian's Prometheus, with the reconcile called directly (as in test_operator_reconcile.py):

- a real 403: the operator runs as a ServiceAccount whose RBAC lacks ``patch`` on Deployments;
- a real 422 from admission: a ValidatingAdmissionPolicy refuses the router ConfigMap, the last write of a first
  apply (after the Deployments were re-laid out);
- a real kill -9: a child process running the reconcile SIGKILLs itself right after its first Deployment patch;
- the cycle deadline passing during apply (an injected clock that the first write moves on), with the real client;
- real Prometheus answers: an arrival-rate query with a PromQL syntax error, and one that matches no series.

Each time: a named reason in the outcome and in status, nothing escapes, no two objects disagree
(tests/operator_checks.py), the last good plan stays, and once the fault is gone the next reconcile converges and
the one after writes nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from kvplan_operator import conditions as C
from kvplan_operator.kube import Kube
from operator_checks import detail_document, disagreements, router_document
from operator_world import REPO, backfill, cond, detail, fetch, kvplan_spec, run, setup, versions

pytestmark = pytest.mark.integration
GROUPS = {"pool-a": "vllm-a", "pool-b": "vllm-b"}


def found_disagreements(kube: Kube, namespace: str) -> list[str]:
    return disagreements(deployments={d: kube.get_deployment(namespace, d) for d in GROUPS.values()}, groups=GROUPS,
                         router=router_document(kube.get_configmap(namespace, "llm-router")), route=None,
                         status=fetch(kube, namespace).get("status") or {},
                         detail=detail_document(lambda n: kube.get_configmap(namespace, n)))


def converge(kube: Kube, namespace: str) -> None:
    out = run(kube, namespace)
    assert out.ok, out
    assert found_disagreements(kube, namespace) == []
    before = versions(kube, namespace)
    again = run(kube, namespace)
    assert again.ok and again.changed == [] and versions(kube, namespace) == before


OPERATOR_RULES = [
    {"apiGroups": ["kvplan.io"], "resources": ["kvplans"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": ["kvplan.io"], "resources": ["kvplans/status"], "verbs": ["get", "patch"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ["get", "list"]},
    {"apiGroups": ["keda.sh"], "resources": ["scaledobjects"], "verbs": ["get", "list"]},
    {"apiGroups": ["autoscaling.aibrix.ai"], "resources": ["podautoscalers"], "verbs": ["get", "list"]},
]


def test_rbac_403_on_deployment_patch(crd, cluster, kube_api, kube, namespace, prometheus, traces_dir):
    """The operator may read Deployments but not patch them: ApplyFailed with 403 Forbidden, the ConfigMap written
    before it listed, nothing claimed; with the permission granted it converges."""
    from kubernetes import client, config

    backfill(prometheus, traces_dir)
    setup(kube_api, namespace, kvplan_spec(prometheus.url))
    rbac = client.RbacAuthorizationV1Api(kube_api)
    rules = OPERATOR_RULES + [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]}]
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "op"}, "rules": rules})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "op"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "op"},
        "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": namespace}]})
    as_op = Kube(config.new_client_from_config(config_file=str(cluster.service_account_kubeconfig(namespace, "op"))))
    before = {d: kube.get_deployment(namespace, d) for d in GROUPS.values()}
    out = run(as_op, namespace)
    # The first call to Deployment/vllm-a fails: the strategic-merge update (the maxUnavailable a rollout on the
    # full pool needs, operator/targets/rollout_room.py) or the apply itself.
    assert out.reason == C.APPLY_FAILED and "Deployment/vllm-a" in out.message, out
    assert "403 Forbidden" in out.message, out
    body = fetch(kube, namespace)
    assert cond(body, C.APPLIED)["reason"] == C.APPLY_FAILED and "403 Forbidden" in cond(body, C.APPLIED)["message"]
    assert body["status"]["lastError"]["applied"] == ["ConfigMap/fleet-kvplan"]
    assert "plan" not in body["status"] and kube.get_configmap(namespace, "fleet-plan") is None
    assert {d: kube.get_deployment(namespace, d) for d in GROUPS.values()} == before
    assert found_disagreements(kube, namespace) == []
    rules[-1]["verbs"] = ["get", "patch"]
    rbac.patch_namespaced_role("op", namespace, {"rules": rules})
    converge(as_op, namespace)


def wait_denied(kube_api, namespace: str, name: str) -> None:
    """Admission policies take effect asynchronously: poll a dry-run create until the policy refuses it."""
    from kubernetes import client

    core = client.CoreV1Api(kube_api)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            core.create_namespaced_config_map(namespace, {"metadata": {"name": name}}, dry_run="All")
        except client.ApiException as exc:
            if exc.status in (403, 422):
                return
            raise
        time.sleep(0.5)
    pytest.fail("ValidatingAdmissionPolicy not enforced after 60 s")


def test_admission_refuses_the_last_write(crd, kube_api, kube, namespace, prometheus, traces_dir):
    """A ValidatingAdmissionPolicy refuses the router ConfigMap (422 Invalid from the apiserver), the last write of
    the first apply, after both Deployments were re-laid out: ApplyFailed, status claims no plan, the Deployments'
    annotations and flags agree, and removing the policy converges."""
    from kubernetes import client

    backfill(prometheus, traces_dir)
    setup(kube_api, namespace, kvplan_spec(prometheus.url))
    adm = client.AdmissionregistrationV1Api(kube_api)
    name = f"deny-router-{namespace}"
    adm.create_validating_admission_policy({
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE", "UPDATE"],
                                                         "resources": ["configmaps"]}]},
                 "validations": [{"expression": "object.metadata.name != 'llm-router'",
                                  "message": "router ConfigMap frozen by the test"}]}})
    adm.create_validating_admission_policy_binding({
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}}})
    try:
        wait_denied(kube_api, namespace, "llm-router")
        out = run(kube, namespace)
        assert out.reason == C.APPLY_FAILED and "create ConfigMap/llm-router: 422 Invalid" in out.message, out
        body = fetch(kube, namespace)
        assert body["status"]["lastError"]["failedAt"] == "ConfigMap/llm-router"
        assert [a.split(":")[0] for a in body["status"]["lastError"]["applied"]] == \
            ["ConfigMap/fleet-kvplan", "Deployment/vllm-a", "Deployment/vllm-b"]
        assert "plan" not in body["status"] and "applying" not in body["status"]
        assert found_disagreements(kube, namespace) == []
    finally:
        adm.delete_validating_admission_policy_binding(name)
        adm.delete_validating_admission_policy(name)
    deadline = time.monotonic() + 60
    while kube.get_configmap(namespace, "llm-router") is None and time.monotonic() < deadline:
        if run(kube, namespace).ok:
            break
        time.sleep(0.5)
    converge(kube, namespace)


CHILD = """
import os, signal, sys
sys.path.insert(0, {tests!r})
from kubernetes import config
from kvplan_operator.kube import Kube
from operator_world import run

class DiesAfterFirstDeployment(Kube):
    def patch_deployment(self, namespace, name, patch):
        super().patch_deployment(namespace, name, patch)
        os.kill(os.getpid(), signal.SIGKILL)

run(DiesAfterFirstDeployment(config.new_client_from_config(config_file={kubeconfig!r})), {namespace!r})
"""


def test_kill_9_right_after_a_deployment_patch(crd, cluster, kube_api, kube, namespace, prometheus, traces_dir):
    backfill(prometheus, traces_dir)
    setup(kube_api, namespace, kvplan_spec(prometheus.url))
    code = CHILD.format(tests=str(REPO / "tests"), kubeconfig=str(cluster.kubeconfig), namespace=namespace)
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONSAFEPATH": "1"}, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    body = fetch(kube, namespace)
    assert "plan" not in body["status"]  # nothing claimed
    assert body["status"]["applying"]["planId"]  # status says a plan was being applied
    assert cond(body, C.APPLIED)["status"] == "Unknown" and cond(body, C.APPLIED)["reason"] == C.APPLYING
    assert found_disagreements(kube, namespace) == []
    converge(kube, namespace)
    assert "applying" not in fetch(kube, namespace)["status"]


def is_write(call: str) -> bool:
    """A write of the plan's (not status, not an Event: the record phase's)."""
    return call.split()[0] in ("apply", "patch", "create") and "/status" not in call and call != "create Event"


class TimeRunsOutAfterFirstWrite(Kube):
    """The real client, whose first write (other than status) takes the injected clock ``jump_s`` on."""

    def __init__(self, api_client, clock: list[float], jump_s: float) -> None:
        super().__init__(api_client)
        self.clock, self.jump_s, self.sent = clock, jump_s, []

    def _call(self, call, fn, *, missing_ok=False):
        out = super()._call(call, fn, missing_ok=missing_ok)
        self.sent.append(call)
        if is_write(call) and self.jump_s:
            self.clock[0] += self.jump_s
            self.jump_s = 0.0
        return out


# Just past the work's end (45 s of 60), so the status write has nearly all of its 15 s reserve in real time.
@pytest.mark.parametrize(("jump_s", "recorded"), [pytest.param(45.5, True, id="past-the-work-end"),
                                                   pytest.param(70.0, False, id="past-the-cycle-deadline")])
def test_cycle_deadline_during_apply(crd, cluster, kube_api, kube, namespace, prometheus, traces_dir, jump_s,
                                     recorded):
    """A 60 s cycle deadline (its last 15 s kept for the status write), and the first write takes the injected
    clock past 45 s: no further write is sent. Past the work's end only, the status write is still sent and says
    CycleDeadlineExceeded; past the deadline itself, the real client sends nothing more, not even status. Either
    way nothing disagrees, and the next reconcile converges."""
    from kubernetes import config

    backfill(prometheus, traces_dir)
    setup(kube_api, namespace, kvplan_spec(prometheus.url))
    clock = [time.time()]
    slow = TimeRunsOutAfterFirstWrite(config.new_client_from_config(config_file=str(cluster.kubeconfig)), clock,
                                      jump_s)
    out = run(slow, namespace, clock=lambda: clock[0], cycle_deadline_s=60.0)
    writes = [c for c in slow.sent if is_write(c)]
    assert len(writes) == 1, slow.sent  # the one write that took the time; none after it
    status = fetch(kube, namespace)["status"]
    if recorded:
        assert out.reason == C.CYCLE_DEADLINE_EXCEEDED, out
        assert status["lastError"]["reason"] == C.CYCLE_DEADLINE_EXCEEDED
        assert status["lastError"]["applied"] and status["lastError"]["failedAt"]
        assert cond(fetch(kube, namespace), C.APPLIED)["reason"] == C.CYCLE_DEADLINE_EXCEEDED
    else:
        assert out.reason == C.STATUS_WRITE_FAILED and C.CYCLE_DEADLINE_EXCEEDED in out.message, out
        assert status["applying"]["planId"]  # the intent written before the first write, nothing after it
        assert "lastError" not in status
    assert "plan" not in status  # nothing claimed
    assert found_disagreements(kube, namespace) == []
    converge(kube, namespace)


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        pytest.param("sum(rate(vllm:request_success_total[5m]", C.PROMETHEUS_QUERY_ERROR, id="promql-syntax-error"),
        pytest.param('sum(rate(vllm:request_success_total{model_name="nobody"}[5m]))', C.NO_RATE_DATA,
                     id="matches-nothing"),
    ],
)
def test_real_prometheus_answers_become_named_reasons(crd, kube_api, kube, namespace, prometheus, traces_dir, query,
                                                      reason):
    backfill(prometheus, traces_dir)
    setup(kube_api, namespace, kvplan_spec(prometheus.url))
    assert run(kube, namespace).ok
    good = fetch(kube, namespace)["status"]["plan"], detail(kube, namespace)
    before = versions(kube, namespace)
    from kubernetes import client

    spec = fetch(kube, namespace)["spec"]
    spec["classes"][0]["arrivalRateQuery"] = query
    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(
        "kvplan.io", "v1alpha1", namespace, "kvplans", "fleet", {"spec": {"classes": spec["classes"]}})
    out = run(kube, namespace)
    assert out.reason == reason, out
    body = fetch(kube, namespace)
    assert cond(body, C.DEGRADED)["reason"] == reason and cond(body, C.READY)["status"] == "True"
    assert (body["status"]["plan"], detail(kube, namespace)) == good and versions(kube, namespace) == before
    text = json.dumps(body["status"]) + json.dumps([e.message for e in kube.core.list_namespaced_event(namespace).items])
    assert "parse error" not in text and "unexpected" not in text  # Prometheus' own error text is never copied
    assert found_disagreements(kube, namespace) == []
