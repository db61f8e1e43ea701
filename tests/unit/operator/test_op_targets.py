"""The operator's targets, their pure parts: the Deployment patch (TP/PP args kept/replaced, GPU limits, selector,
tolerations, replicas vs autoscalers, reservation env, owner annotations), the state and router ConfigMaps, the
HTTPRoute weights and integer weight rounding; and the build phase's --max-num-seqs mapping, plan id and routing
hysteresis."""

from __future__ import annotations

import copy
import json
import pytest
from kvplan_operator.build import hold_small_moves, max_num_seqs
from kvplan_operator.desired import ANN_LAYOUT, ANN_OWNED, ANN_OWNER, ClassTarget, Desired, GroupTarget, plan_id
from kvplan_operator.spec import parse_spec
from kvplan_operator.targets.deployment import build_deployment_patch, deployment_drift
from kvplan_operator.targets.httproute import build_httproute_patch, fleet_shares, integer_weights
from kvplan_operator.targets.router_configmap import build_router_configmap_patch, build_router_document
from kvplan_operator.targets.state_configmap import build_state_configmap
from kvplan_operator.targets.vllm_flags import read_flag, set_flag
from op_targets_world import (CLASS_T, SPEC, deployment, desired, spec)  # noqa: F401 - fixtures are found by name


@pytest.mark.parametrize(
    ("args", "flag", "value", "expected"),
    [
        pytest.param(["--model", "m", "--tensor-parallel-size", "2", "--port", "8000"], "--tensor-parallel-size", "4",
                     ["--model", "m", "--tensor-parallel-size", "4", "--port", "8000"], id="replace-spaced"),
        pytest.param(["--tensor-parallel-size=2", "--x"], "--tensor-parallel-size", "8",
                     ["--tensor-parallel-size", "8", "--x"], id="replace-equals"),
        pytest.param(["--model", "m"], "--pipeline-parallel-size", "2",
                     ["--model", "m", "--pipeline-parallel-size", "2"], id="append"),
        pytest.param(["--max-num-seqs", "8", "--max-num-seqs=9"], "--max-num-seqs", "7",
                     ["--max-num-seqs", "7"], id="duplicates-collapsed"),
        pytest.param(["--a", "1"], "--max-num-seqs", None, ["--a", "1"], id="none-unchanged"),
        pytest.param(["--enforce-eager", "--tensor-parallel-size"], "--tensor-parallel-size", "2",
                     ["--enforce-eager", "--tensor-parallel-size", "2"], id="dangling-flag"),
    ],
)
def test_set_flag(args, flag, value, expected):
    assert set_flag(args, flag, value) == expected
    if value is not None:
        assert read_flag(expected, flag) == value


def test_deployment_patch_layout_gpus_selector_env(spec):
    dep = deployment(["--model", "meta/llama", "--tensor-parallel-size", "2", "--enable-prefix-caching"],
                     tolerations=[{"key": "user", "operator": "Exists"}])
    patch = build_deployment_patch(dep, group=spec.groups[0], target=GroupTarget("big", 4, 1, 4, 37),
                                   owner="ns/plan", generation=3, state_configmap="plan-kvplan",
                                   manage_replicas=True, stale_env=["KVPLAN_RESERVE_OLD"])
    pod = patch["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["name"] == "vllm"
    assert c["args"] == ["--model", "meta/llama", "--tensor-parallel-size", "4", "--enable-prefix-caching",
                         "--pipeline-parallel-size", "1", "--max-num-seqs", "37"]
    assert c["resources"] == {"limits": {"nvidia.com/gpu": "4"}, "requests": {"nvidia.com/gpu": "4"}}
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert pod["tolerations"] == [{"key": "user", "operator": "Exists"}]
    env = {e["name"]: e for e in c["env"]}
    assert env == {"KVPLAN_RESERVE_OLD": {"name": "KVPLAN_RESERVE_OLD", "$patch": "delete"}}  # an earlier release's
    assert "HF_HOME" not in env  # not owned: the strategic merge keeps it
    assert patch["spec"]["replicas"] == 4
    ann = patch["metadata"]["annotations"]
    assert ann[ANN_OWNER] == "ns/plan" and ann[ANN_LAYOUT] == "tp=4,pp=1,replicas=4"
    assert ann["kvplan.io/generation"] == "3" and "kvplan.io/plan" not in ann
    assert "kvplan.io/reservations" not in ann  # reservations live in the state ConfigMap only
    dep["metadata"]["annotations"] = {"kvplan.io/reservations": '{"chat":700}'}  # an older operator's copy: removed
    again = build_deployment_patch(dep, group=spec.groups[0], target=GroupTarget("big", 4, 1, 4, 37),
                                   owner="ns/plan", generation=3, state_configmap="plan-kvplan",
                                   manage_replicas=True)
    assert again["metadata"]["annotations"]["kvplan.io/reservations"] is None
    assert "metadata.annotations[kvplan.io/reservations]" in deployment_drift(dep, again)
    assert "replicas" in ann[ANN_OWNED].split(",")
    assert dep["spec"]["template"]["spec"]["containers"][0]["args"][3] == "2"  # input untouched


def test_deployment_patch_pool_tolerations_added_and_autoscaler_leaves_replicas(spec):
    dep = deployment(["--model", "m"])
    patch = build_deployment_patch(dep, group=spec.groups[1], target=GroupTarget("small", 2, 1, 4),
                                   owner="o",
                                   generation=1, state_configmap="s", manage_replicas=False)
    pod = patch["spec"]["template"]["spec"]
    assert "replicas" not in patch["spec"]
    assert "replicas" not in patch["metadata"]["annotations"][ANN_OWNED].split(",")
    assert pod["nodeSelector"] == {"pool": "b"}
    assert pod["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert "--max-num-seqs" not in pod["containers"][0]["args"]


@pytest.mark.parametrize(("containers", "name"), [pytest.param(2, None, id="several-unnamed"),
                                                   pytest.param(1, "other", id="wrong-name")])
def test_deployment_patch_container_not_found(spec, containers, name):
    group = spec.groups[0].model_copy(update={"container": name})
    with pytest.raises(LookupError):
        build_deployment_patch(deployment([], containers=containers), group=group, target=GroupTarget("big", 1, 1, 1),
                               owner="o", generation=1,
                               state_configmap="s", manage_replicas=True)


def test_max_num_seqs_mapping(spec):
    rates = {"chat": 2.0, "code-gen": 1.0}
    # big gets chat only (share 1.5/s): tokens/request = 500 - 1.0*100 + 700 = 1100
    assert max_num_seqs(110_000, spec.classes, CLASS_T, rates, "big") == 100
    # small: chat 0.5/s at 500+700=1200, code 1/s at 2000+300=2300 -> mean 1933.3
    assert max_num_seqs(100_000, spec.classes, CLASS_T, rates, "small") == int(100_000 // (2900 / 1.5))
    assert max_num_seqs(1000, spec.classes, CLASS_T, {"chat": 0.0, "code-gen": 0.0}, "big") is None
    assert max_num_seqs(10, spec.classes, CLASS_T, rates, "big") == 1


def test_state_configmap(spec):
    cm = build_state_configmap(name="p-kvplan", namespace="ns", owner_ref={"kind": "KVPlan", "name": "p", "uid": "u"},
                               desired=desired({}), owner="ns/p")
    assert cm["data"] == {}  # no plugin group: no reservation file; the per-class keys of earlier releases are gone
    assert cm["metadata"]["ownerReferences"][0]["uid"] == "u"
    assert cm["metadata"]["annotations"][ANN_OWNER] == "ns/p"  # every object kvplan writes carries its owner


def test_router_document_and_configmap_patch(spec):
    groups = {"big": GroupTarget("big", 4, 1, 4), "small": GroupTarget("small", 1, 1, 8)}
    doc = build_router_document(owner="ns/p", plan_id="id1", spec=spec, desired=desired(groups))
    assert doc["format"] == "kvplan.v1"
    assert doc["classes"]["chat"]["weights"] == {"big": 0.75, "small": 0.25}
    # sparse: a group with weight (or prefix fraction) 0 is not listed
    assert doc["classes"]["code-gen"] == {"admit": 1.0, "reserveTokens": 300, "weights": {"small": 1.0},
                                          "prefixCacheFraction": {}}
    assert doc["groups"]["small"] == {"service": "small-svc", "deployment": "vllm-small", "tp": 1, "pp": 1, "replicas": 8}
    patch = build_router_configmap_patch(doc, key="routing.json")
    assert json.loads(patch["data"]["routing.json"]) == doc
    assert set(patch) == {"metadata", "data"}


def test_plan_id_is_a_content_hash():
    g = {"big": GroupTarget("big", 4, 1, 4)}
    assert plan_id(g, CLASS_T) == plan_id(dict(g), dict(CLASS_T))
    other = dict(CLASS_T, chat=ClassTarget("chat", 701, 1.0, {"big": 0.75, "small": 0.25}))
    assert plan_id(g, other) != plan_id(g, CLASS_T)


@pytest.mark.parametrize(
    ("shares", "expected"),
    [
        pytest.param({"a": 0.5, "b": 0.5}, {"a": 500, "b": 500}, id="even"),
        pytest.param({"a": 1, "b": 1, "c": 1}, {"a": 334, "b": 333, "c": 333}, id="thirds-sum-exact"),
        pytest.param({"a": 0.0, "b": 0.0}, {"a": 0, "b": 0}, id="all-zero"),
        pytest.param({"a": 0.9994, "b": 0.0006}, {"a": 999, "b": 1}, id="largest-remainder"),
    ],
)
def test_integer_weights(shares, expected):
    assert integer_weights(shares) == expected


def test_httproute_patch_per_class_rule_and_fleet_rule(spec):
    route = {"spec": {"rules": [
        {"matches": [{"headers": [{"name": "X-Gateway-Inference-Objective", "value": "chat"}]}],
         "backendRefs": [{"name": "vllm-big", "port": 8000, "weight": 1}, {"name": "small-svc", "port": 8000, "weight": 1}]},
        {"backendRefs": [{"name": "vllm-big", "port": 8000}, {"name": "small-svc", "port": 8000},
                         {"name": "canary", "port": 8000, "weight": 5}]},
    ]}}
    rates = {"chat": 2.0, "code-gen": 1.0}
    patch = build_httproute_patch(route, ref=spec.router.http_route, spec=spec, classes=CLASS_T, rates=rates)
    r0, r1 = patch["spec"]["rules"]
    assert [b["weight"] for b in r0["backendRefs"]] == [750, 250]
    fleet = fleet_shares(spec, CLASS_T, rates)  # big 1.5, small 1.5
    assert fleet == {"big": 1.5, "small": 1.5}
    assert [b.get("weight") for b in r1["backendRefs"]] == [500, 500, 5]  # unowned backend untouched
    assert route["spec"]["rules"][0]["backendRefs"][0]["weight"] == 1  # input untouched
    applied = {"spec": {"rules": patch["spec"]["rules"]}}
    assert build_httproute_patch(applied, ref=spec.router.http_route, spec=spec, classes=CLASS_T, rates=rates) is None


@pytest.mark.parametrize(
    ("prev", "kept"),
    [
        pytest.param({"admitted": True, "routing": {"big": 0.745, "small": 0.255}, "prefixCacheFraction": {"big": 1.0}},
                     True, id="noise-held"),
        pytest.param({"admitted": True, "routing": {"big": 0.70, "small": 0.30}, "prefixCacheFraction": {"big": 1.0}},
                     False, id="real-move"),
        pytest.param({"admitted": False, "routing": {"big": 0.75, "small": 0.25}}, False, id="admission-changed"),
        pytest.param(None, False, id="no-previous"),
    ],
)
def test_hold_small_moves(prev, kept):
    out = hold_small_moves(CLASS_T, {"chat": prev} if prev else {}, 0.01)
    expected = prev["routing"] if kept else CLASS_T["chat"].routing
    assert dict(out["chat"].routing) == expected
    assert out["code-gen"] == CLASS_T["code-gen"]
