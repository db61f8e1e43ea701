"""The operator at fleet scale (issue 16) on the real apiserver and Debian's Prometheus 2.42, backfilled with the
series the kvplan plugin and vLLM export for 256 classes on 64 groups (kvplan_dev.fleet):

- the CRD takes a 256-class x 64-group KVPlan (within the apiserver's CEL cost budget) and refuses one class or
  group more, duplicate class and group names and duplicate layouts;
- the Prometheus queries of a re-plan, counted at the client, are the same at 16 and at 256 classes: one per history
  source plus one for capacity;
- at 256 x 64 status stays well under 256 KiB and every ConfigMap under 1 MiB; the per-class plan is in the plan's
  detail ConfigMaps (joined here independently of the operator), sparse, and agrees with the router document and
  the state ConfigMap; the next re-plan warm-starts from it; forced into small chunks it is stored and read back
  across several ConfigMaps, and chunks past a shrunken document are emptied.

Correctness only: counts and sizes, never wall-clock time (the time is benchmarks/replan.py --fleet).
"""

from __future__ import annotations

import copy
import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kvcore.planner.planmodel import Plan
from kvcore.planner import plan as kv_plan
from kvplan_dev import pytest_fixtures
from kvplan_dev.fleet import Fleet
from kvplan_dev.openmetrics import Window
from kvplan_dev.prom import LocalPrometheus
from kvplan_operator.targets import plandetail
from kvplan_operator.kube import Kube
from kvplan_operator.prom import PromClient, PromConnection
from kvplan_operator.reconcile import Deps, reconcile
from operator_checks import detail_document


pytestmark = pytest.mark.integration

CLASSES, GROUPS, SMALL = 256, 64, 16
STATUS_LIMIT = 256 * 1024
CONFIGMAP_LIMIT = 1024 * 1024


class World:
    """Two namespaces (the first 256 and the first 16 classes of one seeded fleet, the same 64 groups), their
    Deployments and KVPlans, and a Prometheus holding both namespaces' series; ``now`` is just after the backfilled
    history ends."""

    def __init__(self, kube_api: Any, prom: LocalPrometheus, fleets: dict[int, Fleet], now: float) -> None:
        from kubernetes import client

        self.api, self.prom, self.fleets, self.now = kube_api, prom, fleets, now
        self.kube = Kube(kube_api)
        self.clients: list[PromClient] = []
        self.previous: dict[int, list[Plan | None]] = {n: [] for n in fleets}
        self.plans: dict[int, list[Plan]] = {n: [] for n in fleets}
        for n, fleet in fleets.items():
            client.CoreV1Api(kube_api).create_namespace({"metadata": {"name": fleet.namespace}})
            for body in fleet.deployments():
                client.AppsV1Api(kube_api).create_namespaced_deployment(fleet.namespace, body)
            client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
                "kvplan.io", "v1beta1", fleet.namespace, "kvplans", {
                    "apiVersion": "kvplan.io/v1beta1", "kind": "KVPlan", "metadata": {"name": "fleet"},
                    "spec": fleet.spec(prom.url, classes=n)})

    def ns(self, n: int) -> str:
        return self.fleets[n].namespace

    def reconcile(self, n: int) -> tuple[Any, int, dict[str, Any]]:
        """One reconcile of the n-class KVPlan: (outcome, Prometheus requests it sent, the KVPlan after)."""
        def factory(conn: PromConnection) -> PromClient:
            self.clients.append(PromClient.connect(conn))
            return self.clients[-1]

        def planner(instance: Any, *, previous: Plan | None = None) -> Plan:
            self.previous[n].append(previous)
            self.plans[n].append(kv_plan(instance, previous=previous))
            return self.plans[n][-1]

        before = sum(c.requests_sent for c in self.clients)
        deps = Deps(kube=self.kube, prom_factory=factory, planner=planner, clock=lambda: self.now)
        out = reconcile(self.kube.get_kvplan(self.ns(n), "fleet"), deps)
        sent = sum(c.requests_sent for c in self.clients) - before
        return out, sent, self.kube.get_kvplan(self.ns(n), "fleet")

    def configmaps(self, n: int) -> dict[str, dict[str, Any]]:
        from kubernetes import client

        items = client.CoreV1Api(self.api).list_namespaced_config_map(self.ns(n)).items
        return {cm.metadata.name: self.api.sanitize_for_serialization(cm) for cm in items}

    def detail(self, n: int) -> dict[str, Any]:
        doc = detail_document(lambda name: self.kube.get_configmap(self.ns(n), name))
        assert doc is not None, f"no plan detail in {self.ns(n)}"
        return doc


@pytest.fixture(scope="module")
def world(crd, kube_api) -> Iterator[World]:
    from kubernetes import client

    tag = secrets.token_hex(3)
    fleets = {n: Fleet(CLASSES, GROUPS, namespace=f"t-fleet{n}-{tag}", pods_per_class=1) for n in (CLASSES, SMALL)}
    end = time.time() - 120
    window = Window(end_unix_s=end, duration_s=6 * 3600, step_s=600)  # 6 h at one sample per 10 min
    prom = LocalPrometheus()
    try:
        prom.backfill([s for n, fleet in fleets.items() for s in fleet.series(window, classes=n)], window)
        prom.start()
    except Exception as exc:  # loud, never a skip
        prom.stop()
        pytest_fixtures.STARTED.extend(prom.history)
        pytest.fail(f"backfilled Prometheus did not start: {exc}")
    world = World(kube_api, prom, fleets, end + 30)
    try:
        yield world
    finally:
        for fleet in fleets.values():
            client.CoreV1Api(kube_api).delete_namespace(fleet.namespace)
        prom.stop()
        pytest_fixtures.STARTED.extend(prom.history)


def _create(kube_api: Any, namespace: str, spec: dict[str, Any]) -> str:
    """Create a KVPlan (server-side dry run: nothing stored); '' when accepted, else the apiserver's message."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    body = {"apiVersion": "kvplan.io/v1beta1", "kind": "KVPlan", "metadata": {"name": "probe"}, "spec": spec}
    try:
        client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
            "kvplan.io", "v1beta1", namespace, "kvplans", body, dry_run="All")
    except ApiException as exc:
        return str(json.loads(exc.body).get("message"))
    return ""


def test_the_crd_takes_a_fleet_and_refuses_past_it(world):
    fleet = world.fleets[CLASSES]
    spec = fleet.spec("http://prometheus:9090")
    assert len(spec["classes"]) == CLASSES and len(spec["groups"]) == GROUPS
    assert _create(world.api, fleet.namespace, spec) == ""  # within the CEL cost budget, every rule passes
    bigger = Fleet(CLASSES + 1, GROUPS + 1).spec("http://prometheus:9090")
    message = _create(world.api, fleet.namespace, spec | {"classes": bigger["classes"]})
    assert "spec.classes: Too many: 257: must have at most 256 items" in message, message
    message = _create(world.api, fleet.namespace, spec | {"groups": bigger["groups"]})
    assert "spec.groups: Too many: 65: must have at most 64 items" in message, message
    twice = copy.deepcopy(spec)
    twice["classes"][7]["name"] = twice["classes"][3]["name"]
    assert "spec.classes[7]: Duplicate value" in _create(world.api, fleet.namespace, twice)
    twice = copy.deepcopy(spec)
    twice["groups"][9]["name"] = twice["groups"][2]["name"]
    assert "spec.groups[9]: Duplicate value" in _create(world.api, fleet.namespace, twice)
    twice = copy.deepcopy(spec)
    twice["groups"][0]["layouts"].append({"tp": twice["groups"][0]["layouts"][0]["tp"]})  # pp defaults to 1
    assert twice["groups"][0]["layouts"][0].get("pp", 1) == 1
    assert "spec.groups[0].layouts[9]: Duplicate value" in _create(world.api, fleet.namespace, twice)


def test_queries_do_not_grow_with_the_classes_and_the_record_stays_small(world, monkeypatch):
    sent = {}
    for n in (SMALL, CLASSES):
        out, sent[n], body = world.reconcile(n)
        assert out.ok, (n, out.reason, out.message)
        assert body["status"]["plan"]["classCounts"]["total"] == n
    assert sent == {SMALL: 4, CLASSES: 4}  # the kvplan source, capacity, calibration and step times, whatever the classes
    ns = world.ns(CLASSES)
    body = world.kube.get_kvplan(ns, "fleet")
    status = body["status"]
    assert len(json.dumps(status)) < STATUS_LIMIT / 4, len(json.dumps(status))  # well under: 64 KiB
    assert len(json.dumps(body)) < CONFIGMAP_LIMIT  # the whole object, spec and managedFields included
    assert "lastGoodPlan" not in status and "classes" not in status["plan"]
    assert len(status["plan"]["groups"]) == GROUPS and status["summary"]["classes"] == CLASSES
    assert status["plan"]["method"] == "fleet" and status["plan"]["lowerBound"] <= status["objective"]["total"]
    sizes = {name: sum(len(v.encode()) for v in (cm.get("data") or {}).values())
             for name, cm in world.configmaps(CLASSES).items()}
    assert {"fleet-kvplan", "llm-router", "fleet-plan"} <= set(sizes) and max(sizes.values()) < CONFIGMAP_LIMIT
    doc = world.detail(CLASSES)
    assert doc["plan"] == status["plan"]["id"] and len(doc["classes"]) == CLASSES
    assert status["plan"]["detail"]["bytes"] == sum(sizes[c] for c in status["plan"]["detail"]["configMaps"])
    router = json.loads(world.kube.get_configmap(ns, "llm-router")["data"]["routing.json"])
    state = world.kube.get_configmap(ns, "fleet-kvplan").get("data") or {}
    assert not [k for k in state if k.startswith("KVPLAN_RESERVE_")]  # read by nothing: not written
    groups = set(status["plan"]["groups"])
    for name, c in doc["classes"].items():
        assert 0 not in c["routing"].values() and set(c["routing"]) <= groups  # sparse
        assert router["classes"][name]["weights"] == c["routing"]
        if c["admitted"]:
            assert sum(c["routing"].values()) == pytest.approx(1.0, abs=1e-5)
    # The next re-plan starts from the stored plan
    out, again, _ = world.reconcile(CLASSES)
    assert out.ok and again == 4  # the same four queries: nothing re-read per class
    previous = world.previous[CLASSES][-1]
    first = world.plans[CLASSES][0]
    assert previous is not None and [c.reserve_tokens for c in previous.classes] == [
        c.reserve_tokens for c in first.classes]
    # Forced into 64 KiB chunks: stored across several ConfigMaps, each under the chunk size, read back whole
    monkeypatch.setattr(plandetail, "CHUNK_BYTES", 64 * 1024)
    world.now += 600  # another window: another plan, another document
    out, _, body = world.reconcile(CLASSES)
    assert out.ok
    names = body["status"]["plan"]["detail"]["configMaps"]
    assert len(names) >= 3 and names[1] == "fleet-plan-1"
    cms = world.configmaps(CLASSES)
    assert all(len(cms[n]["data"]["plan.json"]) <= 64 * 1024 for n in names)
    assert world.detail(CLASSES)["plan"] == body["status"]["plan"]["id"]
    assert plandetail.read_detail(world.kube, ns, "fleet").doc == world.detail(CLASSES)
    monkeypatch.setattr(plandetail, "CHUNK_BYTES", 512 * 1024)
    out, _, body = world.reconcile(CLASSES)
    assert out.ok and body["status"]["plan"]["detail"]["configMaps"] == ["fleet-plan"]
    cms = world.configmaps(CLASSES)
    for name in names[1:]:
        assert "plan.json" not in (cms[name].get("data") or {})
        assert cms[name]["metadata"]["annotations"]["kvplan.io/plan-chunk"] == "unused"
    assert world.previous[CLASSES][-1] is not None  # the chunked document warm-started this plan
