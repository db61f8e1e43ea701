"""Plan calibration: what the plan in force predicts per class, against what the engines realised.

Two quantities per class i, both dimensionless (docs/model.md, "Plan calibration"):

- **overflow share** ``O_i = P(L_i > t_i)``: the share of finished requests (a request share, not a token share)
  whose output tokens exceed ``t_i``, the largest bucket bound of the class's histogram at or below its reservation
  ``y_i`` (the histogram's resolution: a realised count above ``y_i`` itself is not known inside a bucket, so both
  sides are read at ``t_i``; with kvplan's <= 10 % buckets ``t_i >= y_i / 1.1``). Predicted: the share of the
  samples the plan was made from (weighted, :func:`overflow_share`); realised: the share of the newest window's
  histogram (:func:`overflow_from_buckets`).
- **preemptions per request** ``P_i``: preemptions of the class's finished requests over their number. Predicted:
  the vLLM engine model (:mod:`kvcore.sim.engine`) on a seeded synthetic workload of the plan's mix on each group
  (:func:`kvcore.rules.classes.replay`: the classes at their planned rates ``lambda_i pi_ik``, (prompt, output)
  rows resampled from their histories), bounded by a request count, never by wall clock
  (:func:`predict_preemptions`); pooled over groups by the class's planned rate on each. Realised:
  ``increase(preemptions[W]) / increase(requests[W])``.

**Comparison** (:func:`compare`): the *floored ratio* ``r_a = (realised + a) / (predicted + a)`` with an absolute
floor ``a`` per quantity (:data:`FLOORS`: 0.01 of the requests, 0.01 preemptions per request), so it is always
finite, tends to ``realised / predicted`` when the prediction is well above the floor and to 1 when both are far
below it (0 against 0.001 is 1.1, not drift). A quantity **drifts** when ``|r_a - 1| > tolerance`` (default
:data:`DRIFT_TOLERANCE`, 20 %). A quantity that cannot be compared says why (a reason, never an exception).
Pure: seeded, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from kvcore.errors import InputError
from kvcore.rules.classes import KnobClass, replay
from kvcore.sim.engine import EngineConfig, simulate_engine
from kvcore.sim.types import SimGroup

PREEMPTIONS, OVERFLOW = "preemptions", "overflow"
#: The quantities compared, in the order reports list them.
QUANTITIES = (PREEMPTIONS, OVERFLOW)
DRIFT_TOLERANCE = 0.2
"""Relative tolerance of the floored ratio: a plan within 20 % of what happened is calibrated (a re-plan window
of a few hundred requests has a sampling error of that order on a share of a few per cent)."""
FLOORS: Mapping[str, float] = {PREEMPTIONS: 0.01, OVERFLOW: 0.01}
"""Absolute floor ``a`` per quantity: 0.01 preemptions per request, 0.01 of the requests (one request in a
hundred); differences well below it are noise, not drift."""
MIN_REQUESTS = 20.0
"""Fewest realised requests of a class in the window before its numbers are compared."""
REQUESTS = 1000
"""Synthetic requests per group of :func:`predict_preemptions` (the work bound; :data:`MAX_WORK` over all)."""
MAX_WORK = 8000
"""Most requests simulated by one prediction over every group (requests per group shrink to fit, >= 100)."""

# Reasons (CamelCase constants) a quantity of a class is not compared.
NO_PREDICTION = "NoPrediction"
NO_REALISED = "NoRealisedData"
NOT_A_NUMBER = "NotANumber"
TOO_FEW_REQUESTS = "TooFewRequests"


def overflow_share(values: ArrayLike, weights: ArrayLike | None, threshold: float) -> float:
    """``P(L > threshold)``: the weight share of ``values`` (output tokens) above ``threshold`` (tokens).
    Raises :class:`InputError` naming the field on empty, non-finite or negative input."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        raise InputError("calibration.values", "no samples")
    if not np.isfinite(v).all():
        raise InputError("calibration.values", "samples must be finite")
    w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=np.float64).ravel()
    if w.size != v.size or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise InputError("calibration.weights", "must be finite, >= 0, one per sample, with a positive sum")
    if not (math.isfinite(threshold) and threshold >= 0):
        raise InputError("calibration.threshold", f"must be finite tokens >= 0, got {threshold}")
    return float(w[v > threshold].sum() / w.sum())


def resolution_bound(bounds: Sequence[float], reserve_tokens: float) -> float:
    """``t``: the largest finite bucket bound at or below ``reserve_tokens`` (0 when none is)."""
    below = [float(b) for b in bounds if math.isfinite(float(b)) and float(b) <= reserve_tokens]
    return max(below, default=0.0)


def overflow_from_buckets(bounds: Sequence[float], cumulative: Sequence[float], threshold: float
                          ) -> tuple[float, float]:
    """A histogram window (ascending ``le`` bounds with ``+Inf``, cumulative counts) -> (share of its requests
    above ``threshold``, its request count). ``threshold`` must be one of the bounds or 0 (:func:`resolution_bound`).
    Raises :class:`InputError` on a window without ``+Inf``, non-finite counts or no requests."""
    b = [float(x) for x in bounds]
    c = [float(x) for x in cumulative]
    if len(b) != len(c) or not b:
        raise InputError("calibration.buckets", f"{len(b)} bounds and {len(c)} counts")
    if not all(math.isfinite(x) and x >= 0 for x in c):
        raise InputError("calibration.buckets", "counts must be finite and >= 0")
    if not math.isinf(b[-1]):
        raise InputError("calibration.buckets", "no +Inf bucket: the request count is unknown")
    total = c[-1]
    if total <= 0:
        raise InputError("calibration.buckets", "no requests in the window")
    at = 0.0 if threshold <= 0 else max((ci for bi, ci in zip(b, c) if bi <= threshold), default=0.0)
    return max(0.0, total - at) / total, total


@dataclass(frozen=True)
class PreemptionPrediction:
    """Per class, predicted preemptions per finished request (classes with no finished request are absent), the
    synthetic requests simulated per group and in all (the work)."""

    per_request: Mapping[str, float]
    requests_per_group: int
    work: int


def requests_per_group(groups: int, *, requests: int = REQUESTS, max_work: int = MAX_WORK) -> int:
    """Synthetic requests for each of ``groups`` groups: ``requests``, shrunk so all fit ``max_work`` (>= 100)."""
    return max(100, min(requests, max_work // max(groups, 1)))


def predict_preemptions(groups: Sequence[tuple[SimGroup, EngineConfig, Sequence[KnobClass]]], *,
                        requests: int = REQUESTS, max_work: int = MAX_WORK, seed: int = 0,
                        reference: bool = False) -> PreemptionPrediction:
    """Per class, preemptions per finished request predicted by the engine model: on each group, a seeded
    synthetic workload of its classes (:func:`kvcore.rules.classes.replay`, :func:`requests_per_group` requests),
    replayed under the group's engine settings; pooled over groups weighted by the class's planned rate there.
    ``reference=True`` runs the step-by-step reference model (the same numbers, slower)."""
    n = requests_per_group(len(groups), requests=requests, max_work=max_work)
    num: dict[str, float] = {}
    den: dict[str, float] = {}
    work = 0
    for group, engine, classes in groups:
        if not classes:
            continue
        workload, policy = replay(group, classes, requests=n, rng=np.random.default_rng(seed))
        result = simulate_engine(workload, [group], policy, rng=np.random.default_rng(seed), engine=engine,
                                 reference=reference)
        work += len(workload)
        for i, c in enumerate(classes):
            stats = result.classes[i]
            if stats.finished <= 0 or c.rate_rps <= 0:
                continue
            num[c.name] = num.get(c.name, 0.0) + c.rate_rps * stats.preemptions / stats.finished
            den[c.name] = den.get(c.name, 0.0) + c.rate_rps
    return PreemptionPrediction({k: num[k] / den[k] for k in num}, n, work)


@dataclass(frozen=True)
class Verdict:
    """One quantity of one class: predicted and realised (None: unknown), the floored ratio, whether it drifts,
    and why it was not compared (``reason``; empty when it was)."""

    predicted: float | None
    realised: float | None
    ratio: float | None = None
    drifting: bool = False
    reason: str = ""


def compare(predicted: float | None, realised: float | None, *, floor: float,
            tolerance: float = DRIFT_TOLERANCE) -> Verdict:
    """The floored ratio and drift verdict (module docstring); a missing or non-finite side gives a reason."""
    if not (math.isfinite(floor) and floor > 0):
        raise InputError("calibration.floor", f"must be finite and > 0, got {floor}")
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise InputError("calibration.tolerance", f"must be finite and >= 0, got {tolerance}")
    if predicted is None:
        return Verdict(None, realised, reason=NO_PREDICTION)
    if realised is None:
        return Verdict(predicted, None, reason=NO_REALISED)
    if not (math.isfinite(predicted) and math.isfinite(realised)) or predicted < 0 or realised < 0:
        return Verdict(predicted, realised, reason=NOT_A_NUMBER)
    ratio = (realised + floor) / (predicted + floor)
    return Verdict(predicted, realised, ratio, abs(ratio - 1.0) > tolerance)


@dataclass(frozen=True)
class Summary:
    """Over every class: how many had a quantity compared, how many drift, and the worst (largest
    ``|log ratio|``) class, quantity and ratio (None when nothing was compared)."""

    classes: int
    drifting: int
    worst_class: str | None = None
    worst_quantity: str | None = None
    worst_ratio: float | None = None
    drifting_classes: tuple[str, ...] = field(default_factory=tuple)


def summarise(verdicts: Mapping[str, Mapping[str, Verdict]]) -> Summary:
    """:class:`Summary` of per class, per quantity verdicts (ties: the first class and quantity in order)."""
    compared, drifting = 0, []
    worst: tuple[float, str, str, float] | None = None
    for name, per in verdicts.items():
        ratios = [(q, v) for q, v in per.items() if v.ratio is not None]
        if not ratios:
            continue
        compared += 1
        if any(v.drifting for _, v in ratios):
            drifting.append(name)
        for q, v in ratios:
            assert v.ratio is not None
            score = abs(math.log(v.ratio))
            if worst is None or score > worst[0]:
                worst = (score, name, q, v.ratio)
    if worst is None:
        return Summary(compared, 0)
    return Summary(compared, len(drifting), worst[1], worst[2], worst[3], tuple(drifting))
