"""The KVPlan status body, and the merge patch that moves the stored status to it. Pure (used by the record phase).

Layout of ``status`` (all keys camelCase; names of groups/classes are map keys so ``kubectl get -o yaml`` reads
like the plan):

- ``observedGeneration``, ``lastPlanTime`` (last successful plan), ``lastAttemptTime``, ``mode``;
- ``conditions``: Ready / Planned / Applied / Degraded (see ``conditions.py``);
- ``plan``: ``id``, ``status``, ``reason``, ``method``, ``iterations``, ``solveSeconds``, ``lowerBound`` (the fleet
  method's certified bound), ``decision`` (disruption policy), ``groups.<g>`` {tp, pp, replicas, gpusPerReplica,
  kvCapacityTokens, throughputTokensPerSecond, utilisation, waitingSeconds, arrivalRate, maxNumSeqs,
  replicasManagedBy, replicasReason (``ManagedByKVPlan``, ``OwnedByAutoscaler``, ``OwnedByFieldManager``,
  ``External``), podReplicas (the Deployment's replicas), helmRelease (the Helm release rendering the Deployment;
  absent when none), enginesPerPod and gpusPerPod (only with data parallelism: the Deployment's replicas count pods
  of enginesPerPod engines), maxNumActiveSeqs (only when written), capacity {source (engine | profile), tp, pp (the running layout), engineKvCapacityTokens,
  profileKvCapacityTokens, scale, engines, kvCacheUsage, preemptionsPerSecond, note, profileSource {gpu (catalogue |
  gpuSpec), model (catalogue | modelConfig | modelConfigRef), override (the spec.profiles entry or null); absent for
  a catalogue GPU and model with no override}, stepTimes {source (fitted | scaled | profile), windows, residual,
  t0Seconds, t1Seconds, prefillTokensPerSecond, scale, reason, message; :func:`step_times_body`}}}, ``classCounts`` {total,
  admitted, refused}, ``notes`` (the first :data:`STATUS_NOTES`), ``detail`` {configMaps, format, bytes, digest}:
  where the rest is (:mod:`kvplan_operator.targets.plandetail`: per class reservation, radius, routing, prefix fractions,
  samples, windows, arrival rate, source; every note; the whole diff; the kvcore plan the next solve starts from);
- ``objective``: {reservation, configuration, queueing, rejection, total} (cost units / s);
- ``diff``: changes against the previous plan: ``counts`` per kind and the :data:`TOP_CHANGES` largest of each
  kind ({layouts, replicas, reservations, admission, routing});
- ``summary``: {groups, classes, refused} for the printer columns;
- ``layoutChanges``: unix times of re-layouts attempted in the last hour (a mirror of the disruption budget the
  state ConfigMap keeps);
- ``calibration``: the plan in force's predictions against what the engines realised over the re-plan window
  (:mod:`kvplan_operator.decide.calibration`), a fixed-size summary {classes (compared), drifting, worstClass,
  worstQuantity, worstRatio, windowSeconds, tolerance, reason, message}; per class in the detail document
  (``calibration.classes.<c>``).

Per class nothing is in status: at 256 classes x 64 groups the per-class maps alone are about a megabyte.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping, Sequence
from typing import Any

from kvcore import Plan

from kvcore import CALIBRATION_FLOORS, summarise_calibration

from .. import conditions as C
from ..conditions import truncate
from ..decide.calibration import Calibration
from ..desired import ClassTarget, GroupTarget
from ..observe.history import ClassObservation
from ..observe.capacity import GroupCapacity


def iso(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str | None) -> float | None:
    if not text:
        return None
    return _dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.UTC).timestamp()


def _num(x: float, digits: int = 6) -> float | str | None:
    """JSON-safe number: rounded; inf as the string 'inf'; NaN as None."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return round(float(x), digits)


def workload_body(*, replica_reason: str, helm: str | None, target: GroupTarget | None) -> dict[str, Any]:
    """A group's Deployment as kvplan sees it: why its replicas are (not) kvplan's, its Helm release, and its pods
    (engines and GPUs per pod, and how many pods the plan's engines make)."""
    body: dict[str, Any] = {"replicasReason": replica_reason, "podReplicas": target.replicas if target else None}
    if helm is not None:  # absent, not null: at 64 groups every key costs status bytes
        body["helmRelease"] = helm
    if target is not None and target.dp_local > 1:
        body |= {"enginesPerPod": target.dp_local, "gpusPerPod": target.gpus_per_replica}
    return body


def capacity_body(cap: GroupCapacity | None) -> dict[str, Any] | None:
    """``status.plan.groups.<g>.capacity``: both numbers (engine and profile) and what the engines report."""
    if cap is None:
        return None
    return {"source": cap.source, "tp": cap.layout[0] if cap.layout else None,
            "pp": cap.layout[1] if cap.layout else None,
            "engineKvCapacityTokens": _num(cap.engine_kv_tokens, 0) if cap.engine_kv_tokens is not None else None,
            "profileKvCapacityTokens": _num(cap.profile_kv_tokens, 0) if cap.profile_kv_tokens is not None else None,
            "scale": _num(cap.scale, 4), "engines": cap.engines,
            "kvCacheUsage": _num(cap.usage, 4) if cap.usage is not None else None,
            "preemptionsPerSecond": _num(cap.preemptions_per_s, 6) if cap.preemptions_per_s is not None else None,
            "note": cap.note} | _profile_source(cap) | step_times_body(cap)


def step_times_body(cap: GroupCapacity) -> dict[str, Any]:
    """``stepTimes``: the step-time fit at the running layout {source (fitted | scaled | profile), windows,
    residual, t0Seconds, t1Seconds, prefillTokensPerSecond (the figures planned with), scale (scaled only), reason,
    message (profile only)}. Absent when the fit was not asked, or no engine window was usable (the StepTimes
    condition names those groups; at 64 groups every key costs status bytes)."""
    fit = cap.step_fit
    if fit is None or (not fit.ok and fit.windows == 0):
        return {}
    body: dict[str, Any] = {"source": fit.source or "profile", "windows": fit.windows}
    if fit.residual is not None:
        body["residual"] = _num(fit.residual, 4)
    if fit.law is not None:
        t0, t1 = fit.law.line()
        body |= {"t0Seconds": _num(t0, 6), "t1Seconds": _num(t1, 8),
                 "prefillTokensPerSecond": _num(fit.law.prefill_tokens_s(), 0)}
    if fit.scale is not None:
        body["scale"] = _num(fit.scale, 4)
    if not fit.ok:
        body |= {"reason": fit.reason, "message": fit.message}
    return {"stepTimes": body}


def step_times_condition(spec_from_engine: bool, capacity: Mapping[str, GroupCapacity]
                         ) -> tuple[bool, str, str] | None:
    """The StepTimes condition (status, reason, message) from each group's fit; None when the fit is off."""
    if not spec_from_engine:
        return None
    fits = {g: cap.step_fit for g, cap in capacity.items() if cap.step_fit is not None}
    if not fits:
        return None
    short = {g: f for g, f in fits.items() if not f.ok}
    if not short:
        return True, C.STEP_TIMES_FITTED, "step times fitted from the engines for " + ", ".join(
            f"{g} ({f.source}, {f.windows} windows, residual {f.residual:.1%})" for g, f in sorted(fits.items())
            if f.residual is not None)
    return False, C.STEP_TIMES_FROM_PROFILE, "; ".join(
        f"{g}: {f.reason} ({f.message})" for g, f in sorted(short.items())) + "; those groups keep their profile"


def _profile_source(cap: GroupCapacity) -> dict[str, Any]:
    """``profileSource``, absent (not null: at 64 groups every key costs status bytes) for the common case, a
    catalogue GPU and model with no override."""
    src = cap.profile_source
    if not src or src == {"gpu": "catalogue", "model": "catalogue", "override": None}:
        return {}
    return {"profileSource": dict(src)}


#: Notes kept in ``status.plan.notes`` (all of them are in the plan's detail document).
STATUS_NOTES = 20
#: Changes of each kind kept in ``status.diff``, the largest first (all of them are in the detail document).
TOP_CHANGES = 10


def class_entries(plan: Plan, *, observed: Mapping[str, ClassObservation] | None,
                  applied: Mapping[str, ClassTarget]) -> dict[str, Any]:
    """Per class, for the plan's detail document: routing and prefix fractions as published (after hysteresis),
    sparse (only non-zero groups)."""
    classes = {}
    for c in plan.classes:
        obs = observed.get(c.name) if observed else None
        routing = applied[c.name].routing if c.name in applied else c.routing
        prefix = applied[c.name].prefix_fraction if c.name in applied else c.prefix_fraction
        classes[c.name] = {
            "reserveTokens": int(round(c.reserve_tokens)),
            "admitted": bool(c.admitted),
            "radius": ({"eps": _num(c.radius.eps, 3), "rule": c.radius.rule, "reason": c.radius.reason}
                       if c.radius else None),
            "routing": {k: _num(v, 6) for k, v in sorted(routing.items()) if _num(v, 6)},
            "prefixCacheFraction": {k: _num(v, 6) for k, v in sorted(prefix.items()) if _num(v, 6)},
            "samples": _num(obs.requests, 1) if obs else None,
            "windows": obs.windows if obs else None,
            "arrivalRate": _num(obs.arrival_rate, 6) if obs else None,
            "source": obs.source if obs else None,
            "arrivalRateFrom": obs.rate_from if obs else None,
        }
    return classes


def plan_body(plan: Plan, *, targets: Mapping[str, GroupTarget], autoscalers: Mapping[str, str | None],
              decision: str, notes: Sequence[str], capacity: Mapping[str, GroupCapacity] | None = None,
              detail: str = "", workloads: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The ``status.plan`` subtree: per group in full, per class only counts (the rest is in the detail
    ConfigMaps named by ``detail``)."""
    groups = {}
    for g in plan.groups:
        t = targets.get(g.name)
        groups[g.name] = {
            "tp": g.tp, "pp": g.pp, "replicas": g.replicas, "gpusPerReplica": g.gpus_per_replica,
            "kvCapacityTokens": _num(g.kv_capacity_tokens, 0), "throughputTokensPerSecond": _num(g.throughput_tokens_s, 1),
            "utilisation": _num(g.utilisation, 4), "waitingSeconds": _num(g.waiting_seconds, 6),
            "arrivalRate": _num(g.arrival_rate, 4),
            "maxNumSeqs": t.max_num_seqs if t else None,
            "replicasManagedBy": autoscalers.get(g.name) or "kvplan",
            "capacity": capacity_body((capacity or {}).get(g.name)),
            **dict((workloads or {}).get(g.name) or {}),
        }
        if t is not None and t.max_num_active_seqs is not None:
            groups[g.name]["maxNumActiveSeqs"] = t.max_num_active_seqs
    admitted = sum(1 for c in plan.classes if c.admitted)
    shown = list(notes[:STATUS_NOTES])
    if len(notes) > STATUS_NOTES:
        shown.append(f"... and {len(notes) - STATUS_NOTES} more note(s) in ConfigMap {detail}")
    return {
        "status": plan.status.value, "reason": plan.reason, "rawStatus": plan.raw_status, "method": plan.method,
        "iterations": plan.iterations, "solveSeconds": _num(plan.solve_seconds, 4),
        "lowerBound": _num(plan.lower_bound) if plan.lower_bound is not None else None, "decision": decision,
        "groups": groups, "classCounts": {"total": len(plan.classes), "admitted": admitted,
                                          "refused": len(plan.classes) - admitted},
        "notes": shown,
    }


def calibration_body(cal: Calibration | None) -> dict[str, Any] | None:
    """``status.calibration``: fixed size whatever the number of classes (the 64 KiB fleet status bound)."""
    if cal is None:
        return None
    s = summarise_calibration(cal.verdicts)
    return {"classes": s.classes, "drifting": s.drifting, "worstClass": s.worst_class,
            "worstQuantity": s.worst_quantity,
            "worstRatio": _num(s.worst_ratio, 4) if s.worst_ratio is not None else None,
            "windowSeconds": _num(cal.window_s, 0), "tolerance": _num(cal.tolerance, 4), "reason": cal.reason,
            "message": truncate(cal.message, 256) if cal.message else ""}


def calibration_detail(cal: Calibration | None) -> dict[str, Any] | None:
    """The detail document's ``calibration``: per class and quantity predicted, realised, floored ratio, drift and
    reason; per class the overflow threshold t (tokens); per group the engines' mean KV-cache usage."""
    if cal is None:
        return None

    def one(v: Any) -> dict[str, Any]:
        return {"predicted": _num(v.predicted, 6) if v.predicted is not None else None,
                "realised": _num(v.realised, 6) if v.realised is not None else None,
                "ratio": _num(v.ratio, 4) if v.ratio is not None else None, "drifting": v.drifting,
                "reason": v.reason}

    classes = {}
    for name, per in sorted(cal.verdicts.items()):
        body: dict[str, Any] = {q: one(v) for q, v in per.items()}
        if name in cal.thresholds:
            body["thresholdTokens"] = _num(cal.thresholds[name], 0)
        classes[name] = body
    return {"windowSeconds": _num(cal.window_s, 0), "tolerance": cal.tolerance, "floors": dict(CALIBRATION_FLOORS),
            "work": cal.work, "reason": cal.reason, "message": cal.message, "classes": classes,
            "groups": {g: {"kvCacheUsage": _num(u, 4) if u is not None else None}
                       for g, u in sorted(cal.kv_usage.items())}}


def objective_body(plan: Plan) -> dict[str, Any] | None:
    o = plan.objective
    if o is None:
        return None
    return {"reservation": _num(o.reservation), "configuration": _num(o.configuration), "queueing": _num(o.queueing),
            "rejection": _num(o.rejection), "total": _num(o.total)}


DIFF_KINDS = ("layouts", "replicas", "reservations", "admission", "routing")


def diff_full(plan: Plan) -> dict[str, Any] | None:
    """Every change against the previous plan (the detail document)."""
    if plan.diff is None:
        return None
    return {k: list(getattr(plan.diff, k)) for k in DIFF_KINDS}


def _magnitude(line: str) -> float:
    """How much a kvcore diff line (``name: a -> b``) moved; a change that is not numeric (``new -> admitted``,
    ``admitted -> refused``, a layout) ranks first."""
    _, _, change = line.rpartition(": ")
    before, _, after = change.partition(" -> ")
    try:
        return abs(float(after) - float(before))
    except ValueError:
        return float("inf")


def diff_body(plan: Plan, top: int = TOP_CHANGES) -> dict[str, Any] | None:
    """``status.diff``: per kind of change, how many, and the ``top`` largest (kvcore's lines, largest first)."""
    full = diff_full(plan)
    if full is None:
        return None
    out: dict[str, Any] = {"counts": {k: len(v) for k, v in full.items()}}
    for kind, lines in full.items():
        ranked = sorted(range(len(lines)), key=lambda i: (-_magnitude(lines[i]), i))
        out[kind] = [lines[i] for i in ranked[:top]]
    return out


def merge_patch(old: Any, new: Any) -> Any:
    """RFC 7386 patch turning ``old`` into ``new`` (dict keys only in ``old`` become None); None if equal."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        out: dict[str, Any] = {}
        for k in set(old) | set(new):
            if k not in new:
                out[k] = None
            elif k not in old:
                out[k] = new[k]
            else:
                sub = merge_patch(old[k], new[k])
                if sub is not _SAME:
                    out[k] = sub
        return out if out else _SAME
    return _SAME if old == new else new


class _Same:
    def __repr__(self) -> str:
        return "SAME"


_SAME: Any = _Same()


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any], *, owned: Sequence[str]) -> dict[str, Any] | None:
    """Merge patch for the ``owned`` top-level status keys only (kopf keeps its own keys); None when unchanged."""
    o = {k: old[k] for k in owned if k in old}
    n = {k: new[k] for k in owned if k in new and new[k] is not None}
    p = merge_patch(o, n)
    return None if p is _SAME else p
