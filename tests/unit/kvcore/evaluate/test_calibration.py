"""kvcore.evaluate.calibration: the overflow share against a direct count on the samples and on the buckets, the
predicted preemptions of the fast engine model against the step-by-step reference and against a direct count of
the replay's outcomes, determinism, and the floored ratio and drift verdict with every bad input's reason."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvcore import InputError
from kvcore.evaluate.calibration import (
    NO_PREDICTION, NO_REALISED, NOT_A_NUMBER, Verdict, compare, overflow_from_buckets, overflow_share,
    predict_preemptions, requests_per_group, resolution_bound, summarise,
)
from kvcore.rules.classes import KnobClass, replay
from kvcore.sim.engine import EngineConfig, simulate_engine
from kvcore.sim.types import SimGroup


def _classes() -> list[KnobClass]:
    rng = np.random.default_rng(3)
    return [KnobClass.build("chat", 4.0, np.full(200, 300.0), rng.geometric(1 / 200, 200), 150.0, 1.0),
            KnobClass.build("code", 2.0, np.full(200, 800.0), rng.geometric(1 / 600, 200), 400.0, 1.0)]


def _group(kv: int = 6_000) -> SimGroup:
    return SimGroup(name="g", replicas=1, kv_capacity_tokens=kv, step_time_base_s=0.02, step_time_per_seq_s=0.0005)


@pytest.mark.parametrize("threshold", [0, 1, 99, 150, 1_000, 10_000], ids=lambda t: f"t{t}")
def test_overflow_share_is_a_direct_weighted_count(threshold: int) -> None:
    rng = np.random.default_rng(0)
    v = rng.integers(1, 2_000, 500).astype(float)
    w = rng.random(500)
    direct = sum(wi for vi, wi in zip(v, w) if vi > threshold) / sum(w)
    assert overflow_share(v, w, threshold) == pytest.approx(direct, rel=1e-12)
    assert overflow_share(v, None, threshold) == pytest.approx(float(np.mean(v > threshold)))


def test_overflow_from_buckets_counts_requests_above_the_bound() -> None:
    lengths = np.array([1, 3, 3, 7, 12, 40, 40, 90])
    bounds = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, math.inf]
    cumulative = [float((lengths <= b).sum()) for b in bounds]
    for y in (0, 1, 4, 10, 33, 100):
        t = resolution_bound(bounds, y)
        share, total = overflow_from_buckets(bounds, cumulative, t)
        assert total == len(lengths)
        assert share == pytest.approx(float(np.mean(lengths > t))), y
        assert share == pytest.approx(overflow_share(lengths, None, t))


@pytest.mark.parametrize("bounds,counts,field", [
    pytest.param([1.0, 2.0], [1.0, 2.0], "calibration.buckets", id="no-inf"),
    pytest.param([1.0, math.inf], [0.0, 0.0], "calibration.buckets", id="no-requests"),
    pytest.param([1.0, math.inf], [float("nan"), 2.0], "calibration.buckets", id="nan"),
])
def test_bad_buckets_name_the_field(bounds: list[float], counts: list[float], field: str) -> None:
    with pytest.raises(InputError) as err:
        overflow_from_buckets(bounds, counts, 1.0)
    assert err.value.field == field


@pytest.mark.parametrize("values,weights,field", [
    pytest.param([], None, "calibration.values", id="empty"),
    pytest.param([1.0, float("nan")], None, "calibration.values", id="nan"),
    pytest.param([1.0, 2.0], [0.0, 0.0], "calibration.weights", id="zero-weights"),
])
def test_bad_samples_name_the_field(values: list[float], weights: list[float] | None, field: str) -> None:
    with pytest.raises(InputError) as err:
        overflow_share(values, weights, 1.0)
    assert err.value.field == field


@pytest.mark.slow
def test_predicted_preemptions_fast_equals_reference_and_a_direct_count() -> None:
    classes, group = _classes(), _group()
    engine = EngineConfig(max_num_seqs=64, max_num_batched_tokens=2048)
    fast = predict_preemptions([(group, engine, classes)], requests=300, seed=5)
    ref = predict_preemptions([(group, engine, classes)], requests=300, seed=5, reference=True)
    assert fast.per_request == pytest.approx(ref.per_request)
    assert fast.work == 300 and fast.requests_per_group == 300
    # a direct count on the same seeded replay's per-request outcomes
    workload, policy = replay(group, classes, requests=300, rng=np.random.default_rng(5))
    res = simulate_engine(workload, [group], policy, rng=np.random.default_rng(5), engine=engine,
                          keep_requests=True, reference=True)
    assert res.outcomes is not None
    for i, c in enumerate(classes):
        done = (workload.class_index == i) & (res.outcomes.finish_ns >= 0)
        assert fast.per_request[c.name] == pytest.approx(res.outcomes.preemptions[done].sum() / done.sum())
    assert sum(fast.per_request.values()) > 0, "the world must preempt, or the check checks nothing"


def test_prediction_is_deterministic_and_pools_groups_by_rate() -> None:
    classes, engine = _classes(), EngineConfig(max_num_seqs=64)
    small, large = _group(6_000), _group(60_000).model_copy(update={"name": "h"})
    one = predict_preemptions([(small, engine, classes)], requests=200, seed=1)
    again = predict_preemptions([(small, engine, classes)], requests=200, seed=1)
    assert one == again
    other = predict_preemptions([(large, engine, classes)], requests=200, seed=1)
    both = predict_preemptions([(small, engine, classes), (large, engine, classes)], requests=200, seed=1)
    for c in classes:  # equal rates on both groups: the mean of the two
        assert both.per_request[c.name] == pytest.approx((one.per_request[c.name] + other.per_request[c.name]) / 2)
    assert both.work == 400


def test_requests_per_group_is_bounded_by_work() -> None:
    assert requests_per_group(1) == 1000
    assert requests_per_group(64) == 125
    assert requests_per_group(1000) == 100


@pytest.mark.parametrize("predicted,realised,drifting,ratio", [
    pytest.param(0.0, 0.0, False, 1.0, id="zero-zero"),
    pytest.param(0.0, 0.001, False, 1.1, id="zero-vs-tiny-is-not-drift"),
    pytest.param(0.0, 0.01, True, 2.0, id="zero-vs-floor-drifts"),
    pytest.param(0.5, 0.55, False, 0.56 / 0.51, id="within-20pc"),
    pytest.param(0.5, 0.7, True, 0.71 / 0.51, id="above"),
    pytest.param(0.5, 0.3, True, 0.31 / 0.51, id="below"),
])
def test_floored_ratio_and_verdict(predicted: float, realised: float, drifting: bool, ratio: float) -> None:
    v = compare(predicted, realised, floor=0.01)
    assert v.ratio == pytest.approx(ratio)
    assert v.drifting is drifting
    assert v.reason == ""


@pytest.mark.parametrize("predicted,realised,reason", [
    pytest.param(None, 0.1, NO_PREDICTION, id="no-prediction"),
    pytest.param(0.1, None, NO_REALISED, id="no-realised"),
    pytest.param(0.1, float("nan"), NOT_A_NUMBER, id="nan"),
    pytest.param(float("inf"), 0.1, NOT_A_NUMBER, id="inf"),
    pytest.param(0.1, -1.0, NOT_A_NUMBER, id="negative"),
])
def test_bad_sides_give_a_reason_not_an_exception(predicted: float | None, realised: float | None,
                                                  reason: str) -> None:
    v = compare(predicted, realised, floor=0.01)
    assert (v.reason, v.ratio, v.drifting) == (reason, None, False)


def test_summary_names_the_worst_class() -> None:
    verdicts = {"a": {"preemptions": compare(0.1, 0.1, floor=0.01), "overflow": compare(0.2, 0.5, floor=0.01)},
                "b": {"preemptions": compare(0.4, 0.05, floor=0.01)},
                "c": {"overflow": Verdict(None, 0.1, reason=NO_PREDICTION)}}
    s = summarise(verdicts)
    assert (s.classes, s.drifting, s.drifting_classes) == (2, 2, ("a", "b"))
    assert (s.worst_class, s.worst_quantity) == ("b", "preemptions")
    assert s.worst_ratio == pytest.approx(0.06 / 0.41)
    assert summarise({"c": verdicts["c"]}).worst_class is None
