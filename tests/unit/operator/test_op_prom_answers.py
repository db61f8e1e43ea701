"""What of a Prometheus answer the operator believes and repeats (issue 26, items 9 and 10).

Item 10, times (operator/prom/answer_time.py): samples two hours older than the requested window were planned as
healthy. Every point of a range answer must lie in the window asked and on its step, every instant sample at the
time asked, within a slack far below a window; else ``StaleSamples``.

Item 9, text (operator/prom/response_text.py): part of a non-numeric sample value and a foreign class-label value
reached Degraded messages. The class is "any text of the answer in any message", so a seeded corpus of answers
puts a marker into every leaf and key of a valid range, rate and capacity answer (values, timestamps, ``le``,
class-label values, metric names, result types, shapes), and checks that whatever the parsers raise is a
:class:`PromError` (nothing else escapes) whose message holds no 4-character piece of the marker."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from typing import Any

import pytest

from kvplan_operator import conditions as C
from kvplan_operator.prom.answer_time import MAX_SKEW_S, check_instant_time, check_range_times
from kvplan_operator.observe.history import rate_value, windows_by_key
from kvplan_operator.prom import PromError, parse_response
from kvplan_operator.observe.sources import observe_histories
from kvplan_operator.observe.sources.capacity import engine_capacity
from kvplan_operator.spec import parse_spec
from op_history_world import MATRIX, T, RecordedProm, tagged  # type: ignore[import-not-found]
from op_sources_world import STOCK  # type: ignore[import-not-found]

START, END, STEP = 1700000000.0, 1700018000.0, 3600.0  # six windows of an hour


@pytest.mark.parametrize(
    ("times", "needle"),
    [
        pytest.param([START - 7200, END - 7200], "2.0 h older than the requested window", id="two-hours-older"),
        pytest.param([START - STEP], "3600 s older", id="one-window-older"),
        pytest.param([START - MAX_SKEW_S - 1], "older than the requested window", id="just-beyond-the-slack"),
        pytest.param([END + 3600], "newer than the query's end", id="future"),
        pytest.param([END + MAX_SKEW_S + 1], "newer than the query's end", id="just-in-the-future"),
        pytest.param([START + 1800], "off the query's 3600 s step", id="half-a-step-off"),
        pytest.param([START + 3600 + 301], "off the query's", id="just-off-the-step"),
        pytest.param([float("nan")], "no finite timestamp", id="nan"),
        pytest.param([float("inf")], "no finite timestamp", id="inf"),
        pytest.param([START, START + STEP, float("-inf")], "no finite timestamp", id="one-bad-among-good"),
    ],
)
def test_range_points_of_other_times_are_refused(times, needle):
    with pytest.raises(PromError) as info:
        check_range_times(times, start=START, end=END, step=STEP, what="source vllm")
    assert info.value.reason == C.STALE_SAMPLES and needle in str(info.value), str(info.value)


@pytest.mark.parametrize(
    ("times", "step"),
    [
        pytest.param([START + k * STEP for k in range(6)], STEP, id="the-grid"),
        pytest.param([START - 60, END - 60], STEP, id="a-minute-early"),
        pytest.param([START + 0.0004, END - 0.0004], STEP, id="milliseconds"),
        pytest.param([START + MAX_SKEW_S, END + MAX_SKEW_S], STEP, id="at-the-slack"),
        pytest.param([], STEP, id="empty"),
        pytest.param([START + k * 60 + 29 for k in range(300)], 60.0, id="short-step-half-slack"),
    ],
)
def test_range_points_on_the_grid_pass(times, step):
    check_range_times(times, start=START, end=START + 299 * 60 if step == 60 else END, step=step, what="q")


@pytest.mark.parametrize(("ts", "ok"), [pytest.param(END, True, id="at"), pytest.param(END - MAX_SKEW_S, True,
                                                                                        id="slack"),
                                        pytest.param(END - 7200, False, id="two-hours-old"),
                                        pytest.param(END + 3600, False, id="future"),
                                        pytest.param(float("nan"), False, id="nan")])
def test_instant_samples_are_at_the_time_asked(ts, ok):
    if ok:
        check_instant_time(ts, at=END, what="q")
        return
    with pytest.raises(PromError) as info:
        check_instant_time(ts, at=END, what="q")
    assert info.value.reason == C.STALE_SAMPLES


@pytest.mark.parametrize("age", [pytest.param(a, id=f"{a / 3600:g}h") for a in (3600.0 * 2, 3600.0 * 24, 301.0)])
def test_a_stale_history_is_not_planned(age):
    """The whole path: a Prometheus (or a cache in front of it) answering what it answered ``age`` ago."""
    prom = RecordedProm(anchor=T[-1] + age)
    with pytest.raises(PromError) as info:
        observe_histories(prom, parse_spec(STOCK), "serving", now=T[-1])
    assert info.value.reason == C.STALE_SAMPLES
    observe_histories(RecordedProm(), parse_spec(STOCK), "serving", now=T[-1])  # the same answer, on time, is fine


def test_a_stale_rate_is_not_used():
    with pytest.raises(PromError) as info:
        rate_value({"resultType": "vector", "result": [{"metric": {}, "value": [END - 7200, "3"]}]}, at=END)
    assert info.value.reason == C.STALE_SAMPLES
    assert rate_value({"resultType": "vector", "result": [{"metric": {}, "value": [END, "3"]}]}, at=END) == 3.0


# --- item 9: no text of an answer in a message, whatever the answer ----------------------------------------------
MARKER = "QXJ7-leak-\u00e9\u2028\"'<b>%s{}"


def _leaves(doc: Any, path: tuple = ()) -> Iterator[tuple]:
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield path + (("key", k),)
            yield from _leaves(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _leaves(v, path + (i,))
    yield path


def _replace(doc: Any, path: tuple, value: Any) -> Any:
    out = copy.deepcopy(doc)
    if not path:
        return value
    parent = out
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if isinstance(last, tuple):  # a key: rename it
        parent[value if isinstance(value, str) else MARKER] = parent.pop(last[1])
    else:
        parent[last] = value
    return out


def _mutations(doc: Any, seed: int) -> Iterator[Any]:
    rng = random.Random(seed)
    values = [MARKER, MARKER * 50, [MARKER], {"x": MARKER}, None, 1e308, -1, [MARKER, MARKER], [1, MARKER],
              "NaN", "1_0", "\u0661\u0660", True]
    for path in _leaves(doc):
        if not path:
            continue  # the data object itself: parse_response only ever hands on an object
        yield _replace(doc, path, MARKER)
        yield _replace(doc, path, rng.choice(values))


def _pieces(text: str) -> set[str]:
    return {MARKER[i:i + 4] for i in range(len(MARKER) - 3)}


def _check(parse: Any, doc: Any, failures: list[str]) -> None:
    try:
        parse(doc)
    except PromError as exc:
        leaked = [p for p in _pieces(MARKER) if p in str(exc)]
        if leaked:
            failures.append(f"{exc.reason}: {str(exc)[:160]!r} quotes {leaked[0]!r}")
    except Exception as exc:  # noqa: BLE001 - the point: nothing but PromError may leave a parser
        failures.append(f"{type(exc).__name__} escaped for {json.dumps(doc)[:160]}")


RANGE = {"resultType": "matrix", "result": tagged(MATRIX, "kvplan_class", "chat")
         + tagged(MATRIX, "kvplan_class", "other-team")}
#: another team's series with a broken count: the message must say which series without its label value
BAD_FOREIGN = copy.deepcopy(RANGE)
BAD_FOREIGN["result"][5]["values"][1][1] = "NaN"
RATE = {"resultType": "vector", "result": [{"metric": {"pod": "p"}, "value": [END, "2.5"]}]}
CAPACITY = {"resultType": "vector", "result": [
    {"metric": {"__name__": "vllm:cache_config_info", "kvplan_key": "interactive", "num_gpu_blocks": "100",
                "block_size": "16"}, "value": [END, "1"]},
    {"metric": {"__name__": "vllm:kv_cache_usage_perc", "kvplan_key": "interactive"}, "value": [END, "0.5"]}]}


def test_no_answer_text_reaches_a_message():
    spec = parse_spec(STOCK)
    def range_answer(d: Any) -> None:
        check_range_times((w[0] for rows in windows_by_key(d, "kvplan_class", describe={"chat": "class chat"}).values()
                           for w in rows), start=T[0], end=T[-1], step=3600.0, what="source kvplan")

    with pytest.raises(PromError, match="a value of kvplan_class that no class names"):
        range_answer(BAD_FOREIGN)
    parsers = [
        ("range", RANGE, range_answer),
        ("range-bad-foreign", BAD_FOREIGN, range_answer),
        ("rate", RATE, lambda d: rate_value(d, at=END)),
        ("capacity", CAPACITY, lambda d: engine_capacity(d, spec, at=END)),
        ("api", {"status": "error", "errorType": "bad_data", "error": "x"},
         lambda d: parse_response(422, json.dumps(d).encode(), what="q")),
    ]
    failures: list[str] = []
    tried = 0
    for name, doc, parse in parsers:
        for i, mutated in enumerate(_mutations(doc, seed=26)):
            tried += 1
            _check(parse, mutated, [])
            before = len(failures)
            _check(parse, mutated, failures)
            if len(failures) > before:
                failures[-1] = f"{name} #{i}: {failures[-1]}"
    assert tried > 300
    assert failures == [], "\n".join(sorted(set(f.split(" for ")[0].split(": ", 1)[1][:90] for f in failures)))
