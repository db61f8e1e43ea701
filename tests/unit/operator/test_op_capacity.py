"""Capacity from the engine (operator/observe/sources/capacity.py, observe/capacity.py capacity_view, translate.capacity_overrides): the one
instant query per re-plan (every group's cache_config_info, kv_cache_usage_perc and preemption rate, both metric
spellings); vLLM's labels read as its KV size (kv_cache_size_tokens first, else num_gpu_blocks x block_size,
"None" before profiling = not reported); per group the smallest engine, mean usage, summed preemptions; M(z) of
the running layout = the engine's number and the other layouts scaled by engine/profile, passed to kvcore as
profile overrides (groups sharing a profile share the smaller value, with a note); the profile when the engine
has not reported, the Deployment is rolling out or spec.capacity.fromEngine is false, each with its reason; and
status showing both numbers with usage and preemptions, end to end through a reconcile."""

from __future__ import annotations

import copy

import pytest

from kvcore.planner import plan as real_plan
from kvcore.profiles import resolve, roofline
from kvplan_operator import conditions as C
from kvplan_operator.reconcile import Deps, reconcile
from kvplan_operator.observe.sources.capacity import capacity_query, engine_capacity, engine_tokens
from kvplan_operator.spec import parse_spec
from kvplan_operator.decide.translate import build_instance, capacity_overrides
from kvplan_operator.observe.capacity import capacity_view
from op_fakes import FakeKube, ScriptedKnobs, dep, kvplan  # type: ignore[import-not-found]
from op_history_world import T, TWO_GROUPS as SPEC, RecordedProm  # type: ignore[import-not-found]
from op_reconcile_world import busy_matrix  # type: ignore[import-not-found]

R4 = roofline("A100-80GB", "llama-70b", 4, 1).kv_capacity_tokens
R8 = roofline("A100-80GB", "llama-70b", 8, 1).kv_capacity_tokens


def info(group: str, **labels: str) -> dict:
    return {"metric": {"__name__": "vllm:cache_config_info", "kvplan_key": group, "engine": "0",
                       "block_size": "16", **labels}, "value": [T[2], "1"]}


def sample(group: str, name: str, value: float, **labels: str) -> dict:
    return {"metric": {"__name__": name, "kvplan_key": group, **labels}, "value": [T[2], str(value)]}


ENGINES = [
    info("interactive", num_gpu_blocks="20000", kv_cache_size_tokens="None", pod="vllm-i-1"),
    info("interactive", num_gpu_blocks="20100", kv_cache_size_tokens="321600", pod="vllm-i-2"),
    sample("interactive", "vllm_kv_cache_usage_perc", 0.5, pod="vllm-i-1"),
    sample("interactive", "vllm:kv_cache_usage_perc", 0.7, pod="vllm-i-2"),
    {"metric": {"kvplan_key": "interactive", "kvplan_series": "preemptions"}, "value": [T[2], "0.25"]},
    {"metric": {"kvplan_key": "interactive", "kvplan_series": "preemptions"}, "value": [T[2], "0.5"]},
    info("batch", num_gpu_blocks="None", kv_cache_size_tokens="None"),
]


def test_one_query_for_every_group_both_spellings():
    q = capacity_query(parse_spec(SPEC), "serving", 3600)
    assert q.count('"kvplan_key", "interactive"') == 2 and q.count('"kvplan_key", "batch"') == 2
    for name in ("vllm:cache_config_info|vllm_cache_config_info", "vllm:kv_cache_usage_perc|vllm_kv_cache_usage_perc",
                 "vllm:num_preemptions_total|vllm_num_preemptions_total"):
        assert name in q
    assert 'namespace="serving", pod=~"vllm-i-[a-z0-9]+-[a-z0-9]+"' in q and "[3600s]" in q


@pytest.mark.parametrize(
    ("labels", "tokens"),
    [
        pytest.param({"num_gpu_blocks": "1000", "block_size": "16"}, 16000.0, id="blocks-times-size"),
        pytest.param({"num_gpu_blocks": "1000", "block_size": "16", "kv_cache_size_tokens": "12000"}, 12000.0,
                     id="group-aware-size-first"),
        pytest.param({"num_gpu_blocks": "None", "block_size": "16"}, None, id="not-profiled-yet"),
        pytest.param({"num_gpu_blocks": "0", "block_size": "16"}, None, id="zero"),
        pytest.param({"num_gpu_blocks": "NaN", "block_size": "16"}, None, id="nan"),
        pytest.param({"num_gpu_blocks": "1e300", "block_size": "16"}, None, id="absurd"),
        pytest.param({"block_size": "16"}, None, id="missing"),
    ],
)
def test_engine_tokens_from_vllm_labels(labels, tokens):
    assert engine_tokens(labels) == tokens


def test_engines_per_group():
    caps = engine_capacity({"resultType": "vector", "result": ENGINES}, parse_spec(SPEC))
    i, b = caps["interactive"], caps["batch"]
    assert i.kv_tokens == 320000.0 and i.engines == 2  # the smaller of 20000 x 16 and 321600
    assert i.spread == pytest.approx(321600 / 320000 - 1)
    assert i.usage == pytest.approx(0.6) and i.preemptions_per_s == pytest.approx(0.75)
    assert b.kv_tokens is None and b.engines == 1 and "without a KV size yet" in b.reason
    empty = engine_capacity({"resultType": "vector", "result": []}, parse_spec(SPEC))["batch"]
    assert empty.kv_tokens is None and "no vllm:cache_config_info series" in empty.reason


def test_engine_capacity_scales_the_profile_for_other_layouts():
    spec = parse_spec(SPEC)
    caps = engine_capacity({"resultType": "vector", "result": ENGINES}, spec)
    view = capacity_view(spec, caps, {"interactive": (4, 1), "batch": (8, 1)}, {})
    i, b = view["interactive"], view["batch"]
    assert (i.source, i.engine_kv_tokens, i.profile_kv_tokens) == ("engine", 320000.0, R4)
    assert i.scale == pytest.approx(320000.0 / R4)
    assert b.source == "profile" and "using the profile" in b.note and b.profile_kv_tokens == R8
    overrides, notes = capacity_overrides(spec, view)
    got = {(o.tp, o.pp): o.kv_capacity_tokens for o in overrides}
    assert got == {(4, 1): 320000.0, (8, 1): float(int(R8 * 320000.0 / R4))}
    assert notes == []
    inst = build_instance(spec, _observed(spec), capacity=view)
    assert resolve("A100-80GB", "llama-70b", 4, 1, inst.profiles).kv_capacity_tokens == 320000.0
    planned = real_plan(inst)
    for g in planned.groups:  # both groups share the profile key (A100-80GB, llama-70b): the engine's number
        assert g.kv_capacity_tokens == got[(g.tp, g.pp)]


def test_groups_sharing_a_profile_take_the_smaller_engine_with_a_note():
    spec = parse_spec(SPEC)
    result = [info("interactive", num_gpu_blocks="20000", pod="a"), info("batch", num_gpu_blocks="15000", pod="b")]
    caps = engine_capacity({"resultType": "vector", "result": result}, spec)
    view = capacity_view(spec, caps, {"interactive": (4, 1), "batch": (4, 1)}, {})
    overrides, notes = capacity_overrides(spec, view)
    assert {(o.tp, o.pp): o.kv_capacity_tokens for o in overrides}[(4, 1)] == 240000.0
    assert len(notes) == 2 and "the smaller engine capacity is used" in notes[0]


@pytest.mark.parametrize(
    ("running", "settled", "engine", "needle"),
    [
        pytest.param({"interactive": (4, 1)}, {"interactive": "it is rolling out"}, True, "rolling out",
                     id="rollout"),
        pytest.param({"interactive": None}, {}, True, "layout is unknown", id="no-deployment"),
        pytest.param({"interactive": (4, 1)}, {}, False, "spec.capacity.fromEngine is false", id="opt-out"),
    ],
)
def test_profile_fallbacks_say_why(running, settled, engine, needle):
    raw = copy.deepcopy(SPEC) | {"capacity": {"fromEngine": engine}}
    spec = parse_spec(raw)
    caps = engine_capacity({"resultType": "vector", "result": ENGINES}, spec)
    cap = capacity_view(spec, caps, running, settled)["interactive"]
    assert cap.source == "profile" and needle in cap.note and cap.scale == 1.0
    assert capacity_overrides(spec, {"interactive": cap})[0] == ()


def test_implausible_ratio_is_noted_but_used():
    spec = parse_spec(SPEC)
    caps = engine_capacity({"resultType": "vector", "result": [info("interactive", num_gpu_blocks="10")]}, spec)
    cap = capacity_view(spec, caps, {"interactive": (4, 1)}, {})["interactive"]
    assert cap.source == "engine" and cap.engine_kv_tokens == 160.0 and "check the group's metricsSelector" in cap.note


@pytest.mark.parametrize(
    ("body", "why"),
    [
        pytest.param({"metadata": {}, "spec": {"replicas": 2}}, None, id="no-versioning-no-status"),
        pytest.param({"metadata": {"generation": 3}, "spec": {"replicas": 2}}, "no Deployment controller",
                     id="never-observed"),
        pytest.param({"metadata": {"generation": 3}, "status": {"observedGeneration": 2}}, "controller has not caught",
                     id="generation-ahead"),
        pytest.param({"metadata": {"generation": 3}, "spec": {"replicas": 2},
                      "status": {"observedGeneration": 3, "replicas": 3, "updatedReplicas": 1}}, "two layouts",
                     id="rolling"),
        pytest.param({"metadata": {"generation": 3}, "spec": {"replicas": 2},
                      "status": {"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2}}, None, id="settled"),
    ],
)
def test_which_deployments_are_settled(body, why):
    from kvplan_operator.observe import unsettled

    got = unsettled(body)
    assert (got is None) if why is None else (got is not None and why in got)


def _observed(spec):
    from kvplan_operator.observe.history import windows_from_matrix, history_from_windows, ClassObservation

    hist, total = history_from_windows(windows_from_matrix({"resultType": "matrix", "result": busy_matrix()}),
                                       max_model_len=2048)
    return {c.name: ClassObservation(c.name, hist, total, 2, 1.0) for c in spec.classes}


def test_reconcile_status_shows_both_numbers_usage_and_preemptions():
    kube = FakeKube({"vllm-i": dep("vllm-i", ["--tensor-parallel-size", "4"]),
                     "vllm-b": dep("vllm-b", ["--tensor-parallel-size", "8"])})
    prom = RecordedProm(matrix=busy_matrix(), engines=ENGINES)
    deps = Deps(kube=kube, prom_factory=lambda conn: prom, planner=real_plan, clock=lambda: float(T[2]),
                resolve=lambda host: ["10.0.0.9"], knobs=ScriptedKnobs())
    out = reconcile(kvplan(copy.deepcopy(SPEC), kube), deps)
    assert out.ok, out
    groups = kube.status["plan"]["groups"]
    i, b = groups["interactive"]["capacity"], groups["batch"]["capacity"]
    assert i == {"source": "engine", "tp": 4, "pp": 1, "engineKvCapacityTokens": 320000, "profileKvCapacityTokens":
                 R4, "scale": round(320000 / R4, 4), "engines": 2, "kvCacheUsage": 0.6, "preemptionsPerSecond": 0.75,
                 "note": ""}  # the engines differ by 0.5 %: within the 1 % that goes unremarked; no profileSource:
    # a catalogue GPU and model with no override
    assert b["source"] == "profile" and b["engineKvCapacityTokens"] is None and "using the profile" in b["note"]
    assert any("group batch capacity" in n for n in kube.status["plan"]["notes"])
    ranges = [c for c in prom.calls if c[0] == "range"]
    # one history source + one step-time range query, one capacity + one calibration instant query
    assert len(ranges) == 2 and len(prom.calls) == 4
    assert sum("iteration_tokens_total" in str(c) for c in ranges) == 1
    # no engine step series here: no stepTimes in status, and the condition says each group keeps its profile
    steps = C.find(kube.status["conditions"], C.STEP_TIMES)
    assert steps["status"] == "False" and steps["reason"] == C.STEP_TIMES_FROM_PROFILE
    assert "interactive: TooFewWindows" in steps["message"] and "batch: TooFewWindows" in steps["message"]
    assert C.find(kube.status["conditions"], C.READY)["status"] == "True"
