"""Room for a rollout on a full GPU pool (:mod:`kvplan_operator.targets.rollout_room`): the model of the Deployment
controller, the floor it gives, and what the Deployment patch holds and gives back. The model is checked against
the real kube-controller-manager and kube-scheduler in tests/twin/test_twin_rollout.py; here each expected figure
is worked out by hand from the controller's rules (the comments show the arithmetic)."""

from __future__ import annotations

import copy
import json
import random

import pytest

from kvplan_operator.desired import ANN_OWNED, GroupTarget
from kvplan_operator.spec import parse_spec
from kvplan_operator.targets.deployment import build_deployment_patch, deployment_drift, hold_room
from kvplan_operator.targets.rollout_room import (ANN_ROLLOUT, completes, hold, nodes_of, resolve, rollout_complete,
                                                  rollout_floor, strategy_drift)


@pytest.mark.parametrize("value, replicas, up, pods", [
    (None, 4, True, 1), (None, 4, False, 1),      # 25% of 4 = 1 either way
    ("25%", 3, True, 1), ("25%", 3, False, 0),    # 0.75: maxSurge rounds up, maxUnavailable down
    ("50%", 5, False, 2), (2, 9, False, 2), ("3", 9, True, 3), (-1, 4, False, 0)])
def test_resolve_rounds_as_the_controller(value, replicas, up, pods):
    assert resolve(value, replicas, round_up=up) == pods


def test_nodes_of():
    assert nodes_of(16, 8) == [8, 8]
    assert nodes_of(12, 8) == [8, 4]
    assert nodes_of(0, 8) == []


def test_the_twins_deadlocks_and_their_floors():
    # batch: 1 pod x 8 GPUs -> 2 x 4 on one 8-GPU node, maxSurge 0. With maxUnavailable 1 the controller keeps
    # 2 - 1 = 1 pod available: the old pod stays, the new one finds no GPUs. With 2 it may keep 0.
    batch = dict(old_replicas=1, old_gpus=8, new_replicas=2, new_gpus=4, nodes=[8], max_surge=0)
    assert not completes(**batch, max_unavailable=1)
    assert completes(**batch, max_unavailable=2)
    assert rollout_floor(**batch, max_unavailable=1) == 2
    # interactive: 2 x 8 -> 4 x 4 on two nodes: minAvailable 4 - u must let one old pod go while 2 are available:
    # 4 - u <= 1, u = 3.
    inter = dict(old_replicas=2, old_gpus=8, new_replicas=4, new_gpus=4, nodes=[8, 8], max_surge=0)
    assert [completes(**inter, max_unavailable=u) for u in (1, 2, 3, 4)] == [False, False, True, True]
    assert rollout_floor(**inter, max_unavailable=1) == 3


def test_no_floor_where_the_users_strategy_finishes():
    # Same pods, new template: one at a time frees the room the next needs.
    assert rollout_floor(old_replicas=4, old_gpus=4, new_replicas=4, new_gpus=4, nodes=[8, 8], max_surge=0,
                         max_unavailable=1) is None
    # A spare node's worth of GPUs lets maxSurge 1 work with maxUnavailable 0.
    assert rollout_floor(old_replicas=3, old_gpus=4, new_replicas=3, new_gpus=4, nodes=[8, 8], max_surge=1,
                         max_unavailable=0) is None
    # Fewer, larger pods: the scaling event removes half the old pods first.
    assert rollout_floor(old_replicas=4, old_gpus=4, new_replicas=2, new_gpus=8, nodes=[8, 8], max_surge=0,
                         max_unavailable=1) is None


def test_surge_only_on_a_full_pool_needs_one_unavailable():
    # maxSurge 1, maxUnavailable 0 and no free GPU: the surge pod never schedules, nothing old may go.
    kw = dict(old_replicas=4, old_gpus=4, new_replicas=4, new_gpus=4, nodes=[8, 8], max_surge=1)
    assert not completes(**kw, max_unavailable=0)
    assert rollout_floor(**kw, max_unavailable=0) == 1


@pytest.mark.parametrize("old_r, old_g, new_r, new_g, nodes", [
    (1, 8, 2, 4, [8]), (2, 8, 4, 4, [8, 8]), (8, 2, 16, 1, [8, 8]), (4, 2, 2, 4, [8]), (3, 8, 6, 4, [8, 8, 8]),
    (2, 4, 4, 2, [8])])
@pytest.mark.parametrize("surge, unavailable", [(0, 1), (1, 0), ("25%", "25%")])
def test_the_floor_is_the_least_that_finishes(old_r, old_g, new_r, new_g, nodes, surge, unavailable):
    floor = rollout_floor(old_replicas=old_r, old_gpus=old_g, new_replicas=new_r, new_gpus=new_g, nodes=nodes,
                          max_surge=surge, max_unavailable=unavailable)
    kw = dict(old_replicas=old_r, old_gpus=old_g, new_replicas=new_r, new_gpus=new_g, nodes=nodes,
              max_surge=resolve(surge, new_r, round_up=True))
    user = resolve(unavailable, new_r, round_up=False)
    if floor is None:
        assert completes(**kw, max_unavailable=user)
    else:
        assert user < floor <= new_r
        assert completes(**kw, max_unavailable=floor)
        assert not any(completes(**kw, max_unavailable=u) for u in range(user, floor))
    # new_r unavailable removes every old pod before the new ones need room: it always finishes.
    assert completes(**kw, max_unavailable=new_r)


def test_finishing_is_monotone_in_max_unavailable():
    # rollout_floor bisects on it: on seeded random pools, a rollout that finishes with u pods unavailable finishes
    # with u + 1, and the floor it finds is the least value that finishes (a scan of every value)
    rng = random.Random(20261207)
    floors = 0
    for _ in range(400):
        old_g, new_g = rng.choice([1, 2, 4, 8]), rng.choice([1, 2, 4, 8])
        nodes = [rng.choice([0, 2, 4, 8, 8, 8]) for _ in range(rng.randint(1, 6))]
        old_r = rng.randint(1, max(1, sum(nodes) // old_g))
        new_r = rng.randint(1, max(1, sum(nodes) // new_g + 1))
        surge = rng.choice([0, 0, 1, 2])
        kw = dict(old_replicas=old_r, old_gpus=old_g, new_replicas=new_r, new_gpus=new_g, nodes=nodes)
        ok = [completes(**kw, max_surge=surge, max_unavailable=u) for u in range(new_r + 1)]
        assert all(b for a, b in zip(ok, ok[1:]) if a), (kw, surge, ok)
        user = rng.randint(0, new_r)
        floor = rollout_floor(**kw, max_surge=surge, max_unavailable=user)
        scan = next((u for u in range(user, new_r + 1) if ok[u]), None)
        if scan == user:
            assert floor is None
        else:
            floors += 1
            assert floor == (scan if scan is not None else max(new_r, 1)), (kw, surge, user, ok)
    assert floors > 40  # the draw holds rollouts that need a hold, not only ones that finish alone


def body(*, replicas: int = 1, gpus: int = 8, tp: int = 8, surge: object = 0, unavailable: object = 1,
         annotations: dict | None = None, status: dict | None = None, generation: int = 3) -> dict:
    return {"metadata": {"name": "vllm-big", "generation": generation, "annotations": dict(annotations or {})},
            "spec": {"replicas": replicas,
                     "strategy": {"type": "RollingUpdate",
                                  "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}},
                     "template": {"spec": {"containers": [
                         {"name": "vllm", "args": ["--model=m", f"--tensor-parallel-size={tp}"],
                          "resources": {"limits": {"nvidia.com/gpu": str(gpus)},
                                        "requests": {"nvidia.com/gpu": str(gpus)}}}]}}},
            "status": dict(status or {})}


def test_hold_writes_the_floor_keeps_it_while_rolling_and_gives_the_users_value_back():
    first = hold(body(), rolls=True, old_gpus=8, new_replicas=2, new_gpus=4, nodes=[8])
    assert first.max_unavailable == 2
    assert json.loads(first.annotation[ANN_ROLLOUT]) == {"user": 1, "held": 2}
    # Next reconcile: the template is written, the rollout goes on: nothing is written, the note stays.
    rolling = body(replicas=2, gpus=4, tp=4, unavailable=2, annotations=first.annotation,
                   status={"observedGeneration": 3, "replicas": 3, "updatedReplicas": 1, "availableReplicas": 1})
    assert not rollout_complete(rolling)
    mid = hold(rolling, rolls=False, old_gpus=4, new_replicas=2, new_gpus=4, nodes=[8])
    assert mid.max_unavailable is None and mid.annotation == first.annotation
    done = copy.deepcopy(rolling)
    done["status"] = {"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}
    assert rollout_complete(done)
    back = hold(done, rolls=False, old_gpus=4, new_replicas=2, new_gpus=4, nodes=[8])
    assert back.max_unavailable == 1 and back.annotation == {ANN_ROLLOUT: None}
    # The user changed the strategy meanwhile: theirs stays, only kvplan's note goes.
    done["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] = "50%"
    assert hold(done, rolls=False, old_gpus=4, new_replicas=2, new_gpus=4, nodes=[8]).max_unavailable is None


def test_hold_leaves_recreate_and_a_strategy_that_finishes_alone():
    recreate = body()
    recreate["spec"]["strategy"] = {"type": "Recreate"}
    assert hold(recreate, rolls=True, old_gpus=8, new_replicas=2, new_gpus=4, nodes=[8]).max_unavailable is None
    fine = hold(body(replicas=4, gpus=4, tp=4), rolls=True, old_gpus=4, new_replicas=4, new_gpus=4, nodes=[8, 8])
    assert fine.max_unavailable is None and fine.annotation == {}
    # No rollout, no note: nothing at all.
    assert hold(body(), rolls=False, old_gpus=8, new_replicas=1, new_gpus=8, nodes=[8]).annotation == {}


SPEC = {
    "groups": [{"name": "batch", "deployment": "vllm-big", "container": "vllm", "model": "llama-70b",
                "nodePool": {"gpuCount": 8, "gpusPerNode": 8}, "layouts": [{"tp": 4}, {"tp": 8}]}],
    "classes": [{"name": "chat", "inputTokens": 500, "maxOutputTokens": 2048, "arrivalRate": 1.0,
                 "history": {"selector": 'model_name="chat"'}, "costs": {"preemption": 10, "waste": 1}}],
    "prometheus": {"url": "http://prom:9090"},
}


def test_the_deployment_patch_carries_the_floor_with_the_relayout():
    group = parse_spec(copy.deepcopy(SPEC)).groups[0]
    target = GroupTarget("batch", tp=4, pp=1, replicas=2)
    current = body()
    patch = build_deployment_patch(current, group=group, target=target, owner="ns/p", generation=1,
                                   state_configmap="p-state", manage_replicas=True)
    hold_room(current, patch, current["spec"]["template"]["spec"]["containers"][0], group=group, target=target,
              manage_replicas=True, rolls=True)
    assert patch["spec"]["strategy"] == {"rollingUpdate": {"maxUnavailable": 2}}
    assert patch["spec"]["replicas"] == 2
    assert "strategy.rollingUpdate.maxUnavailable" in patch["metadata"]["annotations"][ANN_OWNED].split(",")
    assert strategy_drift(current, patch) == ["spec.strategy.rollingUpdate.maxUnavailable"]
    assert f"metadata.annotations[{ANN_ROLLOUT}]" in deployment_drift(current, patch)


def test_a_hold_in_force_is_a_status_note_until_the_users_value_is_back():
    group = parse_spec(copy.deepcopy(SPEC)).groups[0]
    target = GroupTarget("batch", tp=4, pp=1, replicas=2)
    current = body()
    container = current["spec"]["template"]["spec"]["containers"][0]
    patch = build_deployment_patch(current, group=group, target=target, owner="ns/p", generation=1,
                                   state_configmap="p-state", manage_replicas=True)
    note = hold_room(current, patch, container, group=group, target=target, manage_replicas=True, rolls=True)
    assert note is not None
    assert f"group {group.name}:" in note and f"Deployment {group.deployment}" in note
    assert "maxUnavailable at 2" in note and "your 1" in note and ANN_ROLLOUT in note
    rolling = copy.deepcopy(current)  # the write landed; the controller is still rolling
    rolling["metadata"]["annotations"][ANN_ROLLOUT] = patch["metadata"]["annotations"][ANN_ROLLOUT]
    rolling["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] = 2
    rolling["spec"]["replicas"] = 2
    rolling["status"] = {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1, "availableReplicas": 1}
    rolling["metadata"]["generation"] = 2
    again = {"metadata": {"annotations": {ANN_OWNED: "x"}}}
    assert hold_room(rolling, again, container, group=group, target=target, manage_replicas=True,
                     rolls=False) == note
    done = copy.deepcopy(rolling)
    done["status"] = {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}
    back = {"metadata": {"annotations": {ANN_OWNED: "x"}}}
    assert hold_room(done, back, container, group=group, target=target, manage_replicas=True, rolls=False) is None
    assert back["spec"]["strategy"] == {"rollingUpdate": {"maxUnavailable": 1}}
