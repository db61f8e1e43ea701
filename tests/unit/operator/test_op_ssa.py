"""How a target's patch becomes a server-side apply: ``split_removals`` keeps the owned intent and moves the removal
markers (``$patch: delete`` list items, ``None`` map values) to a separate patch that keeps their path (list items
by ``name``); a patch without markers needs no second request. Table-driven; the real apiserver side is
tests/integration/test_operator_ssa.py."""

from __future__ import annotations

from typing import Any

import pytest

from kvplan_operator.kube import _intent, split_removals

ENV_DELETE = {"spec": {"template": {"spec": {"containers": [
    {"name": "vllm", "args": ["--tensor-parallel-size=4"],
     "env": [{"name": "KVPLAN_RESERVE_CHAT", "valueFrom": {"configMapKeyRef": {"name": "s", "key": "k"}}},
             {"name": "KVPLAN_RESERVE_OLD", "$patch": "delete"}]}]}}}}


@pytest.mark.parametrize(
    ("patch", "intent", "removals"),
    [
        pytest.param({"spec": {"replicas": 2}}, {"spec": {"replicas": 2}}, None, id="nothing-to-remove"),
        pytest.param(ENV_DELETE,
                     {"spec": {"template": {"spec": {"containers": [
                         {"name": "vllm", "args": ["--tensor-parallel-size=4"],
                          "env": [{"name": "KVPLAN_RESERVE_CHAT",
                                   "valueFrom": {"configMapKeyRef": {"name": "s", "key": "k"}}}]}]}}}},
                     {"spec": {"template": {"spec": {"containers": [
                         {"name": "vllm", "env": [{"name": "KVPLAN_RESERVE_OLD", "$patch": "delete"}]}]}}}},
                     id="stale-env"),
        pytest.param({"metadata": {"annotations": {"a": "1", "b": None}}, "data": {"x": "1", "gone": None}},
                     {"metadata": {"annotations": {"a": "1"}}, "data": {"x": "1"}},
                     {"metadata": {"annotations": {"b": None}}, "data": {"gone": None}}, id="merge-patch-nulls"),
    ],
)
def test_split_removals(patch: dict[str, Any], intent: dict[str, Any], removals: dict[str, Any] | None) -> None:
    assert split_removals(patch) == (intent, removals)


def test_intent_carries_type_and_identity() -> None:
    body = _intent("apps/v1", "Deployment", "llm", "vllm-a", {"metadata": {"annotations": {"a": "1"}},
                                                              "spec": {"replicas": 1}})
    assert body == {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 1},
                    "metadata": {"annotations": {"a": "1"}, "name": "vllm-a", "namespace": "llm"}}


def test_split_updates_moves_the_strategy_and_the_hold_note_out_of_the_apply() -> None:
    from kvplan_operator.kube import split_updates

    patch = {"metadata": {"annotations": {"kvplan.io/owner": "p", "kvplan.io/rollout-max-unavailable": None}},
             "spec": {"replicas": 2, "strategy": {"rollingUpdate": {"maxUnavailable": 1}}}}
    rest, update = split_updates(patch)
    assert rest == {"metadata": {"annotations": {"kvplan.io/owner": "p"}}, "spec": {"replicas": 2}}
    assert update == {"spec": {"strategy": {"rollingUpdate": {"maxUnavailable": 1}}},
                      "metadata": {"annotations": {"kvplan.io/rollout-max-unavailable": None}}}
    assert split_updates({"spec": {"replicas": 2}}) == ({"spec": {"replicas": 2}}, None)
    assert patch["spec"]["strategy"]  # the caller's patch is left as it was
