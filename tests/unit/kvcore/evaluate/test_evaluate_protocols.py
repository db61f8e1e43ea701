"""Evaluation protocols: the split's halves, shift and cap; the rolling protocol's re-plan cadence (count and
times), its shift onset, its windows and empty-window rule; and the refusal of timestamp-less traces."""

from __future__ import annotations

import numpy as np
import pytest

from kvcore.errors import InputError
from kvcore.evaluate.protocols import (
    resolve_lmax,
    rolling_episodes,
    rolling_schedule,
    shift_outputs,
    split_episodes,
)
from kvcore.history.traces import Trace


def _trace(outputs: list[float] | np.ndarray, arrivals: list[float] | np.ndarray | None = None) -> Trace:
    out = np.asarray(outputs, dtype=np.float64)
    arr = None if arrivals is None else np.asarray(arrivals, dtype=np.float64)
    return Trace(arrival_s=arr, input_tokens=np.full(out.size, 10.0), output_tokens=out, source="synthetic.csv")


@pytest.mark.parametrize(
    ("xi", "shift", "lmax", "expected"),
    [
        pytest.param([10.0, 40.0], 1.0, 100.0, [10.0, 40.0], id="no-shift"),
        pytest.param([10.0, 40.0], 1.5, 100.0, [15.0, 60.0], id="scaled"),
        pytest.param([10.0, 40.0], 2.5, 90.0, [25.0, 90.0], id="capped-at-lmax"),
        pytest.param([90.0], 3.0, 90.0, [90.0], id="already-at-lmax"),
    ],
)
def test_shift_and_cap(xi: list[float], shift: float, lmax: float, expected: list[float]) -> None:
    assert shift_outputs(np.array(xi), shift, lmax).tolist() == expected


@pytest.mark.parametrize("shift", [0.0, -1.0, float("nan"), float("inf")], ids=["zero", "negative", "nan", "inf"])
def test_bad_shift(shift: float) -> None:
    with pytest.raises(InputError, match="shift"):
        shift_outputs(np.array([1.0]), shift, 10.0)


@pytest.mark.parametrize(
    ("lmax", "expected"),
    [pytest.param(None, 50.0, id="trace-max"), pytest.param(80.0, 80.0, id="given")],
)
def test_lmax(lmax: float | None, expected: float) -> None:
    assert resolve_lmax(_trace([5.0, 50.0]), lmax) == expected


def test_lmax_below_trace_max_is_refused() -> None:
    with pytest.raises(InputError, match="below the trace's longest output"):
        resolve_lmax(_trace([5.0, 50.0]), 20.0)


@pytest.mark.parametrize("timestamps", [True, False], ids=["timestamps", "file-order"])
def test_split_trains_on_first_half_and_tests_shifted_second_half(timestamps: bool) -> None:
    xi = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    tr = _trace(xi, list(range(9)) if timestamps else None)
    (ep,) = split_episodes(tr, shift=2.0, lmax=15.0)
    assert ep.history.pooled().values.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert len(ep.history.windows) == 4
    assert ep.test_index.tolist() == [4, 5, 6, 7, 8]
    assert ep.test_outputs.tolist() == [10.0, 12.0, 14.0, 15.0, 15.0]
    assert (ep.plan_time_s is not None) == timestamps
    assert ep.horizon_ratio == 1.0  # the test half is, by design, as long as the training half (odd n or not)


def test_rolling_cadence() -> None:
    # T = 320 s: WIN = 40 s, STEP = 10 s; re-plans at 40, 50, ..., 310 (28 of them); shift from 192 s.
    sched = rolling_schedule(_trace(np.ones(321), np.arange(321.0)))
    assert (sched.span_s, sched.win_s, sched.step_s, sched.shift_at_s) == (320.0, 40.0, 10.0, 192.0)
    assert len(sched.plan_times_s) == 28
    assert sched.plan_times_s == pytest.approx([40.0 + 10.0 * j for j in range(28)])


def test_rolling_episodes_windows_and_shift() -> None:
    t = np.arange(321.0)
    xi = np.full(321, 10.0)
    eps = rolling_episodes(_trace(xi, t), shift=2.5, lmax=20.0)
    assert len(eps) == 28
    first, last = eps[0], eps[-1]
    # The first plan sees [0, 40): 40 requests in 4 windows of 10; it serves [40, 50).
    assert [len(w) for w in first.history.windows] == [10, 10, 10, 10]
    assert first.test_index.tolist() == list(range(40, 50))
    # The last plan (t = 310) also serves the request at exactly T = 320.
    assert last.test_index.tolist() == list(range(310, 321))
    # Outputs from 0.6 T = 192 s on are shifted and capped (25 -> 20), in the test and in later histories.
    served = np.concatenate([e.test_outputs for e in eps])
    times = np.concatenate([e.test_index for e in eps]).astype(float)
    assert set(served[times < 192].tolist()) == {10.0}
    assert set(served[times >= 192].tolist()) == {20.0}
    assert last.history.pooled().values.max() == 20.0
    # Every request after the first WIN is scored exactly once.
    assert times.tolist() == list(range(40, 321))
    # Each plan is re-made after STEP = WIN / 4: its horizon ratio, handed to the radius rule.
    assert {e.horizon_ratio for e in eps} == {0.25}


def test_rolling_empty_window_keeps_previous_history() -> None:
    # Requests at 0..9 s and 300..320 s only: the windows in between are empty.
    t = np.concatenate([np.arange(10.0), np.arange(300.0, 321.0)])
    eps = rolling_episodes(_trace(np.arange(1.0, t.size + 1), t), shift=1.0, lmax=100.0)
    assert all(e.test_index.size > 0 for e in eps)
    assert any(e.reused for e in eps)


@pytest.mark.parametrize(
    ("arrivals", "match"),
    [
        pytest.param(None, "no arrival timestamps", id="no-timestamps"),
        pytest.param([5.0, 5.0, 5.0], "same time", id="zero-span"),
    ],
)
def test_rolling_refuses(arrivals: list[float] | None, match: str) -> None:
    with pytest.raises(InputError, match=match) as exc:
        rolling_episodes(_trace([1.0, 2.0, 3.0], arrivals), shift=1.0, lmax=10.0)
    assert exc.value.hint is not None and "split" in exc.value.hint
