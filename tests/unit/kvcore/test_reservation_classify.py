"""The ``classify`` section and ``defaultPriority`` of ``kvplan.reservations.v1``: the one class rule that the
gateway, vLLM's scheduler and the stat logger evaluate on what each of them sees of a request (headers; LoRA
adapter and priority; prompt length), its bad inputs (each names its field) and the render/parse round trip."""

from __future__ import annotations

import json
from typing import Any

import pytest
from reservation_docs import assert_names_field, edited

from kvcore.classification import (
    FAIRNESS_HEADER,
    FROM_DEFAULT,
    FROM_HEADER,
    FROM_MODEL,
    FROM_PRIORITY,
    FROM_PROMPT,
    OBJECTIVE_HEADER,
    UNKNOWN_VALUE,
    ClassRule,
    RequestView,
)
from kvcore.reservation_file import parse_reservations, render_reservations

BASE: dict[str, Any] = {
    "format": "kvplan.reservations.v1",
    "defaultClass": "chat",
    "classes": {"chat": {"reserveTokens": 512}, "code": {"reserveTokens": 1024}, "batch": {"reserveTokens": 2048}},
    "priorityClasses": {"1": "chat", "2": "code", "3": "batch"},
    "defaultPriority": 4,
    "classify": [
        {"objective": "premium-chat", "class": "chat"},
        {"fairnessId": "team-batch", "class": "batch"},
        {"model": "sql-lora", "class": "code"},
        {"header": "X-Team", "value": "search", "class": "code"},
    ],
    "promptLengthRules": [{"maxPromptTokens": 100, "class": "code"}],
}


def doc(**changes: Any) -> str:
    return edited(BASE, **changes)


RES = parse_reservations(doc())


def test_parsed_rules_keep_their_order_and_lower_case_header_names() -> None:
    assert RES.rules == (ClassRule(OBJECTIVE_HEADER, "premium-chat", "chat"),
                         ClassRule(FAIRNESS_HEADER, "team-batch", "batch"),
                         ClassRule(None, "sql-lora", "code"), ClassRule("x-team", "search", "code"))
    assert RES.default_priority == 4
    assert [r.header for r in RES.header_rules()] == [OBJECTIVE_HEADER, FAIRNESS_HEADER, "x-team"]
    assert parse_reservations(render_reservations(RES)) == RES


def test_a_document_without_the_new_fields_still_parses() -> None:
    res = parse_reservations(doc(classify=..., defaultPriority=...))
    assert res.rules == () and res.default_priority is None
    assert "classify" not in json.loads(render_reservations(res))


@pytest.mark.parametrize(("view", "expected"), [
    pytest.param(RequestView(headers={OBJECTIVE_HEADER: "premium-chat"}), ("chat", FROM_HEADER), id="objective"),
    pytest.param(RequestView(headers={FAIRNESS_HEADER: "team-batch", OBJECTIVE_HEADER: "premium-chat"}),
                 ("chat", FROM_HEADER), id="first-rule-wins"),
    pytest.param(RequestView(headers={FAIRNESS_HEADER: "team-batch"}), ("batch", FROM_HEADER), id="fairness-id"),
    pytest.param(RequestView(headers={"x-team": "search"}), ("code", FROM_HEADER), id="user-header"),
    pytest.param(RequestView(headers={OBJECTIVE_HEADER: "ghost"}, prompt_tokens=5), ("chat", UNKNOWN_VALUE),
                 id="unknown-objective-is-the-default"),
    pytest.param(RequestView(headers={"x-other": "1"}, prompt_tokens=5), ("code", FROM_PROMPT),
                 id="unmatched-header-name-falls-through"),
    pytest.param(RequestView(model="sql-lora", priority=3), ("code", FROM_MODEL), id="adapter-before-priority"),
    pytest.param(RequestView(model="base", priority=3), ("batch", FROM_PRIORITY), id="priority"),
    pytest.param(RequestView(priority=4, prompt_tokens=101), ("chat", FROM_DEFAULT), id="default-priority"),
    pytest.param(RequestView(priority=0, prompt_tokens=100), ("code", FROM_PROMPT), id="vllm-default-priority"),
    pytest.param(RequestView(priority=9, prompt_tokens=100), ("chat", UNKNOWN_VALUE), id="unknown-priority"),
    pytest.param(RequestView(prompt_tokens=101), ("chat", FROM_DEFAULT), id="nothing-matches"),
    pytest.param(RequestView(), ("chat", FROM_DEFAULT), id="nothing-visible"),
])
def test_classify(view: RequestView, expected: tuple[str, str]) -> None:
    assert RES.classify(view) == expected


BAD = [
    pytest.param(doc(classify={"objective": "x"}), r"^classify: must be a list", id="not-a-list"),
    pytest.param(doc(classify=[{"objective": "x", "model": "y", "class": "chat"}]),
                 r"^classify\[0\]: needs exactly one of", id="two-matchers"),
    pytest.param(doc(classify=[{"class": "chat"}]), r"^classify\[0\]: needs exactly one of", id="no-matcher"),
    pytest.param(doc(classify=[{"objective": "x"}]), r"^classify\[0\]\.class: required", id="no-class"),
    pytest.param(doc(classify=[{"objective": "x", "class": "ghost"}]),
                 r'^classify\[0\]\.class: class "ghost" is not in classes', id="unknown-class"),
    pytest.param(doc(classify=[{"header": "x team", "value": "a", "class": "chat"}]),
                 r"^classify\[0\]\.header: must be an HTTP header name", id="bad-header-name"),
    pytest.param(doc(classify=[{"header": "x-team", "class": "chat"}]), r"^classify\[0\]\.value: required",
                 id="header-without-value"),
    pytest.param(doc(classify=[{"objective": "x", "value": "y", "class": "chat"}]),
                 r"^classify\[0\]\.value: only with header", id="value-without-header"),
    pytest.param(doc(classify=[{"objective": "", "class": "chat"}]), r"^classify\[0\]\.objective: must be a non-empty",
                 id="empty-value"),
    pytest.param(doc(classify=[{"model": 5, "class": "chat"}]), r"^classify\[0\]\.model: must be a non-empty",
                 id="value-not-a-string"),
    pytest.param(doc(classify=[{"fairnessId": "a\nb", "class": "chat"}]),
                 r"^classify\[0\]\.fairnessId: must be a non-empty printable", id="control-character"),
    pytest.param(doc(classify=[{"objective": "x", "class": "chat"}, {"header": OBJECTIVE_HEADER.upper(),
                                                                   "value": "x", "class": "code"}]),
                 r"^classify\[1\]: unreachable, classify\[0\]", id="same-match-twice"),
    pytest.param(doc(classify=[{"objective": "x", "class": "chat", "weight": 2}]),
                 r"^classify\[0\]\.weight: unknown field", id="unknown-field"),
    pytest.param(doc(classify=[{"model": str(i), "class": "chat"} for i in range(257)]),
                 r"^classify: 257 entries, more than the 256 allowed", id="too-many"),
    pytest.param(doc(defaultPriority=3), r"^defaultPriority: 3 must be larger than every class's priority",
                 id="default-priority-ties-a-class"),
    pytest.param(doc(defaultPriority="9"), r"^defaultPriority: must be an integer", id="default-priority-string"),
    pytest.param(doc(defaultPriority=True), r"^defaultPriority: must be an integer", id="default-priority-bool"),
    pytest.param(doc(defaultPriority=4.5), r"^defaultPriority: must be an integer", id="default-priority-float"),
]


@pytest.mark.parametrize(("text", "first"), BAD)
def test_bad_classify_names_the_field(text: str, first: str) -> None:
    assert_names_field(text, first)
