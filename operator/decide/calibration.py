"""Part of phase 2, decide (pure): plan calibration, the plan in force's prediction per class against what the
engines realised over the re-plan window W (docs/model.md, "Plan calibration"; docs/operator.md, "Calibration").

The plan compared is the one **in force during the window**: the last plan applied in full
(:meth:`~kvplan_operator.observe.Observation.previous_plan`), not the one this cycle makes. Per class:

- **overflow**: predicted ``P(L > t)`` on the class's history *before* the newest window (the distribution the plan
  in force was made from, at most one window later), realised on the newest window's histogram (W), both at ``t``,
  the largest bucket bound at or below the plan's ``y_i`` (:func:`kvcore.resolution_bound`);
- **preemptions** per finished request: predicted by kvcore's engine model (:func:`kvcore.predict_preemptions`) on
  each group of the plan in force (its layout, replicas and KV capacity; the engines' running ``--max-num-seqs``,
  watermark and policy; kvplan's gate where its scheduler is mounted, with the plan's ``y`` as reservations),
  bounded by :data:`kvcore.evaluate.calibration.MAX_WORK` simulated requests; realised from the plugin's or vLLM's
  counters (:mod:`kvplan_operator.observe.calibration`). The engine model runs only when some class has enough
  realised requests to compare; otherwise no preemption prediction is made (``work`` 0).

Each quantity gets the floored ratio and the drift verdict of :func:`kvcore.compare_calibration`. Nothing here
fails the plan: every problem is a reason (:class:`Calibration.reason` for the whole, ``Verdict.reason`` per
class and quantity).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvcore import (CALIBRATION_FLOORS, CALIBRATION_MIN_REQUESTS, DRIFT_TOLERANCE, CalibrationVerdict, History,
                    InputError, Instance, Plan, compare_calibration, overflow_from_buckets, overflow_share,
                    plan_groups, predict_preemptions, resolution_bound, summarise_calibration)

from ..observe import Observation
from ..observe.calibration import RealisedCalibration
from .knobs import running_knobs
from .rules import engine_base

# Reasons of the whole calibration (status.calibration.reason); a query's own reason passes through.
NO_PLAN_IN_FORCE = "NoPlanInForce"
NOT_OBSERVED = "NotObserved"
PREDICTION_FAILED = "PredictionFailed"
TOO_FEW_REQUESTS = "TooFewRequests"
NOTHING_COMPARED = "NothingCompared"


@dataclass(frozen=True)
class Calibration:
    """What record writes: per class, per quantity (``preemptions``, ``overflow``) a verdict; the window; the
    threshold ``t`` per class; per group the engines' mean KV-cache usage; the work; and why not (``reason``)."""

    window_s: float
    verdicts: Mapping[str, Mapping[str, CalibrationVerdict]] = field(default_factory=dict)
    thresholds: Mapping[str, float] = field(default_factory=dict)
    kv_usage: Mapping[str, float | None] = field(default_factory=dict)
    work: int = 0
    reason: str = ""
    message: str = ""
    tolerance: float = DRIFT_TOLERANCE


def _before_newest(history: History | None) -> History | None:
    if history is None:
        return None
    return History(history.windows[:-1]) if len(history.windows) > 1 else history


def _overflow(obs: Observation, name: str, y: float) -> tuple[float | None, float | None, float | None, str]:
    """(predicted, realised, threshold, reason) of one class's overflow share."""
    c = obs.classes.get(name)
    if c is None or c.newest is None:
        return None, None, None, "NoRealisedData"
    bounds, counts = c.newest
    t = resolution_bound(bounds, y)
    try:
        realised, total = overflow_from_buckets(bounds, counts, t)
    except InputError:
        return None, None, t, "NoRealisedData"
    if total < CALIBRATION_MIN_REQUESTS:
        return None, None, t, TOO_FEW_REQUESTS
    hist = _before_newest(c.history)
    if hist is None:
        return None, realised, t, "NoPrediction"
    pooled = hist.pooled()
    try:
        return overflow_share(pooled.values, pooled.weights, t), realised, t, ""
    except InputError:
        return None, realised, t, "NoPrediction"


def _groups(obs: Observation, plan: Plan, instance: Instance) -> list[Any]:
    known = {g.name for g in instance.groups}
    classes = {c.name for c in instance.classes}
    sub = plan.model_copy(update={"groups": [g for g in plan.groups if g.name in known],
                                  "classes": [c for c in plan.classes if c.name in classes]})
    spec_groups = {g.name: g for g in obs.spec.groups}
    out = []
    for group, ks in plan_groups(sub, instance):
        g = spec_groups[group.name]
        running = running_knobs(obs.groups[g.name].body if g.name in obs.groups else None, g.container)
        base = engine_base(running, g.node_pool.gpu())
        if running.scheduler_cls is not None:
            base = base.model_copy(update={"admission": "gate"})
        out.append((group, base, ks))
    return out


def calibrate(obs: Observation, instance: Instance) -> Calibration:
    """Predicted against realised for the plan in force (module docstring). Never raises."""
    realised: RealisedCalibration | None = obs.calibration
    if realised is None:
        return Calibration(0.0, reason=NOT_OBSERVED, message="calibration was not observed this cycle")
    usage = {g: cap.usage for g, cap in obs.capacity.items()}
    plan = obs.previous_plan()
    if plan is None:
        return Calibration(realised.window_s, kv_usage=usage, reason=NO_PLAN_IN_FORCE,
                           message="no plan was in force during the window")
    comparable = any(not rc.reason and (rc.requests or 0.0) >= CALIBRATION_MIN_REQUESTS
                     for rc in realised.classes.values())
    try:  # the engine replay is the cycle's costliest step after the solve: only when a class can be compared
        predicted: Mapping[str, float] = {}
        work = 0
        if comparable:
            prediction = predict_preemptions(_groups(obs, plan, instance))
            predicted, work = prediction.per_request, prediction.work
    except Exception as exc:  # InputError from kvcore, or a bug: the plan goes on, calibration says why
        why = f"{exc.field}: {exc.message}" if isinstance(exc, InputError) else type(exc).__name__
        return Calibration(realised.window_s, kv_usage=usage, reason=PREDICTION_FAILED,
                           message=f"the engine model's prediction failed ({why})")
    verdicts: dict[str, dict[str, CalibrationVerdict]] = {}
    thresholds: dict[str, float] = {}
    for cp in plan.classes:
        if cp.name not in obs.classes:
            continue
        per: dict[str, CalibrationVerdict] = {}
        rc = realised.classes.get(cp.name)
        predicted_p = predicted.get(cp.name)
        if rc is None:
            per["preemptions"] = CalibrationVerdict(predicted_p, None, reason=realised.reason or "NoRealisedData")
        elif rc.reason:
            per["preemptions"] = CalibrationVerdict(predicted_p, None, reason=rc.reason)
        elif (rc.requests or 0.0) < CALIBRATION_MIN_REQUESTS:
            per["preemptions"] = CalibrationVerdict(predicted_p, None, reason=TOO_FEW_REQUESTS)
        else:
            per["preemptions"] = compare_calibration(predicted_p, rc.per_request,
                                                     floor=CALIBRATION_FLOORS["preemptions"])
        p_o, r_o, t, why = _overflow(obs, cp.name, float(cp.reserve_tokens))
        per["overflow"] = (CalibrationVerdict(p_o, r_o, reason=why) if why else
                           compare_calibration(p_o, r_o, floor=CALIBRATION_FLOORS["overflow"]))
        if t is not None:
            thresholds[cp.name] = t
        verdicts[cp.name] = per
    summary = summarise_calibration(verdicts)
    reason, message = "", ""
    if summary.classes == 0:
        reason, message = realised.reason, realised.message
        if not reason:
            reasons = sorted({v.reason for per in verdicts.values() for v in per.values() if v.reason})
            reason, message = NOTHING_COMPARED, "no class could be compared: " + (", ".join(reasons) or "no class")
    return Calibration(realised.window_s, verdicts, thresholds, usage, work, reason, message)
