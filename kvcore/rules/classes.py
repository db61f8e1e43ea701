"""The engine-model rules' shared input: one class as a rule sees it on one group (:class:`KnobClass`), and the
replay workload built from the classes' recent history (:func:`replay`, :func:`history_segment`).

Both rules (:mod:`kvcore.rules.knobs`, :mod:`kvcore.rules.reserve`) and their shared replays
(:mod:`kvcore.rules.replays`) build on this module, so it sits below all of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from kvcore.errors import InputError
from kvcore.sim.types import SimGroup, SimPolicy, Workload


@dataclass(frozen=True)
class KnobClass:
    """One class as the rule sees it on one group: its planned arrival rate there and recent history."""

    name: str
    rate_rps: float
    """Requests/s of this class routed to the group (all its replicas)."""
    inputs: NDArray[np.float64]
    """Prompt tokens of recent requests (paired with ``outputs``)."""
    outputs: NDArray[np.float64]
    """Output tokens of the same requests."""
    reserve_tokens: float
    """The plan's y for the class (tokens)."""
    rho: float
    """c_p / c_w of the class (dimensionless)."""
    weights: NDArray[np.float64] | None = None
    """Probability of each (prompt, output) row (histogram histories); None: equally likely."""

    @classmethod
    def build(cls, name: str, rate_rps: float, inputs: ArrayLike, outputs: ArrayLike, reserve_tokens: float,
              rho: float, weights: ArrayLike | None = None) -> KnobClass:
        i = np.asarray(inputs, dtype=np.float64).ravel()
        o = np.asarray(outputs, dtype=np.float64).ravel()
        if i.size == 0 or i.size != o.size:
            raise InputError(f"knobs.classes[{name}].inputs", f"needs paired samples, got {i.size} and {o.size}")
        if not (np.isfinite(i).all() and np.isfinite(o).all()):
            raise InputError(f"knobs.classes[{name}].outputs", "samples must be finite")
        if not (math.isfinite(rate_rps) and rate_rps >= 0):
            raise InputError(f"knobs.classes[{name}].rate_rps", f"must be finite and >= 0, got {rate_rps}")
        if not (math.isfinite(rho) and rho > 0):
            raise InputError(f"knobs.classes[{name}].rho", f"must be finite and > 0, got {rho}")
        w = None
        if weights is not None:
            w = np.asarray(weights, dtype=np.float64).ravel()
            if w.size != o.size or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
                raise InputError(f"knobs.classes[{name}].weights", "must be finite, >= 0, one per sample, sum > 0")
            w = w / w.sum()
        return cls(name, float(rate_rps), np.maximum(np.rint(i), 0.0), np.maximum(np.rint(o), 1.0),
                   float(reserve_tokens), float(rho), w)


def replay(group: SimGroup, classes: Sequence[KnobClass], *, requests: int, rng: np.random.Generator,
           arrivals_s: ArrayLike | None = None) -> tuple[Workload, SimPolicy]:
    """``requests`` requests of the classes on ``group``: classes in proportion to their rates, (prompt, output)
    rows resampled from each class's history; arrivals at the summed rate, Poisson, or, given the history's own
    ``arrivals_s`` (sorted seconds), its most recent ``requests`` arrivals rescaled to that rate (bursts kept)."""
    rates = np.array([c.rate_rps for c in classes])
    total = float(rates.sum())
    if total <= 0:
        raise InputError("knobs.classes", "no traffic on this group (every rate is 0)")
    cls = rng.choice(len(classes), size=requests, p=rates / total)
    inp = np.empty(requests)
    out = np.empty(requests)
    for i, c in enumerate(classes):
        idx = np.flatnonzero(cls == i)
        rows = (rng.integers(0, c.inputs.size, size=idx.size) if c.weights is None
                else rng.choice(c.inputs.size, size=idx.size, p=c.weights))
        inp[idx], out[idx] = c.inputs[rows], c.outputs[rows]
    times = None if arrivals_s is None else np.asarray(arrivals_s, dtype=np.float64).ravel()
    if times is not None and times.size >= 2 and np.all(np.diff(times) >= 0) and times[-1] > times[-min(
            requests, times.size)]:
        recent = times[-requests:]
        recent = recent - recent[0]
        reps = -(-requests // recent.size)  # a history shorter than the replay is repeated end to end
        span = float(recent[-1]) * recent.size / max(recent.size - 1, 1)
        arrival = np.concatenate([recent + k * span for k in range(reps)])[:requests]
        arrival *= (requests / total) / max(float(arrival[-1]), 1e-12) * (requests - 1) / requests
    else:
        gaps = rng.exponential(1.0 / total, size=requests)
        gaps[0] = 0.0
        arrival = np.cumsum(gaps)
    workload = Workload.from_arrays(arrival, cls, inp, out, n_classes=len(classes))
    policy = SimPolicy.from_arrays([c.reserve_tokens for c in classes], np.ones((len(classes), 1)),
                                   cp=[c.rho for c in classes], cw=1.0)
    return workload, policy


def history_segment(times: NDArray[np.float64] | None, requests: int, replays: int, k: int,
                    ) -> NDArray[np.float64] | None:
    """The arrival times replay ``k`` of ``replays`` takes from a history (sorted seconds): ``requests`` of them,
    the most recent for k = 0 and evenly spaced earlier windows for the others, all inside the history (windows
    overlap when it holds fewer than ``replays x requests``; each replay is the whole history when it holds fewer
    than ``requests``). None without a usable history (Poisson arrivals)."""
    if times is None or times.size < 2:
        return None
    n = int(times.size)
    width = min(requests, n)
    step = (n - width) // (replays - 1) if replays > 1 else 0
    stop = n - k * min(step, width)
    return times[stop - width:stop]
