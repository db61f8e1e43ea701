"""Condition helper: observedGeneration, truncated message, lastTransitionTime only on a status flip, the
``changed`` flag, documented reasons only, and transition detection for events."""

from __future__ import annotations

import pytest

from kvplan_operator import conditions as C

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def test_new_condition_is_added_and_changed():
    conds, changed = C.set_condition([], C.READY, True, C.RECONCILED, "ok", generation=3, now=T0)
    assert changed
    assert conds == [{"type": "Ready", "status": "True", "reason": "Reconciled", "message": "ok",
                      "lastTransitionTime": T0, "observedGeneration": 3}]


@pytest.mark.parametrize(
    ("status", "reason", "message", "generation", "changed", "ltt"),
    [
        pytest.param(True, C.RECONCILED, "ok", 3, False, T0, id="identical-unchanged"),
        pytest.param(True, C.RECONCILED, "ok now", 3, True, T0, id="message-changed-keeps-transition-time"),
        pytest.param(True, C.RECONCILED, "ok", 4, True, T0, id="generation-changed"),
        pytest.param(False, C.PROMETHEUS_UNAVAILABLE, "down", 3, True, T1, id="flip-moves-transition-time"),
        pytest.param("Unknown", C.PENDING, "", 3, True, T1, id="unknown"),
    ],
)
def test_update(status, reason, message, generation, changed, ltt):
    before, _ = C.set_condition([], C.READY, True, C.RECONCILED, "ok", generation=3, now=T0)
    after, was_changed = C.set_condition(before, C.READY, status, reason, message, generation=generation, now=T1)
    assert was_changed is changed
    assert after[0]["lastTransitionTime"] == ltt
    assert after[0]["observedGeneration"] == generation
    assert before[0]["message"] == "ok"  # input not modified


def test_other_conditions_kept():
    conds, _ = C.set_condition([], C.READY, True, C.RECONCILED, "ok", generation=1, now=T0)
    conds, _ = C.set_condition(conds, C.DEGRADED, False, C.HEALTHY, "fine", generation=1, now=T0)
    conds, _ = C.set_condition(conds, C.READY, False, C.INVALID_SPEC, "bad", generation=2, now=T1)
    assert [c["type"] for c in conds] == ["Ready", "Degraded"]
    assert conds[1]["reason"] == "Healthy"


def test_message_truncated():
    conds, _ = C.set_condition([], C.READY, False, C.INVALID_SPEC, "x" * 5000, generation=1)
    assert len(conds[0]["message"]) == C.MAX_MESSAGE
    assert conds[0]["message"].endswith("(truncated)")


@pytest.mark.parametrize(("type_", "reason"), [pytest.param("Happy", C.RECONCILED, id="unknown-type"),
                                               pytest.param(C.READY, "SomethingElse", id="undocumented-reason")])
def test_refuses_undocumented(type_, reason):
    with pytest.raises(ValueError):
        C.set_condition([], type_, True, reason, "", generation=1)


def test_reasons_are_camelcase_constants():
    for r in C.REASONS:
        assert r[0].isupper() and r.isalnum(), r


def test_transitioned():
    a, _ = C.set_condition([], C.DEGRADED, False, C.HEALTHY, "", generation=1, now=T0)
    b, _ = C.set_condition(a, C.DEGRADED, False, C.HEALTHY, "other message", generation=2, now=T1)
    c, _ = C.set_condition(b, C.DEGRADED, True, C.TOO_FEW_SAMPLES, "", generation=2, now=T1)
    assert not C.transitioned(a, b, C.DEGRADED)
    assert C.transitioned(b, c, C.DEGRADED)
    assert C.transitioned([], a, C.DEGRADED)
