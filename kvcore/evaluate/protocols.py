"""The two evaluation protocols: which history each plan sees, and which (shifted) requests it is scored on.

Both turn a :class:`~kvcore.history.traces.Trace` into a list of :class:`Episode` s. An episode is one plan: the
:class:`~kvcore.history.samples.History` it is fitted on and the requests served under it, with their output lengths
already multiplied by the shift and capped at ``lmax``.

**split.** Train on the first half of the requests (time order; a trace without timestamps keeps file order),
test on the second half with outputs ``min(shift * xi, lmax)``. One episode. The training half is given to the
planner as :data:`SPLIT_WINDOWS` time-ordered windows of equal request count, so the data-driven radius can
measure drift between them (SAA and every baseline see the plain union: equal-count windows pool to it exactly).
The plan is used for the test half, by design as long as the training half, so its horizon ratio (lifetime /
history span) is 1. (Not ``(n - n // 2) / (n // 2)``: with an odd n that is 1 + 1 / (n // 2), and near the
bang-bang threshold of 1-Wasserstein DRO a radius 0.7% larger flips a reserve: BurstGPT's API log, 138 training
requests, rho = 10, goes from SAA's fractile to a reserve near L_max and costs 2.9x.)

**rolling.** Replay in time order. With T the time span of the trace, WIN = T / 8 and STEP = WIN / 4, the plan
is re-made at ``t_j = t_0 + WIN + j * STEP`` for j = 0, 1, ... while ``t_j < t_0 + T`` (28 re-plans), from the
requests that arrived in ``[t_j - WIN, t_j)``, given as WIN / STEP = 4 equal-count windows. It serves the
requests that arrive in ``[t_j, t_j + STEP)`` (the last one also takes the request at exactly ``t_0 + T``).
Requests that arrive from ``t_0 + 0.6 T`` on have their outputs scaled by the shift and capped; the history is a
replay, so later plans see shifted lengths too. Requests before the first plan (the first WIN) are not scored.
If a plan's window holds no request, the previous plan's history is reused (the operator would keep its plan).
Each plan's horizon ratio is STEP / WIN = 1 / 4: it is re-made after a quarter of its history window.
A trace without timestamps is refused (:class:`~kvcore.errors.InputError`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from kvcore.errors import InputError
from kvcore.history.samples import FloatArray, History, Samples
from kvcore.history.traces import Trace

Protocol = Literal["split", "rolling"]
PROTOCOLS: tuple[Protocol, ...] = ("split", "rolling")

SPLIT_WINDOWS = 4
"""Equal-count windows the split protocol's training half is cut into (time order). 4 matches the rolling
protocol's WIN / STEP, so the radius rule sees histories of the same shape under both protocols."""

WIN_FRACTION = 1.0 / 8.0
"""Rolling: the history window WIN as a fraction of the trace's time span T."""

STEPS_PER_WIN = 4
"""Rolling: WIN / STEP; also the number of windows each rolling history is cut into."""

SHIFT_FROM = 0.6
"""Rolling: outputs of requests arriving at or after ``t_0 + SHIFT_FROM * T`` are shifted."""

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class Episode:
    """One plan and the requests served under it.

    Attributes:
        plan_time_s: when the plan is made, seconds from the first request (None for split without timestamps).
        history: what the plan is fitted on (time-ordered windows, oldest first).
        test_index: indices (into the trace) of the requests served under this plan, in time order.
        test_outputs: their output lengths after shift and cap, tokens.
        reused: True when the window was empty and the previous plan's history was reused.
        horizon_ratio: how long the plan is in force over the span of its history (dimensionless; split: 1,
            rolling: STEP / WIN), handed to the radius rule.
    """

    plan_time_s: float | None
    history: History
    test_index: IntArray
    test_outputs: FloatArray
    reused: bool = False
    horizon_ratio: float = 1.0


@dataclass(frozen=True)
class RollingSchedule:
    """The rolling protocol's clock, seconds. ``plan_times_s`` are offsets from the first request."""

    span_s: float
    win_s: float
    step_s: float
    shift_at_s: float
    plan_times_s: tuple[float, ...]


def resolve_lmax(trace: Trace, lmax: float | None) -> float:
    """L_max: the trace's largest output unless given; a given one must not be below any observed output."""
    top = float(trace.output_tokens.max())
    if lmax is None:
        return top
    if not (np.isfinite(lmax) and lmax > 0):
        raise InputError("lmax", f"must be a finite number of tokens > 0, got {lmax}")
    if lmax < top:
        raise InputError("lmax", f"{lmax:g} is below the trace's longest output ({top:g} tokens)",
                         hint="L_max bounds every output; leave it out to use the trace maximum")
    return float(lmax)


def shift_outputs(outputs: FloatArray, shift: float, lmax: float) -> FloatArray:
    """``min(shift * xi, lmax)``, tokens."""
    if not (np.isfinite(shift) and shift > 0):
        raise InputError("shift", f"must be a finite number > 0, got {shift}")
    return np.minimum(np.asarray(outputs, dtype=np.float64) * shift, lmax)


def _windows(values: FloatArray, k: int, field: str) -> History:
    k = max(1, min(k, int(values.size)))
    parts = np.array_split(values, k)
    return History(tuple(Samples.from_arrays(p, field=f"{field}[{i}]") for i, p in enumerate(parts)))


def split_episodes(trace: Trace, *, shift: float, lmax: float) -> list[Episode]:
    """The split protocol (module docstring): one episode."""
    n = len(trace)
    if n < 2:
        raise InputError(trace.source or "trace", f"needs at least 2 requests to split, has {n}")
    half = n // 2
    train = np.asarray(trace.output_tokens[:half], dtype=np.float64)
    test_index = np.arange(half, n, dtype=np.int64)
    plan_time = float(trace.arrival_s[half]) if trace.arrival_s is not None else None
    return [Episode(plan_time_s=plan_time, history=_windows(train, SPLIT_WINDOWS, "train"),
                    test_index=test_index, test_outputs=shift_outputs(trace.output_tokens[half:], shift, lmax),
                    horizon_ratio=1.0)]


def rolling_schedule(trace: Trace) -> RollingSchedule:
    """WIN, STEP and the re-plan times of the rolling protocol; refuses a trace without usable timestamps."""
    name = trace.source or "trace"
    if trace.arrival_s is None:
        raise InputError(name, "has no arrival timestamps; the rolling protocol replays requests in time order",
                         hint="use --protocol split for this trace")
    t = trace.arrival_s
    span = float(t[-1] - t[0])
    if not span > 0:
        raise InputError(f"{name} arrival_s", "all requests arrive at the same time; the rolling protocol needs a "
                         "time span", hint="use --protocol split")
    win = span * WIN_FRACTION
    step = win / STEPS_PER_WIN
    count = int(np.ceil((span - win) / step - 1e-9))
    times = tuple(win + j * step for j in range(count))
    return RollingSchedule(span_s=span, win_s=win, step_s=step, shift_at_s=SHIFT_FROM * span, plan_times_s=times)


def rolling_episodes(trace: Trace, *, shift: float, lmax: float) -> list[Episode]:
    """The rolling protocol (module docstring): one episode per re-plan that serves at least one request."""
    sched = rolling_schedule(trace)
    assert trace.arrival_s is not None  # rolling_schedule refused it otherwise
    t = trace.arrival_s - trace.arrival_s[0]
    raw = np.asarray(trace.output_tokens, dtype=np.float64)
    outputs = np.where(t >= sched.shift_at_s, shift_outputs(raw, shift, lmax), raw)
    episodes: list[Episode] = []
    previous: History | None = None
    last = len(sched.plan_times_s) - 1
    for j, tj in enumerate(sched.plan_times_s):
        lo = int(np.searchsorted(t, tj - sched.win_s, side="left"))
        hi = int(np.searchsorted(t, tj, side="left"))
        end = t.size if j == last else int(np.searchsorted(t, tj + sched.step_s, side="left"))
        reused = hi == lo
        if reused:
            history = previous if previous is not None else _windows(outputs[: max(hi, 1)], 1, "history")
        else:
            history = _windows(outputs[lo:hi], STEPS_PER_WIN, "history")
        previous = history
        if end > hi:
            idx = np.arange(hi, end, dtype=np.int64)
            episodes.append(Episode(plan_time_s=float(tj), history=history, test_index=idx,
                                    test_outputs=outputs[hi:end], reused=reused,
                                    horizon_ratio=1.0 / STEPS_PER_WIN))
    return episodes


def episodes_for(trace: Trace, protocol: str, *, shift: float, lmax: float) -> list[Episode]:
    """Dispatch on the protocol name."""
    if protocol == "split":
        return split_episodes(trace, shift=shift, lmax=lmax)
    if protocol == "rolling":
        return rolling_episodes(trace, shift=shift, lmax=lmax)
    raise InputError("protocol", f"unknown protocol {protocol!r}", hint="one of " + ", ".join(PROTOCOLS))
