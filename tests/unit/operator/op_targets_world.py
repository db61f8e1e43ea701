"""The shared world of ``test_op_targets.py`` and the tests that reuse it: the operator's targets, their pure parts: the Deployment patch (TP/PP args kept/replaced, GPU limits, selector,."""

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


SPEC = {
    "groups": [
        {"name": "big", "deployment": "vllm-big", "container": "vllm", "model": "llama-70b",
         "nodePool": {"gpuCount": 16}, "layouts": [{"tp": 4, "pp": 1}, {"tp": 8, "pp": 1}]},
        {"name": "small", "deployment": "vllm-small", "service": "small-svc", "model": "llama-8b",
         "nodePool": {"gpuCount": 8, "nodeSelector": {"pool": "b"},
                      "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]},
         "layouts": [{"tp": 1}, {"tp": 2}]},
    ],
    "classes": [
        {"name": "chat", "inputTokens": 500, "maxOutputTokens": 2048, "prefixTokens": 100, "arrivalRate": 2.0,
         "history": {"selector": 'model_name="chat"'}, "costs": {"preemption": 10, "waste": 1}},
        {"name": "code-gen", "inputTokens": 2000, "maxOutputTokens": 1024, "arrivalRate": 1.0,
         "history": {"selector": 'model_name="code"'}, "slo": {"mu": 2, "sigma": 1, "lambda": 100}},
    ],
    "prometheus": {"url": "http://prom:9090"},
    "router": {"configMap": {"name": "router"}, "httpRoute": {"name": "llm"}},
}


def deployment(args: list[str], *, containers: int = 1, tolerations: list | None = None) -> dict:
    cs = [{"name": "vllm", "image": "vllm/vllm-openai:v0.33.0", "args": args,
           "env": [{"name": "HF_HOME", "value": "/cache"}, {"name": "KVPLAN_RESERVE_OLD", "value": "9"}],
           "resources": {"limits": {"memory": "200Gi"}}}]
    cs += [{"name": f"side{i}", "image": "busybox"} for i in range(containers - 1)]
    return {"metadata": {"name": "vllm-big", "annotations": {"team": "a"}},
            "spec": {"replicas": 1, "template": {"spec": {"containers": cs, "tolerations": tolerations or []}}}}


@pytest.fixture(scope="module")
def spec():
    return parse_spec(copy.deepcopy(SPEC))


CLASS_T = {
    "chat": ClassTarget("chat", 700, 1.0, {"big": 0.75, "small": 0.25}, {"big": 1.0}),
    "code-gen": ClassTarget("code-gen", 300, 1.0, {"big": 0.0, "small": 1.0}),
}


def desired(groups: dict, classes: dict = CLASS_T) -> Desired:
    return Desired(plan_id="id1", groups=groups, classes=classes, rates={}, manage_replicas={})
