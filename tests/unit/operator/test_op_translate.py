"""The CR's robustness and re-plan settings become the radius rule kvcore applies (operator/decide/translate.py).

The drift rule's horizon term depends on how long a plan stays in force relative to its history; the operator
knows both (``spec.replan.interval``, ``spec.prometheus.lookback``) and must hand their ratio to kvcore, or every
re-plan would be sized as if it had to hold for a whole lookback (the paper's 0.15 E[xi]).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from kvcore.reservation.radius import DEFAULT_RADIUS
from kvcore.history.samples import History, Samples
from kvplan_operator.observe.history import ClassObservation
from kvplan_operator.spec import Robustness, parse_spec
from kvplan_operator.decide.translate import build_instance, horizon_ratio, radius_policy
from op_targets_world import SPEC  # type: ignore[import-not-found]


@pytest.mark.parametrize(
    ("interval", "lookback", "expected"),
    [pytest.param("5m", "6h", 300 / 21600, id="defaults"), pytest.param("1h", "1h", 1.0, id="one-lookback"),
     pytest.param("30s", "2h", 30 / 7200, id="fast")],
)
def test_horizon_ratio_is_interval_over_lookback(interval: str, lookback: str, expected: float) -> None:
    raw = copy.deepcopy(SPEC)
    raw.setdefault("replan", {})["interval"] = interval
    raw["prometheus"]["lookback"] = lookback
    spec = parse_spec(raw)
    assert horizon_ratio(spec) == pytest.approx(expected)


def test_drift_policy_gets_the_horizon_and_keeps_its_parameters() -> None:
    t = radius_policy(Robustness(policy="drift", floor_scale=2.0, drift_z=4.0), horizon=0.02)
    assert t.note is None
    assert (t.policy.kind, t.policy.horizon_ratio) == ("drift", 0.02)
    assert (t.policy.floor_scale, t.policy.drift_z) == (2.0, 4.0)


def test_fixed_policies_are_not_touched_by_the_horizon() -> None:
    t = radius_policy(Robustness(policy="fraction", frac=0.15), horizon=0.02)
    assert t.policy.kind == "fraction" and t.policy.frac == 0.15
    assert t.policy.horizon_ratio == DEFAULT_RADIUS.horizon_ratio  # unused by 'fraction'; left at its default


def test_build_instance_hands_the_ratio_to_every_class() -> None:
    spec = parse_spec(copy.deepcopy(SPEC))
    rng = np.random.default_rng(0)
    history = History.of([Samples.from_arrays(np.round(rng.gamma(2.0, 100.0, 200))) for _ in range(6)])
    obs = {c.name: ClassObservation(c.name, history, 1200.0, 6, 1.0) for c in spec.classes}
    inst = build_instance(spec, obs)
    expected = horizon_ratio(spec)
    assert [c.radius.horizon_ratio if c.radius else None for c in inst.classes] == [expected] * len(spec.classes)


@pytest.mark.parametrize(
    ("kvcore_field", "cr"),
    [
        pytest.param("groups[0].gpu_type", "spec.groups[0].nodePool.gpuType", id="gpu-type"),
        pytest.param("groups[1].gpus", "spec.groups[1].nodePool.gpuCount", id="gpus"),
        pytest.param("groups[1].gpus_per_node", "spec.groups[1].nodePool.gpusPerNode", id="gpus-per-node"),
        pytest.param("groups[0].model", "spec.groups[0].model", id="model"),
        pytest.param("groups[0].layouts[0].tp", "spec.groups[0].layouts", id="layout-index-not-the-spec-s"),
        pytest.param("classes[1].lmax", "spec.classes[1].maxOutputTokens", id="lmax"),
        pytest.param("classes[0].arrival_rate", "spec.classes[0].arrivalRate", id="arrival-rate"),
        pytest.param("classes[1].arrival_rate", "spec.classes[1].arrivalRateQuery", id="arrival-rate-from-query"),
        pytest.param("classes[0].cp", "spec.classes[0].costs.preemption", id="cp"),
        pytest.param("classes[0].slo.lam", "spec.classes[0].slo.lambda", id="slo-lambda"),
        pytest.param("classes[0].history", "spec.classes[0].history", id="history"),
        pytest.param("classes[0].radius.eps", "spec.classes[0].robustness", id="radius"),
        pytest.param("classes[0]", "spec.classes[0]", id="class"),
        pytest.param("profiles[2].kv_capacity_tokens", "spec.profiles[2].kvCapacityTokens", id="profile"),
        pytest.param("costs.c_rej", "spec.costs.cRej", id="costs"),
        pytest.param("classes", "spec.classes", id="list"),
        pytest.param("profile.tp", "spec", id="unknown"),
    ],
)
def test_kvcore_fields_map_to_cr_paths(kvcore_field: str, cr: str) -> None:
    from kvplan_operator.decide.translate import cr_path

    raw = copy.deepcopy(SPEC)
    del raw["classes"][1]["arrivalRate"]
    raw["classes"][1]["arrivalRateQuery"] = "sum(rate(x[5m]))"
    assert cr_path(kvcore_field, parse_spec(raw)) == cr


def test_kvcore_refusal_reaches_status_with_the_cr_path() -> None:
    """An unknown GPU type that passes the operator's own checks (an older CRD, or kvcore lagging the CRD) comes back
    as spec.groups[0].nodePool.gpuType, not kvcore's groups[0].gpu_type."""
    from kvcore.errors import InputError
    from kvplan_operator.decide import _refusal

    spec = parse_spec(copy.deepcopy(SPEC))
    f = _refusal(InputError("groups[0].gpu_type", "unknown GPU type 'H200'", hint="known: A100-80GB"), spec)
    assert f.reason == "InvalidSpec"
    assert f.message == "spec.groups[0].nodePool.gpuType: unknown GPU type 'H200' (known: A100-80GB)"


def test_a_layout_vllm_would_refuse_is_invalid_spec_naming_the_layouts() -> None:
    """TP=8 for Qwen2.5-7B (28 attention heads): vLLM refuses it at start-up, so kvcore refuses the instance and the
    operator names the group's layouts with vLLM's reason (before, the layout was planned as if it could run)."""
    from pydantic import ValidationError

    from kvcore import input_error
    from kvplan_operator.decide import _refusal

    raw = copy.deepcopy(SPEC)
    raw["groups"][0]["model"] = "qwen2.5-7b"   # layouts TP4 and TP8
    spec = parse_spec(raw)
    rng = np.random.default_rng(0)
    history = History.of([Samples.from_arrays(np.round(rng.gamma(2.0, 100.0, 200))) for _ in range(6)])
    obs = {c.name: ClassObservation(c.name, history, 1200.0, 6, 1.0) for c in spec.classes}
    with pytest.raises(ValidationError) as err:   # pydantic's wrapping of kvcore's InputError
        build_instance(spec, obs)
    assert input_error(err.value).field == "groups[0].layouts[1].tp"
    f = _refusal(err.value, spec)
    assert f.reason == "InvalidSpec"
    assert f.message.startswith("spec.groups[0].layouts: TP=8 does not divide the 28 attention heads of qwen2.5-7b")
