"""The CR's robustness and re-plan settings become the radius rule kvcore applies (operator/translate.py).

The drift rule's horizon term depends on how long a plan stays in force relative to its history; the operator
knows both (``spec.replan.interval``, ``spec.prometheus.lookback``) and must hand their ratio to kvcore, or every
re-plan would be sized as if it had to hold for a whole lookback (the paper's 0.15 E[xi]).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from kvcore.radius import DEFAULT_RADIUS
from kvcore.samples import History, Samples
from kvplan_operator.history import ClassObservation
from kvplan_operator.spec import Robustness, parse_spec
from kvplan_operator.translate import build_instance, horizon_ratio, radius_policy
from test_op_targets import SPEC  # type: ignore[import-not-found]


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
