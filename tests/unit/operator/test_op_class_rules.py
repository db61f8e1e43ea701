"""Request classes as the ecosystem names them, on the operator's side: ``spec.classes[].match`` parsed and
checked (two classes matching one value refused, naming the field), turned into the reservation file's
``classify`` rules (which kvcore parses back to the same rules), HTTPRoute rules recognised by those headers, and
the priority of requests of no class on the fleet rule (after every class's: vLLM runs lower first)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvcore import ClassRule, RequestView, Reservations, parse_reservations, render_reservations
from kvplan_operator.spec import InvalidSpec, parse_spec
from kvplan_operator.targets.class_rules import class_rules, route_rule_class, untagged_priority
from kvplan_operator.targets.httproute import build_httproute_patch
from op_targets_world import CLASS_T, SPEC

OBJECTIVE, FAIRNESS = "x-gateway-inference-objective", "x-gateway-inference-fairness-id"


def spec_with(chat: dict[str, Any] | None = None, code: dict[str, Any] | None = None) -> Any:
    s = copy.deepcopy(SPEC)
    if chat is not None:
        s["classes"][0]["match"] = chat
    if code is not None:
        s["classes"][1]["match"] = code
    return parse_spec(s)


def test_match_fields_become_classify_rules_in_order() -> None:
    spec = spec_with({"objective": "premium", "fairnessId": "team-a", "model": "chat-lora"},
                     {"header": {"name": "X-Team", "value": "search"}})
    rules = class_rules(spec.classes)
    assert rules == (ClassRule(OBJECTIVE, "premium", "chat"), ClassRule(FAIRNESS, "team-a", "chat"),
                     ClassRule(None, "chat-lora", "chat"), ClassRule("x-team", "search", "code-gen"))
    res = Reservations({"chat": 1, "code-gen": 2}, "chat", rules=rules)
    assert parse_reservations(render_reservations(res)).rules == rules
    assert res.classify(RequestView(headers={"x-team": "search"})) == ("code-gen", "header")


@pytest.mark.parametrize(("chat", "code", "field"), [
    pytest.param({"objective": "same"}, {"objective": "same"}, "spec.classes[1].match", id="one-objective-twice"),
    pytest.param({"model": "m"}, {"model": "m"}, "spec.classes[1].match", id="one-model-twice"),
    pytest.param({"objective": "o"}, {"header": {"name": "X-Gateway-Inference-Objective", "value": "o"}},
                 "spec.classes[1].match", id="objective-and-its-header"),
    pytest.param({"header": {"name": "x team", "value": "a"}}, None, "spec.classes[0].match.header.name",
                 id="bad-header-name"),
    pytest.param({"objective": ""}, None, "spec.classes[0].match.objective", id="empty-objective"),
])
def test_bad_matches_name_the_field(chat: dict[str, Any], code: dict[str, Any] | None, field: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        spec_with(chat, code)
    assert field in [f for f, _ in err.value.errors], err.value.errors


@pytest.mark.parametrize(("headers", "expected"), [
    pytest.param([{"name": "X-Gateway-Inference-Objective", "value": "chat"}], "chat", id="class-header-names-class"),
    pytest.param([{"name": OBJECTIVE, "value": "premium"}], "chat", id="match-objective"),
    pytest.param([{"name": "X-Team", "value": "search"}], "code-gen", id="match-user-header"),
    pytest.param([{"name": OBJECTIVE, "value": "ghost"}], None, id="unknown-value-is-the-fleet"),
    pytest.param([{"name": OBJECTIVE, "value": "chat", "type": "RegularExpression"}], None, id="not-exact"),
])
def test_route_rule_class(headers: list[dict[str, str]], expected: str | None) -> None:
    spec = spec_with({"objective": "premium"}, {"header": {"name": "x-team", "value": "search"}})
    rule = {"matches": [{"headers": headers}]}
    known = {c.name: c for c in spec.classes}
    assert route_rule_class(rule, spec.router.http_route.class_header, class_rules(spec.classes), known) == expected


def test_untagged_priority_runs_after_every_class() -> None:
    assert untagged_priority({"chat": 1, "code-gen": 2}) == 3
    assert untagged_priority({}) is None


def test_route_matched_by_objective_gets_class_weights_and_priorities() -> None:
    spec = spec_with({"objective": "premium"})
    svc = [{"name": "vllm-big", "port": 8000, "weight": 1}, {"name": "small-svc", "port": 8000, "weight": 1}]
    route = {"spec": {"rules": [{"matches": [{"headers": [{"name": OBJECTIVE, "value": "premium"}]}],
                                 "backendRefs": copy.deepcopy(svc)},
                                {"backendRefs": copy.deepcopy(svc)}]}}
    patch = build_httproute_patch(route, ref=spec.router.http_route, spec=spec, classes=CLASS_T,
                                  rates={"chat": 2.0, "code-gen": 1.0}, priorities={"chat": 1, "code-gen": 2})
    assert patch is not None
    r0, r1 = patch["spec"]["rules"]
    shares = CLASS_T["chat"].routing
    assert [b["weight"] for b in r0["backendRefs"]] == [round(1000 * shares["big"]), round(1000 * shares["small"])]
    assert r0["filters"][0]["requestHeaderModifier"]["set"] == [{"name": "X-Vllm-Priority", "value": "1"}]
    assert r1["filters"][0]["requestHeaderModifier"]["set"] == [{"name": "X-Vllm-Priority", "value": "3"}]
