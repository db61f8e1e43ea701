"""The pure parts of kvplan's vLLM plugins, without vLLM: the reservation file ``kvplan.reservations.v1`` (every
bad-input case names its field; all problems reported at once), request classes in the engine and in the API
server, and the live reader (ConfigMap-style symlink swaps followed, last good values kept through bad versions,
each problem logged once). Also the layering: kvcore and the operator never import the plugins or vLLM, and the
plugins' pure modules never import vLLM."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest
from plugin_log import log  # noqa: F401 - the fixture is found by name
from reservation_docs import assert_names_field, edited

from kvplan_dev.mounted_configmap import remove_configmap_key, write_configmap_volume
from kvplan_vllm.classify import (
    FROM_XARGS,
    UNKNOWN_TO_DEFAULT,
    class_in_api_server,
    class_in_engine,
    engine_priority,
)
from kvcore.classification import FROM_DEFAULT, FROM_MODEL, FROM_PRIORITY, FROM_PROMPT, PromptLengthRule
from kvcore.reservation_file import (
    NO_RESERVATIONS,
    Reservations,
    ReservationsError,
    parse_reservations,
    render_reservations,
)
from kvplan_vllm.source import DEFAULT_CHECK_STEPS, ReservationSource, check_steps_from_env

REPO = Path(__file__).resolve().parents[3]
GOOD: dict[str, Any] = {
    "format": "kvplan.reservations.v1",
    "kvplan": "serving/fleet",
    "plan": "3f2a9c1b0d4e",
    "defaultClass": "chat",
    "classes": {"chat": {"reserveTokens": 512}, "batch": {"reserveTokens": 2048}, "tiny": {"reserveTokens": 0}},
    "priorityClasses": {"0": "chat", "10": "batch", "-3": "tiny"},
    "defaultPriority": 11,
    "promptLengthRules": [{"maxPromptTokens": 64, "class": "tiny"}, {"maxPromptTokens": 2048, "class": "chat"},
                          {"class": "batch"}],
}


def doc(**changes: Any) -> str:
    return edited(GOOD, **changes)


def test_good_document_parses_to_its_values() -> None:
    res = parse_reservations(doc())
    assert dict(res.reserve_tokens) == {"chat": 512, "batch": 2048, "tiny": 0}
    assert res.default_class == "chat" and res.plan == "3f2a9c1b0d4e" and res.kvplan == "serving/fleet"
    assert dict(res.priority_classes) == {0: "chat", 10: "batch", -3: "tiny"}
    assert res.prompt_length_rules == (PromptLengthRule(64, "tiny"), PromptLengthRule(2048, "chat"),
                                       PromptLengthRule(None, "batch"))
    assert res.reserve("batch") == 2048 and res.reserve("unknown") == 512
    assert parse_reservations(render_reservations(res)) == res


def test_minimal_document_and_integral_floats() -> None:
    res = parse_reservations('{"format": "kvplan.reservations.v1", "defaultClass": "a", '
                             '"classes": {"a": {"reserveTokens": 128.0}}}')
    assert dict(res.reserve_tokens) == {"a": 128} and res.prompt_length_rules == () and not res.priority_classes


BAD = [
    pytest.param('{"format": "kvplan.reservations.v1", "defaultClass": "chat", "classes": {"chat": {"res',
                 r"^\(document\): not valid JSON", id="truncated"),
    pytest.param("", r"^\(document\): not valid JSON", id="empty"),
    pytest.param("[1, 2]", r"^\(document\): must be a JSON object", id="not-an-object"),
    pytest.param(doc(format="kvplan.reservations.v2"), r"^format: must be \"kvplan.reservations.v1\"",
                 id="other-version"),
    pytest.param(doc(format=...), r"^format: must be", id="no-format"),
    pytest.param(doc(defaultClass=...), r"^defaultClass: required", id="no-default"),
    pytest.param(doc(defaultClass="ghost"), r'^defaultClass: class "ghost" is not in classes', id="default-unknown"),
    pytest.param(doc(priorityClasses={"10": "ghost"}), r'^priorityClasses.10: class "ghost" is not in classes',
                 id="priority-unknown-class"),
    pytest.param(doc(priorityClasses={"high": "chat"}), r"^priorityClasses.high: the key must be an integer",
                 id="priority-not-integer"),
    pytest.param(doc(promptLengthRules=[{"maxPromptTokens": 5, "class": "ghost"}]),
                 r'^promptLengthRules\[0\].class: class "ghost" is not in classes', id="rule-unknown-class"),
    pytest.param(doc(promptLengthRules=[{"class": "chat"}, {"maxPromptTokens": 5, "class": "tiny"}]),
                 r"^promptLengthRules\[1\]: unreachable", id="rule-after-catch-all"),
    pytest.param(doc(promptLengthRules=[{"maxPromptTokens": -1, "class": "chat"}]),
                 r"^promptLengthRules\[0\].maxPromptTokens: must be >= 0", id="rule-negative"),
    pytest.param(doc(promptLengthRules={"class": "chat"}), r"^promptLengthRules: must be a list", id="rules-not-list"),
    pytest.param(doc(classes={"chat": {"reserveTokens": -1}}), r"^classes.chat.reserveTokens: must be >= 0",
                 id="negative"),
    pytest.param(doc(classes={"chat": {"reserveTokens": "512"}}),
                 r'^classes.chat.reserveTokens: must be a non-negative whole number of tokens, got "512"',
                 id="string"),
    pytest.param(doc(classes={"chat": {"reserveTokens": True}}),
                 r"^classes.chat.reserveTokens: must be a non-negative whole number", id="bool"),
    pytest.param(doc(classes={"chat": {"reserveTokens": 12.5}}),
                 r"^classes.chat.reserveTokens: must be a non-negative whole number", id="fraction"),
    pytest.param(doc().replace('"reserveTokens": 512', '"reserveTokens": NaN'), r"^\(document\): not valid JSON",
                 id="nan"),
    pytest.param(doc().replace('"reserveTokens": 512', '"reserveTokens": Infinity'), r"^\(document\): not valid JSON",
                 id="infinity"),
    pytest.param(doc(classes={"chat": {}}), r"^classes.chat.reserveTokens: required", id="missing-reserve"),
    pytest.param(doc(classes={"chat": {"reserveTokens": 5, "reserve": 6}}), r"^classes.chat.reserve: unknown field",
                 id="unknown-class-field"),
    pytest.param(doc(classes={"Chat!": {"reserveTokens": 5}}), r'^classes key "Chat!": must be a class name',
                 id="bad-class-name"),
    pytest.param(doc(classes={}), r"^classes: must be a non-empty object", id="no-classes"),
    pytest.param(doc(reserves={"chat": 5}), r"^reserves: unknown field", id="unknown-top-field"),
    pytest.param(doc(plan=12), r"^plan: must be a string", id="plan-not-string"),
]


@pytest.mark.parametrize(("text", "first"), BAD)
def test_bad_documents_name_the_field(text: str, first: str) -> None:
    assert_names_field(text, first)


def test_every_problem_is_reported_at_once() -> None:
    text = doc(defaultClass="ghost", classes={"chat": {"reserveTokens": -5}, "b": {"reserveTokens": "x"}},
               priorityClasses={"1": "nope"})
    with pytest.raises(ReservationsError) as err:
        parse_reservations(text)
    fields = sorted(p.split(":")[0] for p in err.value.problems)
    # The rules of GOOD name tiny and batch, which this document no longer has.
    assert fields == ["classes.b.reserveTokens", "classes.chat.reserveTokens", "defaultClass", "priorityClasses.1",
                      "promptLengthRules[0].class", "promptLengthRules[2].class"]


RES = parse_reservations(doc())


@pytest.mark.parametrize(("extra", "priority", "prompt", "expected"), [
    pytest.param({"kvplan_class": "batch"}, 0, 10, ("batch", FROM_XARGS), id="xargs-wins"),
    pytest.param({"kvplan_class": "ghost"}, 10, 10, ("chat", UNKNOWN_TO_DEFAULT), id="xargs-unknown-default"),
    pytest.param({"kvplan_class": 3}, 10, 10, ("chat", UNKNOWN_TO_DEFAULT), id="xargs-not-a-string"),
    pytest.param({"other": 1}, 10, 10, ("batch", FROM_PRIORITY), id="priority"),
    pytest.param(None, -3, 5000, ("tiny", FROM_PRIORITY), id="negative-priority"),
    pytest.param(None, 99, 64, ("chat", UNKNOWN_TO_DEFAULT), id="priority-no-class-knows"),
    pytest.param(None, 11, 64, ("tiny", FROM_PROMPT), id="default-priority-prompt-rule"),
    pytest.param(None, None, 64, ("tiny", FROM_PROMPT), id="prompt-rule-inclusive"),
    pytest.param(None, None, 65, ("chat", FROM_PROMPT), id="prompt-rule-second"),
    pytest.param(None, None, 4096, ("batch", FROM_PROMPT), id="prompt-catch-all"),
])
def test_class_in_engine(extra: dict[str, Any] | None, priority: int | None, prompt: int,
                         expected: tuple[str, str]) -> None:
    assert class_in_engine(RES, extra, priority, prompt) == expected


@pytest.mark.parametrize(("lora", "priority", "expected"), [
    pytest.param("sql-lora", 10, ("tiny", FROM_MODEL), id="adapter-rule-before-priority"),
    pytest.param("other-lora", 10, ("batch", FROM_PRIORITY), id="adapter-no-rule"),
    pytest.param(None, 10, ("batch", FROM_PRIORITY), id="no-adapter"),
])
def test_class_in_engine_from_the_lora_adapter(lora: str | None, priority: int, expected: tuple[str, str]) -> None:
    res = parse_reservations(doc(classify=[{"model": "sql-lora", "class": "tiny"}]))
    assert class_in_engine(res, None, priority, 5000, lora) == expected


def test_class_without_rules_is_the_default() -> None:
    res = Reservations({"a": 1, "b": 2}, "b")
    assert class_in_engine(res, None, 0, 100) == ("b", FROM_DEFAULT)
    assert class_in_engine(res, None, 42, 100) == ("b", FROM_DEFAULT)  # no priorityClasses: nothing is unknown
    assert class_in_api_server(res, 100) == ("b", FROM_DEFAULT)
    assert class_in_engine(NO_RESERVATIONS, {"kvplan_class": "a"}, 0, 1) == ("default", UNKNOWN_TO_DEFAULT)


@pytest.mark.parametrize(("prompt", "expected"), [
    pytest.param(10, ("tiny", FROM_PROMPT), id="prompt-rule"),
    pytest.param(100_000, ("batch", FROM_PROMPT), id="catch-all"),
])
def test_class_in_api_server_is_the_prompt_rules(prompt: int, expected: tuple[str, str]) -> None:
    """The stat logger sees no header, priority or adapter: header and model rules never apply there."""
    res = parse_reservations(doc(classify=[{"objective": "premium", "class": "batch"}, {"model": "m", "class": "batch"}]))
    assert class_in_api_server(res, prompt) == expected


@pytest.mark.parametrize(("default_priority", "priority", "runs_with"), [
    pytest.param(11, 0, 11, id="untagged-demoted"),
    pytest.param(11, 10, 10, id="class-priority-kept"),
    pytest.param(11, -3, -3, id="negative-class-priority-kept"),
    pytest.param(11, 99, 11, id="unknown-priority-demoted"),
    pytest.param(None, 0, 0, id="no-default-published"),
])
def test_engine_priority(default_priority: int | None, priority: int, runs_with: int) -> None:
    """vLLM runs lower priorities first: a request of no class (vLLM's default 0 here is no class's) runs after
    every class."""
    res = parse_reservations(doc(priorityClasses={"10": "batch", "-3": "tiny"},
                                 defaultPriority=default_priority if default_priority is not None else ...))
    assert engine_priority(res, priority) == runs_with


def test_source_follows_configmap_updates_and_keeps_last_good(tmp_path: Path, log: Any) -> None:
    logger, messages = log
    volume = tmp_path / "kvplan"
    path = volume / "reservations.json"
    source = ReservationSource(path, check_every=3, log=logger)
    source.check()
    assert source.current == NO_RESERVATIONS and source.state.problem is not None
    write_configmap_volume(volume, {"reservations.json": doc()})
    # The third tick hands a check to the reader thread; the values apply at a later tick (a step boundary).
    assert [source.tick() for _ in range(3)] == [False, False, False]
    assert source.sync(timeout=60) and source.tick() and not source.tick()
    assert source.current.reserve("chat") == 512 and source.state.version == 1
    write_configmap_volume(volume, {"reservations.json": doc(classes={"chat": {"reserveTokens": 64}})
                                    .replace('"priorityClasses": {"0": "chat", "10": "batch", "-3": "tiny"}',
                                             '"priorityClasses": {}')
                                    .replace('"promptLengthRules": [{"maxPromptTokens": 64, "class": "tiny"}, '
                                             '{"maxPromptTokens": 2048, "class": "chat"}, {"class": "batch"}]',
                                             '"promptLengthRules": []')})
    assert source.check() and source.current.reserve("chat") == 64 and source.state.version == 2
    good = source.current
    bad_versions = [doc()[:40], doc(classes={"chat": {"reserveTokens": -1}}), doc(defaultClass="ghost")]
    for text in bad_versions:
        write_configmap_volume(volume, {"reservations.json": text})
        for _ in range(10):
            assert not source.check()
        assert source.current is good and source.state.problem is not None
    remove_configmap_key(volume, "reservations.json")
    for _ in range(5):
        assert not source.check()
    assert source.current is good and "missing" in (source.state.problem or "")
    problems = [m for m in messages if "reservation file problem" in m]
    assert len(problems) == 1 + len(bad_versions) + 1
    assert all("keeping the last good values" in m for m in problems[1:]) and "no reservations" in problems[0]
    write_configmap_volume(volume, {"reservations.json": doc()})
    assert source.check() and source.current.reserve("chat") == 512 and source.state.problem is None
    assert sum("reservations loaded" in m for m in messages) == 3
    source.close()


def test_check_steps_from_env() -> None:
    assert check_steps_from_env({}) == DEFAULT_CHECK_STEPS
    assert check_steps_from_env({"KVPLAN_RESERVATIONS_CHECK_STEPS": "4"}) == 4
    assert check_steps_from_env({"KVPLAN_RESERVATIONS_CHECK_STEPS": "0"}) == DEFAULT_CHECK_STEPS
    assert check_steps_from_env({"KVPLAN_RESERVATIONS_CHECK_STEPS": "x"}) == DEFAULT_CHECK_STEPS
    with pytest.raises(ValueError, match="check_every"):
        ReservationSource("/nonexistent", check_every=0)


IMPORT = re.compile(r"^\s*(?:from|import)\s+(vllm|kvplan_vllm)\b", re.MULTILINE)


@pytest.mark.parametrize(("folder", "allowed"), [
    pytest.param("kvcore", set(), id="kvcore"),
    pytest.param("operator", set(), id="operator"),
    pytest.param("kvplan_vllm", {"kvplan_vllm/scheduler.py", "kvplan_vllm/stats.py"}, id="plugins-pure-modules"),
])
def test_layering(folder: str, allowed: set[str]) -> None:
    offenders = sorted(
        str(p.relative_to(REPO)) for p in (REPO / folder).rglob("*.py")
        if any(m.group(1) == "vllm" or folder != "kvplan_vllm" for m in IMPORT.finditer(p.read_text()))
    )
    assert set(offenders) <= allowed and (not allowed or set(offenders) == allowed), offenders
