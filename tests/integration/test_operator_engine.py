"""Engine knobs and kvplan's vLLM plugin on the real local control plane (etcd + kube-apiserver) with a real
Prometheus backfilled from the shared Azure traces, the real planner and kvcore's real knob rule (issue 13, items 3
and 4c):

- groups with ``plugin.enabled``: each Deployment gets ``--scheduler-cls`` (async unless the planned layout uses
  pipeline parallelism), the state ConfigMap volume projecting its own ``reservations-<group>.json`` (kvcore's
  real reservation rule's answer for that group, run with the real knob rule), the read-only mount at
  ``/etc/kvplan`` and ``KVPLAN_RESERVATIONS_FILE`` naming it; each file is parsed by ``kvcore.reservation_file``
  and by the plugin's own reader (``kvplan_vllm.source``) and gates with what ``status.plan.groups.<g>.gate``
  says; no object disagrees with another (``operator_checks``);
- a reservation change (one class reserving differently on the two groups) rewrites the ConfigMap and leaves the
  Deployments' pod templates untouched (the template's hash names the ReplicaSet: no rollout);
- turning the plugin off removes exactly what it added, and its group's file once no pod projects it;
- an engine too old (vLLM 0.32.1) gets neither ``--watermark`` nor the plugin, and EngineKnobs=False with reason
  KnobUnsupported naming the group, the version and the knob, while the rest of the plan applies;
- the apiserver itself refuses bad engine and class fields (CEL and patterns);
- on Gateway API's own HTTPRoute CRD, class rules carry ``X-Vllm-Priority`` while a group runs the priority policy,
  and the fleet rule the priority of requests of no class.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvcore.reservation_file import parse_reservations
from kvplan_operator import conditions as C
from kvplan_operator.kube import Kube
from operator_checks import file_disagreements, knob_disagreements  # type: ignore[import-not-found]
from operator_world import REPO, backfill, cond, detail, fetch, kvplan_spec, refused, run, setup
from operator_httproute_world import crds  # type: ignore[import-not-found]  # noqa: F401 - the upstream CRDs fixture

pytestmark = pytest.mark.integration

ASYNC = "kvplan_vllm.scheduler.AsyncReservationScheduler"
GROUPS = {"pool-a": "vllm-a", "pool-b": "vllm-b"}


def vllm(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    d = kube.get_deployment(namespace, name)
    return next(c for c in d["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def patch_spec(kube_api, namespace: str, spec: dict) -> None:
    from kubernetes import client

    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object(
        "kvplan.io", "v1alpha1", namespace, "kvplans", "fleet", {"spec": spec})


class HalfReserves:
    """A reservation rule answering instantly (the real one's answer depends on the trace; a change is what the second
    reconcile is about): per group, each class routed there gets ``share[group]`` x its plan y."""

    def __init__(self, share: dict[str, float]) -> None:
        self.share = share

    def __call__(self, plan: Any, instance: Any, *, groups: Any = None, **_: Any) -> dict:
        from kvcore.rules.reserve import ReserveChoice

        out = {}
        for g in plan.groups:
            if g.replicas > 0 and g.tp > 0 and (groups is None or g.name in groups):
                ys = {c.name: int(round(self.share[g.name] * c.reserve_tokens)) for c in plan.classes
                      if c.admitted and c.routing.get(g.name, 0) > 0}
                out[g.name] = ReserveChoice(group=g.name, reserves=ys, sources=dict.fromkeys(ys, "scripted"),
                                            rho=dict.fromkeys(ys, 1.0), token_interval_s=0.03, reason="scripted")
        return out


def test_plugin_mounts_each_groups_file_and_reservations_change_without_a_rollout(
        crd, kube_api, kube, namespace, prometheus, traces_dir, tmp_path: Path):
    backfill(prometheus, traces_dir)
    spec = kvplan_spec(prometheus.url)
    for g in spec["groups"]:
        g["plugin"] = {"enabled": True}
    spec["classes"][0]["maxPromptTokens"] = 1500
    spec["classes"][1]["fleetDefault"] = True
    setup(kube_api, namespace, spec)
    out = run(kube, namespace)  # kvcore's real knob and reservation rules
    assert out.ok, out
    body = fetch(kube, namespace)
    st = body["status"]
    assert cond(body, C.APPLIED)["reason"] == C.APPLY_SUCCEEDED
    assert cond(body, C.ENGINE_KNOBS)["status"] == "True", cond(body, C.ENGINE_KNOBS)
    assert sorted(st["plan"]["rules"]["ran"]) == sorted(f"{g}/{r}" for g in GROUPS for r in ("knobs", "reservations"))
    assert 0 < st["plan"]["rules"]["work"] and st["plan"]["rules"]["pending"] == {}
    state = kube.get_configmap(namespace, "fleet-kvplan")
    assert sorted(k for k in state["data"] if k.startswith("reservations")) == [
        f"reservations-{g}.json" for g in sorted(GROUPS)]
    doc = detail(kube, namespace)  # per class: the plan's detail (status has counts only)
    docs = {}
    for g, name in GROUPS.items():
        d = kube.get_deployment(namespace, name)
        c = vllm(kube, namespace, name)
        want = ASYNC  # vLLM 0.33 keeps async scheduling with PP > 1 too (Model Runner V2, the default)
        assert flag(c["args"], "--scheduler-cls") == want == st["plan"]["groups"][g]["engine"]["schedulerCls"]
        key = f"reservations-{g}.json"
        assert d["spec"]["template"]["spec"]["volumes"] == [{"name": "kvplan-reservations", "configMap": {
            "name": "fleet-kvplan", "items": [{"key": key, "path": key}], "defaultMode": 420}}]  # the apiserver's
        assert c["volumeMounts"] == [{"name": "kvplan-reservations", "mountPath": "/etc/kvplan", "readOnly": True}]
        assert {"name": "KVPLAN_RESERVATIONS_FILE", "value": f"/etc/kvplan/{key}"} in c["env"]
        docs[g] = parse_reservations(state["data"][key])
        gate, listed = st["plan"]["groups"][g]["gate"], doc["gates"][g]["classes"]
        assert {k: v["reserveTokens"] for k, v in listed.items()} == {k: docs[g].reserve(k) for k in listed}
        assert gate["reason"] == doc["gates"][g]["reason"] and "failed" not in gate and gate["pending"] is False
        assert gate["classes"] == len(listed) and gate["reserving"] == sum(v["reserveTokens"] > 0
                                                                           for v in listed.values())
        assert all(docs[g].reserve(k) <= v["planTokens"] for k, v in listed.items())
        assert docs[g].default_class == "code" and [(r.max_prompt_tokens, r.klass) for r in
                                                    docs[g].prompt_length_rules] == [(1500, "chat")]
    deployments = {d: kube.get_deployment(namespace, d) for d in GROUPS.values()}
    assert knob_disagreements(deployments=deployments, groups=GROUPS, status=st, state=state, detail=doc) == []
    assert file_disagreements(deployments=deployments, groups=GROUPS, state=state) == []
    from kvplan_vllm.source import ReservationSource  # the plugin's own reader (no vLLM import)

    (tmp_path / "r.json").write_text(state["data"]["reservations-pool-b.json"])
    source = ReservationSource(tmp_path / "r.json", check_every=1)
    assert source.check() and source.current.reserve("chat") == docs["pool-b"].reserve("chat")

    before = {n: kube.get_deployment(namespace, n) for n in GROUPS.values()}
    out = run(kube, namespace, reserves=HalfReserves({"pool-a": 0.5, "pool-b": 0.25}))
    assert out.ok, out
    st2 = fetch(kube, namespace)["status"]
    state2 = kube.get_configmap(namespace, "fleet-kvplan")
    gates2 = detail(kube, namespace)["gates"]
    for g, share in (("pool-a", 0.5), ("pool-b", 0.25)):
        file = parse_reservations(state2["data"][f"reservations-{g}.json"])
        for k, v in gates2[g]["classes"].items():
            assert file.reserve(k) == v["reserveTokens"]
            assert abs(v["reserveTokens"] - share * v["planTokens"]) <= 1  # the detail shows y rounded
    assert parse_reservations(state2["data"]["reservations-pool-a.json"]).reserve("chat") != parse_reservations(
        state2["data"]["reservations-pool-b.json"]).reserve("chat")  # one class, two groups, two reservations
    assert st2["plan"]["detail"]["configMaps"] == ["fleet-plan"]
    for n, b in before.items():
        # no rollout: the pod template (whose hash names the ReplicaSet) is untouched, and the Deployment is not even
        # written (a reservation lives in the state ConfigMap only), so its generation stays
        b2 = kube.get_deployment(namespace, n)
        assert b2["spec"]["template"] == b["spec"]["template"], n
        assert b2["metadata"]["generation"] == b["metadata"]["generation"], n
    assert out.changed and all("template" not in x for x in out.changed), out.changed
    assert not any(x.startswith("Deployment/") for x in out.changed), out.changed

    patch_spec(kube_api, namespace, {"groups": [spec["groups"][0], spec["groups"][1] | {"plugin": {"enabled": False}}]})
    out = run(kube, namespace)
    assert out.ok, out
    c = vllm(kube, namespace, "vllm-b")
    pod = kube.get_deployment(namespace, "vllm-b")["spec"]["template"]["spec"]
    assert "--scheduler-cls" not in c["args"] and not pod.get("volumes") and not c.get("volumeMounts")
    assert {e["name"] for e in c["env"]} == {"HF_HOME"}
    assert run(kube, namespace).ok  # no pod projects pool-b's file any more: it goes
    assert sorted(k for k in kube.get_configmap(namespace, "fleet-kvplan")["data"] if k.startswith("reservations")) \
        == ["reservations-pool-a.json"]


def test_an_old_engine_gets_no_watermark_nor_plugin(crd, cluster, kube_api, kube, namespace, prometheus, traces_dir):
    backfill(prometheus, traces_dir)
    spec = kvplan_spec(prometheus.url)
    spec["groups"][0]["engine"] = {"vllmVersion": "0.32.1"}
    spec["groups"][0]["plugin"] = {"enabled": True}
    setup(kube_api, namespace, spec)
    out = run(kube, namespace)
    assert out.ok, out
    body = fetch(kube, namespace)
    knobs = cond(body, C.ENGINE_KNOBS)
    assert (knobs["status"], knobs["reason"]) == ("False", C.KNOB_UNSUPPORTED)
    assert "group pool-a: --watermark not written: engine.vllmVersion 0.32.1" in knobs["message"]
    assert "group pool-a: --scheduler-cls" in knobs["message"] and "needs vLLM 0.33.x" in knobs["message"]
    assert cond(body, C.READY)["status"] == "True" and cond(body, C.APPLIED)["reason"] == C.APPLY_SUCCEEDED
    a = vllm(kube, namespace, "vllm-a")
    assert not {"--watermark", "--scheduler-cls"} & set(a["args"]) and "volumeMounts" not in a
    assert "volumes" not in kube.get_deployment(namespace, "vllm-a")["spec"]["template"]["spec"]
    assert flag(a["args"], "--tensor-parallel-size") == str(body["status"]["plan"]["groups"]["pool-a"]["tp"])
    events = [e.reason for e in kube.core.list_namespaced_event(namespace).items if e.involved_object.kind == "KVPlan"]
    assert C.KNOB_UNSUPPORTED in events
    wide = cluster.kubectl("get", "kvp", "-n", namespace, "-o", "wide").stdout.split("\n")
    assert wide[0].split()[-3:] == ["KNOBS", "STEPTIMES", "AGE"] and wide[1].split()[-3] == C.KNOB_UNSUPPORTED, wide
    # backfilled series hold no engine steps: the groups keep their profiles' step times, and the column says so
    assert wide[1].split()[-2] == C.STEP_TIMES_FROM_PROFILE, wide


@pytest.mark.parametrize(("mutate", "needle"), [
    pytest.param(lambda s: [c.update(fleetDefault=True) for c in s["classes"]], "at most one class may be the "
                 "fleetDefault", id="two-fleet-defaults"),
    pytest.param(lambda s: s["groups"][0].update(engine={"vllmVersion": "latest"}), "vllmVersion",
                 id="version-pattern"),
    pytest.param(lambda s: s["groups"][0].update(engine={"knobs": False}), "knobs", id="yaml-off-boolean"),
    pytest.param(lambda s: s["groups"][0].update(plugin={"scheduler": "Fast"}), "scheduler", id="scheduler-enum"),
    pytest.param(lambda s: s["classes"][0].update(maxPromptTokens=-1), "maxPromptTokens", id="negative-rule"),
    pytest.param(lambda s: s["groups"][0].update(engine={"latencyTargets": {"ttftSeconds": 0}}), "ttftSeconds",
                 id="ttft-target-zero"),
    pytest.param(lambda s: s["groups"][0].update(engine={"latencyTargets": {"tpotSeconds": 61}}), "tpotSeconds",
                 id="tpot-target-over-60"),
])
def test_bad_engine_fields_refused_by_apiserver(crd, kube_api, namespace, mutate, needle):
    spec = kvplan_spec("http://127.0.0.1:9")
    mutate(spec)
    error = refused(kube_api, namespace, spec, version="v1alpha1")  # the deprecated version: the same schema
    assert error.status == 422 and needle in error.body


def test_engine_defaults_applied_by_apiserver(crd, kube_api, kube, namespace):
    setup(kube_api, namespace, kvplan_spec("http://127.0.0.1:9"), deployments=())
    s = fetch(kube, namespace)["spec"]
    # vllmVersion: the label kvplan.io/vllm-version, else the image's tag, else unknown
    assert s["groups"][0]["engine"] == {"knobs": "Auto", "latencyTargets": {"ttftSeconds": 2, "tpotSeconds": 0.1}}
    assert s["groups"][0]["plugin"] == {"enabled": False, "scheduler": "Auto"}
    assert s["classes"][0]["fleetDefault"] is False and "maxPromptTokens" not in s["classes"][0]


def test_gate_example_end_to_end(crd, cluster, kube_api, kube, namespace, prometheus):
    """examples/kvplan-70b-gate.yaml over examples/vllm-deployments.yaml, with the plugin's per-class series of the
    example fleet (kvplan_dev.demo_series) in Prometheus: Ready, the gate on the interactive group only, the file's
    prompt-length rules and fleet default as the example says; the ungated group mounts its classification file
    (nothing reserved) for the stat logger."""
    import json
    import time

    import yaml

    from kvcore.planner import plan
    from kvplan_dev.demo_series import fleet_series
    from kvplan_dev.openmetrics import Window, read_trace
    from kvplan_operator.prom import PromClient
    from kvplan_operator.reconcile import Deps, reconcile

    window = Window(end_unix_s=time.time() - 60, duration_s=6 * 3600, step_s=60)
    series, _ = fleet_series(read_trace(REPO / "kvcore" / "data" / "traces" / "azure2023_conv.csv"), window,
                             namespace=namespace, plugin=True)
    prometheus.backfill(series, window)
    doc = yaml.safe_load((REPO / "examples" / "kvplan-70b-gate.yaml").read_text())
    doc["spec"]["prometheus"]["url"] = prometheus.url
    cluster.kubectl("-n", namespace, "apply", "-f", str(REPO / "examples" / "vllm-deployments.yaml"))
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input_text=json.dumps(doc))
    deps = Deps(kube=kube, prom_factory=PromClient.connect, planner=plan, backoff_base_s=1.0)
    out = reconcile(kube.get_kvplan(namespace, "llama-70b"), deps)
    body = kube.get_kvplan(namespace, "llama-70b")
    assert out.ok, (out, body.get("status"))
    assert cond(body, C.READY)["status"] == "True" and cond(body, C.ENGINE_KNOBS)["status"] == "True"
    st = body["status"]["plan"]["groups"]
    inter = vllm(kube, namespace, "vllm-llama70b-interactive")
    args = " ".join(inter["args"])
    want = ASYNC  # PP or not: vLLM 0.33's Model Runner V2 schedules asynchronously with PP > 1
    assert f"--scheduler-cls {want}" in args and st["interactive"]["engine"]["schedulerCls"] == want
    assert {"name": "kvplan-reservations", "mountPath": "/etc/kvplan", "readOnly": True} in inter["volumeMounts"]
    batch = vllm(kube, namespace, "vllm-llama70b-batch")
    assert "--scheduler-cls" not in " ".join(batch["args"])
    # the example's histories come from the stat logger: the ungated group mounts its classification file too
    assert {"name": "kvplan-reservations", "mountPath": "/etc/kvplan", "readOnly": True} in batch["volumeMounts"]
    data = kube.get_configmap(namespace, "llama-70b-kvplan")["data"]
    assert sorted(k for k in data if k.startswith("reservations")) == ["reservations-batch.json",
                                                                       "reservations-interactive.json"]
    labels = parse_reservations(data["reservations-batch.json"])
    assert set(labels.reserve_tokens.values()) == {0} and labels.default_class == "batch"  # nothing reserved
    res = parse_reservations(data["reservations-interactive.json"])
    assert res.default_class == "batch"
    assert [(r.max_prompt_tokens, r.klass) for r in res.prompt_length_rules] == [(999, "chat"), (1999, "code")]
    deployments = {g: kube.get_deployment(namespace, d) for g, d in (("interactive", "vllm-llama70b-interactive"),
                                                                      ("batch", "vllm-llama70b-batch"))}
    assert knob_disagreements(deployments=deployments, groups={g: g for g in deployments}, status=body["status"],
                              state=kube.get_configmap(namespace, "llama-70b-kvplan"),
                              detail=detail(kube, namespace, "llama-70b")) == []


class PriorityRule:
    """A knob rule answering instantly: pool-a under --scheduling-policy priority, pool-b stock (the real rule's
    choice depends on the trace; the header is what this test is about)."""

    def __call__(self, plan: Any, instance: Any, *, engine_version: str = "0.33.0", current: Any = None,
                 **_: Any) -> dict:
        from kvcore.rules.knobs import KnobChoice

        return {g.name: KnobChoice(group=g.name, max_num_seqs=256, watermark=0.0, reason="scripted",
                                   scheduling_policy="priority" if g.name == "pool-a" else "fcfs")
                for g in plan.groups if g.replicas > 0 and g.tp > 0}


def test_priority_header_on_the_upstream_httproute(crds, kube_api, kube, namespace, prometheus, traces_dir):
    """On Gateway API's own HTTPRoute CRD (v1.6.3, standard channel): each class rule gets a RequestHeaderModifier
    setting X-Vllm-Priority to the class's priority, merged into a filter the rule already has; the apiserver
    accepts it (its CEL allows one such filter per rule); the fleet rule (requests of no class) gets, merged into the
    user's filter, the priority after every class's (vLLM runs lower first)."""
    from operator_httproute_world import ROUTE, create_services_and_route  # type: ignore[import-not-found]

    backfill(prometheus, traces_dir)
    spec = kvplan_spec(prometheus.url)
    spec["router"]["httpRoute"] = {"name": ROUTE}
    spec["classes"][1]["costs"] = {"preemption": 2, "waste": 1}  # rho 10 vs 2: chat first
    setup(kube_api, namespace, spec)
    created = create_services_and_route(kube_api, namespace)
    out = run(kube, namespace, knobs=PriorityRule())
    assert out.ok, out
    classes = detail(kube, namespace)["classes"]  # per class: the plan's detail (status has counts only)
    assert {c: classes[c]["priority"] for c in ("chat", "code")} == {"chat": 1, "code": 2}
    rules = kube.get_httproute(namespace, ROUTE)["spec"]["rules"]
    assert rules[0]["filters"] == [{"type": "RequestHeaderModifier", "requestHeaderModifier": {
        "set": [{"name": "X-Vllm-Priority", "value": "1"}]}}]
    assert rules[1]["filters"] == [{"type": "RequestHeaderModifier", "requestHeaderModifier": {
        "set": [{"name": "X-Vllm-Priority", "value": "2"}]}}]
    user = created["spec"]["rules"][2]["filters"][0]["requestHeaderModifier"]
    assert rules[2]["filters"] == [{"type": "RequestHeaderModifier", "requestHeaderModifier": {
        **user, "set": [{"name": "X-Vllm-Priority", "value": str(max(classes[c]["priority"] for c in ("chat", "code"))
                                                                  + 1)}]}}]
    version = kube.get_httproute(namespace, ROUTE)["metadata"]["resourceVersion"]
    assert run(kube, namespace, knobs=PriorityRule()).ok
    assert kube.get_httproute(namespace, ROUTE)["metadata"]["resourceVersion"] == version
