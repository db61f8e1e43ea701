"""Collisions of names between KVPlans of one namespace (issue 26, item 6), over the operator's wrapper (a fake
cluster, the raw client unused).

Before issue 26, ``router.configMap`` set to ``<other>-kvplan`` overwrote another KVPlan's state ConfigMap with a
routing document, and a KVPlan named ``pooled`` wrote its plan detail into another KVPlan's ConfigMap
``pooled-plan``. Now every ConfigMap kvplan writes carries ``kvplan.io/owner`` and is checked before writing
(annotation and ownerReference; a create that meets an object re-reads and re-checks it), and router names of
the generated forms (``*-kvplan``, ``*-plan``, ``*-plan-<n>``) are refused in the spec.

Table: the router ConfigMap against another KVPlan's state, detail, detail chunk and router ConfigMaps; this
KVPlan's state and detail names already taken (by another KVPlan's router ConfigMap written before the fix, by a
ConfigMap nobody owns, by a KVPlan that is gone); KVPlans with suffix-overlapping names (``x``, ``x-plan``,
``x-kvplan``, ``x-plan-1`` ...) side by side; and the create race. In each, the other KVPlan's objects are
byte-for-byte unchanged, and the refusal names the object and its owner.
"""

from __future__ import annotations

import copy
import itertools
import json
from typing import Any

import pytest

from kvplan_operator import conditions as C
from kvplan_operator.desired import Stage, Write
from kvplan_operator.kube import KubeError
from kvplan_operator.targets.plandetail import chunk_name
from kvplan_operator.reconcile import Deps, reconcile
from kvplan_operator.spec import generated_configmap_form
from kvplan_operator.targets.state_configmap import write_configmap
from op_fakes import FakeKube, ScriptedKnobs, dep, kvplan  # type: ignore[import-not-found]
from operator_checks import detail_document  # type: ignore[import-not-found]
from op_faults_world import T0, busy, fixed_plan, route  # type: ignore[import-not-found]
from op_history_world import RecordedProm  # type: ignore[import-not-found]
from op_targets_world import SPEC  # type: ignore[import-not-found]


def spec_for(prefix: str, router: str | None) -> dict:
    """SPEC with its own Deployments (``<prefix>-big``, ``<prefix>-small``) and router ConfigMap ``router``."""
    s = copy.deepcopy(SPEC)
    s["groups"][0]["deployment"], s["groups"][1]["deployment"] = f"{prefix}-big", f"{prefix}-small"
    s["groups"][1].pop("service", None)
    s["router"] = {"configMap": {"name": router}} if router else {}
    return s


def deps(kube: FakeKube) -> Deps:
    prom = RecordedProm(matrix=busy())
    return Deps(kube=kube, prom_factory=lambda *a: prom, planner=lambda inst, previous=None: fixed_plan(4, 100.0, 0.5),
                clock=lambda: T0, resolve=lambda host: ["10.0.0.9"], knobs=ScriptedKnobs())


class Namespace:
    """One fake namespace holding several KVPlans (each with its own status) and their Deployments."""

    def __init__(self) -> None:
        self.kube = FakeKube(httproutes={"llm": route()})
        self.specs: dict[str, dict] = {}
        self.status: dict[str, dict] = {}

    def add(self, name: str, router: str | None, *, exists: bool = True) -> None:
        self.specs[name] = spec_for(name, router)
        for g in ("big", "small"):
            self.kube.deployments[f"{name}-{g}"] = dep(f"{name}-{g}")
        if exists:
            self.kube.kvplans[name] = kvplan(self.specs[name], self.kube, name=name)

    def run(self, name: str, *, raw_spec: bool = False) -> Any:
        self.kube.status = self.status.get(name, {})
        self.kube.writes.clear()
        out = reconcile(kvplan(self.specs[name], self.kube, name=name), deps(self.kube))
        self.status[name] = self.kube.status
        return out

    def objects_of(self, name: str) -> dict[str, Any]:
        """Every ConfigMap that names KVPlan ``name`` as owner, as stored."""
        return {k: copy.deepcopy(v) for k, v in self.kube.configmaps.items()
                if (v["metadata"].get("annotations") or {}).get("kvplan.io/owner") == f"ns/{name}"
                or any(r.get("name") == name for r in v["metadata"].get("ownerReferences") or [])}


def legacy_router(name: str, owner: str) -> dict:
    """A router ConfigMap as an operator before issue 26 wrote it (owner annotation, no ownerReference)."""
    return {"metadata": {"name": name, "annotations": {"kvplan.io/owner": owner, "kvplan.io/plan": "x"}},
            "data": {"routing.json": "{}"}}


#: id -> (setup of the namespace (the victim "other" already reconciled when it exists), the subject's router name,
#: expected reason of the subject's reconcile (None: success), text the message must contain)
def other_then(router: str | None, subject: str = "mine") -> Any:
    def setup(ns: Namespace) -> None:
        ns.add("other", "other-router")
        assert ns.run("other").ok
        ns.add(subject, router)
    return setup


def legacy_object_named(cm: str, owner: str | None, *, owner_exists: bool = True, subject: str = "mine") -> Any:
    def setup(ns: Namespace) -> None:
        if owner is not None:
            ns.add(owner.split("/")[1], None, exists=owner_exists)
            ns.kube.configmaps[cm] = legacy_router(cm, owner)
        else:
            ns.kube.configmaps[cm] = {"metadata": {"name": cm, "annotations": {}}, "data": {"app.conf": "x=1"}}
        ns.add(subject, "mine-router")
    return setup


CASES = {
    "router-is-other-state": (other_then("other-kvplan"), C.INVALID_SPEC, "spec.router.configMap.name"),
    "router-is-other-plan-detail": (other_then("other-plan"), C.INVALID_SPEC, "spec.router.configMap.name"),
    "router-is-other-plan-detail-chunk": (other_then("other-plan-1"), C.INVALID_SPEC, "spec.router.configMap.name"),
    "router-is-other-router": (other_then("other-router"), C.OWNED_BY_OTHER, "managed by KVPlan ns/other"),
    "router-is-own-state": (other_then("mine-kvplan"), C.INVALID_SPEC, "reserved"),
    "router-is-a-future-kvplans-state": (other_then("future-kvplan"), C.INVALID_SPEC, "reserved"),
    "router-is-other-router-whose-kvplan-is-gone": (
        legacy_object_named("mine-router", "ns/gone", owner_exists=False), None, ""),
    "own-state-is-a-legacy-router-of-a-live-kvplan": (
        legacy_object_named("mine-kvplan", "ns/other"), C.OWNED_BY_OTHER, "managed by KVPlan ns/other"),
    "own-plan-detail-is-a-legacy-router-of-a-live-kvplan": (
        legacy_object_named("pooled-plan", "ns/other", subject="pooled"), C.OWNED_BY_OTHER,
        "ConfigMap pooled-plan (this KVPlan's plan detail ConfigMap by name) is managed by KVPlan ns/other"),
    "own-state-is-a-configmap-nobody-owns": (legacy_object_named("mine-kvplan", None), C.OWNED_BY_OTHER,
                                             "is not this KVPlan's"),
    "own-plan-detail-is-a-configmap-nobody-owns": (legacy_object_named("mine-plan", None), C.OWNED_BY_OTHER,
                                                   "is not this KVPlan's"),
    "own-state-was-a-router-of-a-gone-kvplan": (legacy_object_named("mine-kvplan", "ns/gone", owner_exists=False),
                                                None, ""),
}


@pytest.mark.parametrize("case", list(CASES))
def test_collisions_are_refused_and_nothing_of_the_other_kvplan_changes(case: str) -> None:
    setup, reason, text = CASES[case]
    ns = Namespace()
    setup(ns)
    subject = [n for n in ns.specs if n != "other" and n != "gone"][-1]
    others = {n: ns.objects_of(n) for n in ns.specs if n != subject}
    untouched = {k: copy.deepcopy(v) for k, v in ns.kube.configmaps.items()
                 if all(k not in objs for objs in others.values())}
    out = ns.run(subject)
    if reason is None:
        assert out.ok, out
        for cm in (f"{subject}-kvplan", f"{subject}-plan", "mine-router"):
            if cm in ns.kube.configmaps:
                assert ns.kube.configmaps[cm]["metadata"]["annotations"]["kvplan.io/owner"] == f"ns/{subject}", cm
        return
    assert out.reason == reason and text in out.message, out
    for n, objs in others.items():
        if n in ns.kube.kvplans:  # a live KVPlan's objects are exactly as they were
            assert ns.objects_of(n) == objs, n
    for k, v in untouched.items():
        assert ns.kube.configmaps[k] == v, k
    assert [w for w in ns.kube.writes if w != "status"] == [], ns.kube.writes
    assert not any(k.startswith(subject + "-") for k in ns.kube.deployments if
                   ns.kube.deployments[k]["metadata"]["annotations"])  # no Deployment written either


#: KVPlan names whose generated names overlap as strings (one is another's with -plan, -kvplan, -plan-<n> added).
OVERLAPPING = ["x", "x-plan", "x-kvplan", "x-plan-1", "x-plan-plan", "x-kv", "x-plan-kvplan", "plan", "kvplan"]


def generated(name: str, chunks: int = 4) -> set[str]:
    return {f"{name}-kvplan"} | {chunk_name(name, i) for i in range(chunks)}


@pytest.mark.parametrize(("a", "b"), list(itertools.combinations(OVERLAPPING, 2)),
                         ids=[f"{a}~{b}" for a, b in itertools.combinations(OVERLAPPING, 2)])
def test_generated_names_never_collide(a: str, b: str) -> None:
    """State and detail-chunk names of two KVPlans are disjoint, however their names overlap; and none of them is
    allowed as a router ConfigMap name."""
    assert generated(a, 64).isdisjoint(generated(b, 64))
    assert all(generated_configmap_form(n) for n in generated(a) | generated(b))


@pytest.mark.parametrize("names", [["x", "x-plan"], ["x", "x-kvplan"], ["x-plan", "x-plan-1", "x"],
                                   ["x-plan-plan", "x-plan", "x"]], ids=lambda v: "+".join(v))
def test_suffix_overlapping_kvplans_side_by_side(names: list[str]) -> None:
    """KVPlans with suffix-overlapping names reconcile in one namespace, in either order, each writing only its own
    ConfigMaps: each state ConfigMap and detail document names its own KVPlan."""
    for order in (names, names[::-1]):
        ns = Namespace()
        for n in order:
            ns.add(n, f"{n}-router")
        for _ in range(2):
            for n in order:
                assert ns.run(n).ok, n
        for n in order:
            assert ns.kube.configmaps[f"{n}-kvplan"]["metadata"]["annotations"]["kvplan.io/owner"] == f"ns/{n}"
            doc = detail_document(ns.kube.configmaps.get, kvplan=n)
            assert doc is not None and doc["kvplan"] == f"ns/{n}"
            assert json.loads(ns.kube.configmaps[f"{n}-router"]["data"]["routing.json"])["kvplan"] == f"ns/{n}"


class RaceKube(FakeKube):
    """A create that loses a race: the object appears (as ``winner``) between observe and apply."""

    winner: dict | None = None

    def create_configmap(self, ns: str, body: Any) -> None:
        if self.winner is not None:
            self.configmaps[body["metadata"]["name"]] = copy.deepcopy(self.winner)
        super().create_configmap(ns, body)


@pytest.mark.parametrize(("target", "winner", "refused"), [
    pytest.param("router-configmap", legacy_router("r", "ns/other"), True, id="router-created-by-another-kvplan"),
    pytest.param("router-configmap", {"metadata": {"name": "r", "annotations": {}}, "data": {}}, False,
                 id="router-created-by-a-user"),
    pytest.param("state-configmap", {"metadata": {"name": "r", "annotations": {}}, "data": {}}, True,
                 id="state-created-by-someone-else"),
    pytest.param("plan-detail", legacy_router("r", "ns/other"), True, id="detail-created-by-another-kvplan"),
    pytest.param("plan-detail", legacy_router("r", "ns/mine"), False, id="detail-created-by-this-kvplan"),
])
def test_a_create_that_meets_an_object_rechecks_its_owner(target: str, winner: dict, refused: bool) -> None:
    kube = RaceKube()
    kube.winner = winner
    body = {"metadata": {"name": "r", "annotations": {"kvplan.io/owner": "ns/mine"}}, "data": {"k": "v"}}
    w = Write(Stage.STATE, target, "ConfigMap", "r", "create", body)
    if refused:
        with pytest.raises(KubeError) as info:
            write_configmap(kube, "ns", w)
        assert info.value.status == 409 and "meanwhile" in str(info.value)
        assert kube.configmaps["r"] == winner  # not written over
    else:
        write_configmap(kube, "ns", w)
        assert kube.configmaps["r"]["metadata"]["annotations"]["kvplan.io/owner"] == "ns/mine"
