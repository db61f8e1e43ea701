"""The online step-time fit in the operator (:mod:`kvplan_operator.observe.sources.steptime`): the one range query,
its answer turned into windows, the fit per group with every reason a group keeps its profile, the fitted and
scaled profiles the planner gets (:func:`kvplan_operator.decide.translate.step_overrides`), and the status and
StepTimes condition a reconcile writes. The answers are synthesised from a known law per engine (the end-to-end
test against a real ``vllm serve`` and Prometheus is tests/vllm/test_step_fit_online.py)."""

from __future__ import annotations

import copy
import math
import random
from typing import Any

import pytest

from kvcore import StepLaw
from kvcore.planner import plan as real_plan
from kvcore.profiles import resolve
from kvplan_operator import conditions as C
from kvplan_operator.decide.translate import build_instance, step_overrides
from kvplan_operator.observe.capacity import SpecProfiles, capacity_view
from kvplan_operator.observe.sources.capacity import EngineCapacity
from kvplan_operator.observe.sources.steptime import (DEFAULT_BLOCK, LAYOUT_ROLLING, LAYOUT_UNKNOWN, NO_KV_CAPACITY,
                                                       SERIES, group_windows, observe_step_fits, pod_groups,
                                                       steptime_query)
from kvplan_operator.prom import PromError
from kvplan_operator.reconcile import Deps, reconcile
from kvplan_operator.record.status import capacity_body, step_times_condition
from kvplan_operator.spec import parse_spec
from op_fakes import FakeKube, ScriptedKnobs, dep, kvplan  # type: ignore[import-not-found]
from op_history_world import T, TWO_GROUPS as SPEC, RecordedProm  # type: ignore[import-not-found]
from op_reconcile_world import busy_matrix  # type: ignore[import-not-found]

LAW = StepLaw(intercept_s=0.03, per_seq_s=4e-4, per_context_token_s=2e-6, per_prefill_token_s=6e-5)
KV = 300_000.0
W = 60.0

def window_values(law: StepLaw, decode: float, prefill: float, context: float, *, block: float = DEFAULT_BLOCK
                  ) -> dict[str, float]:
    """The six per-second values an engine running ``decode`` sequences (``context`` tokens in all) with
    ``prefill`` prompt tokens per step shows over a busy window, stepping by ``law``."""
    steps = 1.0 / law.step(decode, context, prefill)
    return {"busy": max(1.0, round(decode)), "itl_count": decode * steps, "steps": steps,
            "step_tokens": (decode + prefill) * steps, "generated": decode * steps,
            "usage": (context + decode * (block + 1) / 2) / KV}


def regimes(n: int, seed: int = 3) -> list[tuple[float, float, float]]:
    rng = random.Random(seed)
    return [(rng.uniform(2, 60), rng.uniform(0, 900), rng.uniform(100, 3000)) for _ in range(n)]


def series(group: str, pod: str, points: list[tuple[float, dict[str, float]]]) -> list[dict[str, Any]]:
    """The answer's series of one engine: per series name its ``[t, value]`` points."""
    return [{"metric": {"kvplan_key": group, "kvplan_series": name, "pod": pod, "engine": "0"},
             "values": [[t, repr(v[name])] for t, v in points]} for name in SERIES]


def answer(group: str, law: StepLaw, *, n: int, end: float, pods: int = 1, seed: int = 3) -> list[dict[str, Any]]:
    out = []
    for k in range(pods):
        pts = [(end - (n - 1 - i) * W, window_values(law, b, p, b * c))
               for i, (b, p, c) in enumerate(regimes(n, seed + k))]
        out += series(group, f"{group}-{k}", pts)
    return out


class StepProm:
    """Answers the step-time range query with ``result`` (or raises ``error``); records the calls."""

    def __init__(self, result: list[dict[str, Any]] | None = None, error: PromError | None = None) -> None:
        self.result, self.error, self.calls = result or [], error, []  # type: ignore[var-annotated]

    def query(self, promql: str, *, at: float | None = None) -> Any:
        raise AssertionError("no instant query expected")

    def query_range(self, promql: str, *, start: float, end: float, step: float) -> Any:
        self.calls.append((promql, start, end, step))
        if self.error is not None:
            raise self.error
        return {"resultType": "matrix", "result": self.result}


def engines(kv: float | None = KV) -> dict[str, EngineCapacity]:
    return {g: EngineCapacity(g, kv, 1, 0.5, 0.0, block_size=DEFAULT_BLOCK) for g in ("interactive", "batch")}


def fits_of(prom: StepProm, spec: Any, **kw: Any) -> Any:
    own = SpecProfiles.of(spec)
    args: dict[str, Any] = {"engines": engines(), "layouts": {"interactive": (4, 1), "batch": (8, 1)},
                            "unsettled": {}, "since": {}} | kw
    return observe_step_fits(prom, spec, "serving", now=T[2], models=own.models, gpus=own.gpus, **args)


def test_the_query_is_six_branches_for_the_default_selector_and_six_per_own_selector() -> None:
    spec = parse_spec(SPEC)
    q = steptime_query(spec, "serving", 60)
    assert q.count(" or ") == len(SERIES) - 1 and "kvplan_key" not in q
    for name, (fn, metric) in SERIES.items():
        assert f'"kvplan_series", "{name}"' in q and f"{fn}(" in q and metric.replace(":", "_") in q
    assert 'namespace="serving", pod=~"(vllm-i|vllm-b)-' in q and "[60s]" in q
    own = copy.deepcopy(SPEC)
    own["groups"][1]["metricsSelector"] = 'job="batch-pods"'
    q2 = steptime_query(parse_spec(own), "serving", 60)
    assert q2.count(" or ") == 2 * len(SERIES) - 1 and q2.count('"kvplan_key", "batch"') == len(SERIES)
    assert 'pod=~"vllm-i-' in q2 and 'job="batch-pods"' in q2


def test_series_on_the_default_selector_find_their_group_by_pod_name() -> None:
    spec = parse_spec(SPEC)
    pts = [(T[2] - (11 - i) * W, window_values(LAW, b, p, b * c)) for i, (b, p, c) in enumerate(regimes(12))]
    result = []
    for pod in ("vllm-i-5d8f7c-x2x4q", "vllm-b-6c7d8e-abcde", "vllm-i-canary-5d8f7c-x2x4q"):
        for s in series("", pod, pts):
            del s["metric"]["kvplan_key"]
            result.append(s)
    got = group_windows({"resultType": "matrix", "result": result}, {"interactive": KV, "batch": KV}, W,
                        pods=pod_groups(spec))
    assert {g: len(ws) for g, ws in got.items()} == {"interactive": 12, "batch": 12}  # the canary is neither


def test_windows_are_the_ratios_of_the_rates_and_skip_idle_early_and_incomplete_ones() -> None:
    end = T[2]
    good = window_values(LAW, 20, 100, 20 * 800)
    idle = dict(good, busy=0.0)
    result = series("interactive", "p", [(end - 3 * W, good), (end - 2 * W, idle), (end - W, good), (end, good)])
    result[SERIES_INDEX["usage"]]["values"].pop()  # the newest window has no usage sample: incomplete
    got = group_windows({"resultType": "matrix", "result": result}, {"interactive": KV}, W,
                        since={"interactive": end - 3 * W})
    # the first window ends at the re-layout (its window began before it), the idle one, the incomplete one: gone
    assert len(got["interactive"]) == 1
    w = got["interactive"][0]
    assert w.step_s == pytest.approx(LAW.step(20, 20 * 800, 100))
    assert w.decode == pytest.approx(20) and w.prefill == pytest.approx(100)
    assert w.context == pytest.approx(20 * 800)
    assert w.tokens == pytest.approx(20 / LAW.step(20, 16000, 100) * W)


SERIES_INDEX = {name: i for i, name in enumerate(SERIES)}


def test_a_group_without_engine_capacity_has_no_windows() -> None:
    result = answer("interactive", LAW, n=10, end=T[2])
    assert group_windows({"resultType": "matrix", "result": result}, {"interactive": None}, W) == {}


def test_bad_answers_are_prometheus_errors() -> None:
    with pytest.raises(PromError) as bad:
        group_windows({"resultType": "vector", "result": []}, {}, W)
    assert bad.value.reason == C.PROMETHEUS_BAD_RESPONSE
    many = [{"metric": {}, "values": []}] * 30_000
    with pytest.raises(PromError) as too:
        group_windows({"resultType": "matrix", "result": many}, {}, W)
    assert too.value.reason == C.TOO_MANY_SERIES


def test_each_group_is_fitted_from_its_own_engines() -> None:
    other = StepLaw(0.05, 1e-3, 1e-6, 1e-4)
    prom = StepProm(answer("interactive", LAW, n=12, end=T[2], pods=2) + answer("batch", other, n=12, end=T[2]))
    spec = parse_spec(SPEC)
    fits = fits_of(prom, spec)
    assert len(prom.calls) == 1
    _, start, end, step = prom.calls[0]
    assert step == 60 and end == T[2] and start == T[2] - (1800 // 60 - 1) * 60
    for g, law, windows in (("interactive", LAW, 24), ("batch", other, 12)):
        fit = fits[g]
        assert fit.source == "fitted" and fit.windows == windows and fit.residual < 1e-6
        for name in ("intercept_s", "per_seq_s", "per_context_token_s", "per_prefill_token_s"):
            assert getattr(fit.law, name) == pytest.approx(getattr(law, name), rel=1e-6)


def test_every_reason_a_group_keeps_its_profile() -> None:
    spec = parse_spec(SPEC)
    prom = StepProm(answer("interactive", LAW, n=12, end=T[2]) + answer("batch", LAW, n=3, end=T[2]))
    fits = fits_of(prom, spec)
    assert fits["batch"].reason == "TooFewWindows" and fits["batch"].windows == 3
    fits = fits_of(prom, spec, layouts={"interactive": None, "batch": (8, 1)})
    assert fits["interactive"].reason == LAYOUT_UNKNOWN
    fits = fits_of(prom, spec, unsettled={"interactive": "it is rolling out"})
    assert fits["interactive"].reason == LAYOUT_ROLLING and "rolling" in fits["interactive"].message
    fits = fits_of(prom, spec, engines=engines(None))
    assert fits["interactive"].reason == NO_KV_CAPACITY
    # no capacity query (spec.capacity.fromEngine: false): the profile's KV capacity turns usage into tokens
    fits = fits_of(prom, spec, engines=None, profile_kv={"interactive": KV, "batch": None})
    assert fits["interactive"].source == "fitted" and fits["batch"].reason == NO_KV_CAPACITY
    # windows from before the group's last re-layout do not count
    fits = fits_of(prom, spec, since={"interactive": T[2] - 5 * W})
    assert fits["interactive"].reason == "TooFewWindows" and fits["interactive"].windows == 5
    down = fits_of(StepProm(error=PromError(C.PROMETHEUS_UNAVAILABLE, "refused")), spec)
    assert {f.reason for f in down.values()} == {C.PROMETHEUS_UNAVAILABLE}


def test_the_fit_off_sends_no_query() -> None:
    spec = parse_spec(copy.deepcopy(SPEC) | {"capacity": {"stepTimes": {"fromEngine": False}}})
    prom = StepProm(answer("interactive", LAW, n=12, end=T[2]))
    assert fits_of(prom, spec) == {} and prom.calls == []
    assert step_times_condition(False, {}) is None


def test_windows_that_cannot_pin_the_law_scale_the_model() -> None:
    """One workload shape all day: B, S and P move together, so only a factor on the model is fitted."""
    spec = parse_spec(SPEC)
    from kvcore import layout_model

    model = layout_model("A100-80GB", "llama-70b", 4, 1)
    pts = []
    for i in range(12):
        b = 4.0 + 4 * i
        v = window_values(LAW, b, 10 * b, 900 * b)
        v["steps"] = 1.0 / (1.3 * model(b, 900 * b, 10 * b))
        v["itl_count"] = b * v["steps"]
        v["step_tokens"], v["generated"] = 11 * b * v["steps"], b * v["steps"]
        pts.append((T[2] - (11 - i) * W, v))
    fit = fits_of(StepProm(series("interactive", "p", pts)), spec)["interactive"]
    assert fit.source == "scaled" and fit.scale == pytest.approx(1.3, rel=1e-3)


def test_the_planner_gets_the_fit_at_the_running_layout_and_the_model_scaled_elsewhere() -> None:
    spec = parse_spec(SPEC)
    fits = fits_of(StepProm(answer("interactive", LAW, n=12, end=T[2])), spec)
    view = capacity_view(spec, engines(), {"interactive": (4, 1), "batch": (8, 1)}, {}, fits)
    overrides, notes = step_overrides(spec, view)
    assert notes == []
    by = {(o.tp, o.pp): o for o in overrides}
    assert set(by) == {(4, 1), (8, 1)}
    t0, t1 = LAW.line()
    assert by[(4, 1)].step_t0_s == pytest.approx(t0) and by[(4, 1)].step_t1_s == pytest.approx(t1)
    assert by[(4, 1)].prefill_tokens_s == pytest.approx(LAW.prefill_tokens_s())
    m4, m8 = resolve("A100-80GB", "llama-70b", 4, 1), resolve("A100-80GB", "llama-70b", 8, 1)
    assert by[(8, 1)].step_t0_s == pytest.approx(m8.step_t0_s * t0 / m4.step_t0_s)
    assert by[(8, 1)].step_t1_s == pytest.approx(m8.step_t1_s * t1 / m4.step_t1_s)
    b = m8.operating_batch
    assert by[(8, 1)].throughput_tokens_s == pytest.approx(b / (by[(8, 1)].step_t0_s + by[(8, 1)].step_t1_s * b))
    # the instance the planner solves carries them: its TP=4 profile is the fitted line
    obs = {c.name: _obs(c.name) for c in spec.classes}
    inst = build_instance(spec, obs, capacity=view)
    prof = resolve("A100-80GB", "llama-70b", 4, 1, inst.profiles)
    assert prof.step_t0_s == pytest.approx(t0) and prof.prefill_tokens_s == pytest.approx(LAW.prefill_tokens_s())


def _obs(name: str) -> Any:
    from kvplan_operator.observe.history import ClassObservation, history_from_windows, windows_from_matrix

    hist, total = history_from_windows(windows_from_matrix({"resultType": "matrix", "result": busy_matrix()}),
                                       max_model_len=2048)
    return ClassObservation(name, hist, total, 2, 1.0)


def test_groups_sharing_a_gpu_and_model_take_the_larger_fit_with_a_note() -> None:
    spec = parse_spec(SPEC)
    prom = StepProm(answer("interactive", LAW, n=12, end=T[2]) + answer("batch", LAW, n=20, end=T[2], seed=9))
    fits = fits_of(prom, spec)
    view = capacity_view(spec, engines(), {"interactive": (4, 1), "batch": (8, 1)}, {}, fits)
    overrides, notes = step_overrides(spec, view)
    assert len(notes) == 1 and "groups batch and interactive share A100-80GB llama-70b" in notes[0]
    t0, t1 = LAW.line()
    by = {(o.tp, o.pp): o for o in overrides}
    assert by[(8, 1)].step_t0_s == pytest.approx(t0)  # batch's fit (more tokens), at batch's layout TP=8


def test_status_shows_the_fit_and_the_condition_names_groups_on_their_profile() -> None:
    spec = parse_spec(SPEC)
    fits = fits_of(StepProm(answer("interactive", LAW, n=12, end=T[2]) + answer("batch", LAW, n=2, end=T[2])),
                   spec)
    view = capacity_view(spec, engines(), {"interactive": (4, 1), "batch": (8, 1)}, {}, fits)
    i, b = capacity_body(view["interactive"]), capacity_body(view["batch"])
    assert i is not None and b is not None
    t0, t1 = LAW.line()
    assert i["stepTimes"]["source"] == "fitted" and i["stepTimes"]["windows"] == 12
    assert math.isclose(i["stepTimes"]["t0Seconds"], t0, rel_tol=1e-4)
    assert math.isclose(i["stepTimes"]["t1Seconds"], t1, rel_tol=1e-4)
    assert b["stepTimes"] == {"source": "profile", "windows": 2, "reason": "TooFewWindows",
                              "message": fits["batch"].message}
    status, reason, message = step_times_condition(True, view)  # type: ignore[misc]
    assert (status, reason) == (False, C.STEP_TIMES_FROM_PROFILE) and message.startswith("batch: TooFewWindows")


def test_reconcile_writes_the_fit_and_the_condition() -> None:
    kube = FakeKube({"vllm-i": dep("vllm-i", ["--tensor-parallel-size", "4"]),
                     "vllm-b": dep("vllm-b", ["--tensor-parallel-size", "8"])})
    engines_answer = [
        {"metric": {"__name__": "vllm:cache_config_info", "kvplan_key": g, "engine": "0", "block_size": "16",
                    "num_gpu_blocks": str(int(KV // 16)), "pod": f"{d}-1"}, "value": [T[2], "1"]}
        for g, d in (("interactive", "vllm-i"), ("batch", "vllm-b"))]

    def steps(start: float, end: float, step: float) -> list[dict[str, Any]]:
        return answer("interactive", LAW, n=12, end=end) + answer("batch", LAW, n=12, end=end, seed=5)

    prom = RecordedProm(matrix=busy_matrix(), engines=engines_answer, steps=steps)
    deps = Deps(kube=kube, prom_factory=lambda conn: prom, planner=real_plan, clock=lambda: float(T[2]),
                resolve=lambda host: ["10.0.0.9"], knobs=ScriptedKnobs())
    out = reconcile(kvplan(copy.deepcopy(SPEC), kube), deps)
    assert out.ok, out
    cond = C.find(kube.status["conditions"], C.STEP_TIMES)
    assert cond["status"] == "True" and cond["reason"] == C.STEP_TIMES_FITTED, cond
    for g in ("interactive", "batch"):
        st = kube.status["plan"]["groups"][g]["capacity"]["stepTimes"]
        assert st["source"] == "fitted" and math.isclose(st["t0Seconds"], LAW.intercept_s, rel_tol=1e-4)


def test_the_fit_starts_after_the_last_re_layout_and_the_last_rollout() -> None:
    from kvplan_operator.desired import LayoutChange
    from kvplan_operator.observe import GroupState, relayout_times

    spec = parse_spec(SPEC)
    done = {"status": {"conditions": [
        {"type": "Available", "reason": "MinimumReplicasAvailable", "lastUpdateTime": "2026-12-04T10:00:00Z"},
        {"type": "Progressing", "reason": "NewReplicaSetAvailable", "lastUpdateTime": "2026-12-04T10:30:00Z"}]}}
    rolled = 1_796_380_200.0  # 2026-12-04T10:30:00Z
    states = {"interactive": GroupState(done, (4, 1), True, None, 1, None), "batch": GroupState(None, None, False,
                                                                                                   None, None, None)}
    changes = (LayoutChange(rolled - 600, "interactive=8x1"), LayoutChange(rolled + 60, "batch=4x1"))
    assert relayout_times(spec, changes, states) == {"interactive": rolled, "batch": rolled + 60}
    assert relayout_times(spec, (LayoutChange(5.0, ""),)) == {"interactive": 5.0, "batch": 5.0}
    # an attempt names every group's target: only the groups whose target moved since the attempt before restart
    both = (LayoutChange(100.0, "batch=8x1,interactive=4x1"), LayoutChange(200.0, "batch=4x1,interactive=4x1"),
            LayoutChange(300.0, "batch=4x1,interactive=8x1"))
    assert relayout_times(spec, both) == {"interactive": 300.0, "batch": 200.0}
    assert relayout_times(spec, both[:1]) == {"interactive": 100.0, "batch": 100.0}


def test_the_streaming_client_s_packed_points_read_as_lists_do() -> None:
    from kvplan_operator.prom.stream import Points

    plain = answer("interactive", LAW, n=10, end=T[2])
    packed = copy.deepcopy(plain)
    for s in packed:
        pts = Points()
        pts.t.extend(float(t) for t, _ in s["values"])
        pts.v.extend(float(v) for _, v in s["values"])
        s["values"] = pts
    read = [group_windows({"resultType": "matrix", "result": r}, {"interactive": KV}, W) for r in (plain, packed)]
    assert read[0] == read[1] and len(read[0]["interactive"]) == 10


@pytest.mark.parametrize(("key", "value"), [("windowSeconds", 1), ("lookbackSeconds", 10), ("minWindows", 2),
                                            ("fromEngine", "sometimes"), ("every", 5)])
def test_bad_step_time_settings_are_refused_naming_the_field(key: str, value: Any) -> None:
    from kvplan_operator.spec import InvalidSpec

    with pytest.raises(InvalidSpec) as info:
        parse_spec(copy.deepcopy(SPEC) | {"capacity": {"stepTimes": {key: value}}})
    assert f"spec.capacity.stepTimes.{key}" in str(info.value)
