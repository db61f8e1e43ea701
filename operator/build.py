"""Phase 3, build (pure): the decision -> one :class:`~kvplan_operator.desired.Desired` state, then each target's
writes for it.

- per group: layout and replicas from the plan (an idle group keeps its layout with 0 replicas) and the engine
  knobs decided in phase 2 (:mod:`kvplan_operator.decide.knobs`); with ``engine.knobs: Formula``,
  ``--max-num-seqs = floor(M(z) / mean reserved tokens per request routed there)``, which only rides along with a
  rollout that happens anyway (a layout change, a spec change or first adoption), never triggers one;
- per group running kvplan's vLLM plugin, its reservation file (:func:`reservation_document`: the reservations
  that pay on that group, :mod:`kvplan_operator.decide.gate`), written into the state ConfigMap, and the class
  priorities;
- per class: reservation, admission, routing and prefix fractions, with routing hysteresis
  (``router.minWeightChange``: the published weights stay unless one moves that much or admission changes);
- the write order's inputs: the groups whose Deployment changes TP/PP or scales to 0 (``draining``) and the
  routing to publish while they do (each class's planned weights over the other groups, renormalised; else its
  published ones over them; a class with nowhere else to go gets no interim routing: its routing stays as it is
  until the final step);
- the disruption budget: a re-layout of a Deployment kvplan already manages, or a knob change that restarts one,
  is recorded (time, target layouts or knobs) in the state ConfigMap, which is written before any Deployment; the
  continuation of the newest attempt (after a failure or a kill) re-stamps that record with this apply's time
  instead of adding one, so every write of a re-layout lies inside the hour it is counted in (issue 26).

``DryRun`` builds the desired state (status reports it) but no writes. A target that cannot express the desired
state (missing Deployment, another KVPlan's Deployment, one another controller owns, a shell string it cannot edit,
an InferencePool that is not the group's) stops the phase with that target's reason; nothing is applied.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kvcore import Plan

from . import conditions as C
from .decide import Decided
from .desired import ClassTarget, Desired, GroupTarget, LayoutChange, Write, layouts_key, plan_id
from .observe import Observation
from .targets.class_rules import classification_document
from .decide.policy import target_layouts
from .decide.pods import pods, pods_note
from .run import Failure, RunContext
from .spec import KVPlanSpec, RequestClass, history_key
from .targets import BuildInput, Target, TargetRefused, all_targets
from .targets.deployment import find_container, flags_layout
from .targets.ownership import own_conflict
from .targets.workload_owner import controller_ref
from .targets.vllm_flags import PP_FLAG, TP_FLAG, read_flags
from .decide.translate import capacity_overrides, horizon_ratio, radius_policy, step_overrides

#: Refusals a later reconcile may see resolved on its own (the object appears, the other KVPlan goes away).
TEMPORARY = (C.DEPLOYMENT_MISSING, C.CONTAINER_NOT_FOUND, C.OWNED_BY_OTHER, C.OWNED_BY_CONTROLLER,
             C.ROUTER_TARGET_INVALID, C.WORKLOAD_MISSING)


@dataclass(frozen=True)
class Built:
    """The desired state, the writes (any order; apply sorts them by stage), the targets that write them, and
    notes for ``status.plan.notes``."""

    desired: Desired
    writes: tuple[Write, ...]
    targets: tuple[Target, ...]
    notes: tuple[str, ...]


def max_num_seqs(kv_capacity_tokens: float, classes: Sequence[RequestClass], targets: Mapping[str, ClassTarget],
                 rates: Mapping[str, float], group: str) -> int | None:
    """``floor(M / mean reserved tokens per request routed to group)``; None when no traffic goes there."""
    num = den = 0.0
    for c in classes:
        t = targets[c.name]
        share = rates.get(c.name, 0.0) * t.admitted * t.routing.get(group, 0.0)
        if share <= 0:
            continue
        tokens = c.input_tokens - t.prefix_fraction.get(group, 0.0) * c.prefix_tokens + t.reserve_tokens
        num += share * max(tokens, 1.0)
        den += share
    if den <= 0:
        return None
    return max(1, math.floor(kv_capacity_tokens / (num / den)))


def plan_targets(spec: KVPlanSpec, plan: Plan, rates: Mapping[str, float], current: Mapping[str, tuple[int, int]]
                 ) -> tuple[dict[str, GroupTarget], dict[str, ClassTarget]]:
    """Plan -> per-group and per-class targets (``--max-num-seqs`` from :func:`max_num_seqs`)."""
    ctargets = {cp.name: ClassTarget(name=cp.name, reserve_tokens=int(round(cp.reserve_tokens)),
                                     admitted=1.0 if cp.admitted else 0.0, routing=dict(cp.routing),
                                     prefix_fraction=dict(cp.prefix_fraction)) for cp in plan.classes}
    layouts = target_layouts(plan, current)
    gtargets = {}
    for gp in plan.groups:
        tp, pp = layouts[gp.name]
        if gp.tp <= 0:
            gtargets[gp.name] = GroupTarget(name=gp.name, tp=tp, pp=pp, replicas=0, max_num_seqs=None)
            continue
        seqs = max_num_seqs(gp.kv_capacity_tokens, spec.classes, ctargets, rates, gp.name)
        gtargets[gp.name] = GroupTarget(name=gp.name, tp=tp, pp=pp, replicas=gp.replicas, max_num_seqs=seqs)
    return gtargets, ctargets


def hold_small_moves(new: Mapping[str, ClassTarget], previous: Mapping[str, Mapping[str, Any]],
                     min_change: float) -> dict[str, ClassTarget]:
    """Routing hysteresis: keep a class's previous weights and prefix fractions when admission is unchanged and no
    value moved by ``min_change`` or more (re-plans on fresh data wobble by far less than that). ``previous`` maps
    are sparse (a group not listed had 0); one naming a group the plan does not have is not kept."""
    out = dict(new)
    for name, t in new.items():
        prev = previous.get(name)
        if not prev or bool(prev.get("admitted")) != (t.admitted > 0):
            continue
        pr, pf = prev.get("routing") or {}, prev.get("prefixCacheFraction") or {}
        if not set(pr) <= set(t.routing) or not set(pf) <= set(t.routing) | set(t.prefix_fraction):
            continue
        moved = [abs(float(pr.get(g) or 0) - w) for g, w in t.routing.items()]
        moved += [abs(float(pf.get(g) or 0) - f) for g, f in t.prefix_fraction.items()]
        if max(moved, default=0.0) < min_change:
            out[name] = ClassTarget(t.name, t.reserve_tokens, t.admitted,
                                    {g: float(pr.get(g) or 0) for g in t.routing},
                                    {g: float(pf.get(g) or 0) for g in t.prefix_fraction})
    return out


def interim_routing(spec: KVPlanSpec, classes: Mapping[str, ClassTarget], draining: frozenset[str],
                    published: Mapping[str, Mapping[str, Any]]) -> dict[str, ClassTarget]:
    """Each class's routing while ``draining`` groups change (see the module docstring)."""
    stable = [g.name for g in spec.groups if g.name not in draining]
    out = {}
    for name, t in classes.items():
        weights = {g: float(t.routing.get(g, 0.0)) for g in stable}
        if sum(weights.values()) <= 0:
            old = (published.get(name) or {}).get("routing") or {}
            weights = {g: float(old.get(g) or 0.0) for g in stable}
        total = sum(weights.values())
        routing = ({g: weights[g] / total for g in stable} | {g: 0.0 for g in draining}) if total > 0 else {}
        out[name] = ClassTarget(name, t.reserve_tokens, t.admitted, routing, dict(t.prefix_fraction))
    return out


def desired_state(run: RunContext, obs: Observation, dec: Decided) -> Desired:
    """The decision as one desired state (see the module docstring)."""
    spec = obs.spec
    rates = {c: o.arrival_rate for c, o in obs.classes.items()}
    seen = {k: s.layout for k, s in obs.groups.items() if s.layout is not None}
    gt, ct = plan_targets(spec, dec.plan, rates, seen)
    published = obs.published()
    ct = hold_small_moves(ct, published, spec.router.min_weight_change)
    for g in spec.groups:  # Formula: --max-num-seqs rides along with a rollout, never triggers one on its own
        t, s = gt[g.name], obs.groups[g.name]
        applied_gen = ((s.body or {}).get("metadata", {}).get("annotations") or {}).get("kvplan.io/generation")
        same_spec = applied_gen is not None and applied_gen == str(run.generation)
        if g.engine.knobs == "Formula" and s.layout == t.layout and s.adopted and same_spec \
                and s.max_num_seqs is not None:
            gt[g.name] = GroupTarget(t.name, t.tp, t.pp, t.replicas, s.max_num_seqs)
        k = dec.knobs.groups.get(g.name)
        if k is not None and g.engine.knobs == "Auto":
            gt[g.name] = replace(gt[g.name], max_num_seqs=k.target.max_num_seqs,
                                 max_num_active_seqs=k.target.max_num_active_seqs, watermark=k.target.watermark,
                                 scheduling_policy=k.target.scheduling_policy)
        if k is not None:
            gt[g.name] = replace(gt[g.name], scheduler_cls=k.target.scheduler_cls,
                                 classification_file=k.target.labels)
        dp = obs.groups[g.name].dp_local or 1
        if dp > 1:  # the plan counts engines; a pod runs dp of them (decide/pods.py)
            t = gt[g.name]
            gt[g.name] = replace(t, dp_local=dp, replicas=pods(t.replicas, dp, t.tp * t.pp, g.node_pool.gpu_count))
    draining = frozenset(
        g.name for g in spec.groups if obs.groups[g.name].body is not None and (
            obs.groups[g.name].layout != gt[g.name].layout
            or (gt[g.name].replicas == 0 and (obs.groups[g.name].replicas or 0) > 0)))
    current = {k: (*s.layout, s.replicas if s.replicas is not None else 0) for k, s in obs.groups.items()
               if s.layout is not None and k not in draining}
    relayout = any(s.adopted and s.layout != gt[k].layout for k, s in obs.groups.items()) \
        or restores_layout(spec, obs, gt)
    changes = obs.layout_changes
    relayout_gen = obs.relayout_generation
    if relayout and spec.mode == "Apply":
        changes = (*(dec.changes[:-1] if dec.resumed else dec.changes),
                   LayoutChange(round(run.now, 3), layouts_key({k: t.layout for k, t in gt.items()})))
        if dec.spec_changed:
            relayout_gen = run.generation
    elif dec.knobs.record is not None and spec.mode == "Apply":  # a knob change restarts pods: counted the same
        changes = (*dec.changes, LayoutChange(round(run.now, 3), dec.knobs.record))
        if dec.spec_changed:
            relayout_gen = run.generation
    elif dec.knobs.resumed and dec.changes and spec.mode == "Apply":
        changes = (*dec.changes[:-1], LayoutChange(round(run.now, 3), dec.changes[-1].layouts))
    pid = plan_id(gt, ct)
    return Desired(plan_id=pid, groups=gt, classes=ct, rates=rates,
                   manage_replicas={g.name: obs.groups[g.name].autoscaler is None for g in spec.groups},
                   draining=draining,
                   interim_classes=interim_routing(spec, ct, draining, published) if draining else None,
                   current=current, layout_changes=tuple(changes), relayout_generation=relayout_gen,
                   relayout=relayout, class_priority=dict(dec.knobs.class_priority),
                   reservation_files={g: reservation_document(run, spec, pid, dec, g) for g in file_groups(dec)})


def file_groups(dec: Decided) -> list[str]:
    """The groups whose pods read a reservation file: kvplan's scheduler's (the gate's), and those mounting it
    only for the stat logger's class labels (nothing reserved)."""
    labels = [g for g, k in dec.knobs.groups.items() if k.target.labels and g not in dec.gate.groups]
    return [*dec.gate.groups, *sorted(labels)]


def restores_layout(spec: KVPlanSpec, obs: Observation, gt: Mapping[str, GroupTarget]) -> bool:
    """Whether a managed Deployment's flags (what vLLM runs) give another layout than its target although kvplan's
    annotation names the target: someone edited the flags, and kvplan's rewrite restarts the pods. Every re-layout
    that is written counts, whatever the reason (issue 26), so this one is recorded like any other (it is not held:
    status would claim a layout that does not run)."""
    for g in spec.groups:
        s = obs.groups[g.name]
        if not s.adopted or s.body is None or s.layout != gt[g.name].layout:
            continue
        flags = read_flags(find_container(s.body, g.container) or {})
        if all(v is None or v.isdigit() for v in (flags[TP_FLAG], flags[PP_FLAG])) \
                and flags_layout(s.body, g.container) != gt[g.name].layout:
            return True
    return False


def reservation_document(run: RunContext, spec: KVPlanSpec, pid: str, dec: Decided, group: str) -> str:
    """Group ``group``'s ``kvplan.reservations.v1`` document (:mod:`kvcore.reservation_file`): its reservations
    (:mod:`kvplan_operator.decide.gate`), the fleet default class (``fleetDefault``, else the first class), the class
    priorities, the priority of requests of no class (one past the largest class priority), the classes' ``match``
    rules (``classify``, :mod:`kvplan_operator.targets.class_rules`) and their prompt-length rules, smallest
    ``maxPromptTokens`` first.

    Only the classes that matter on this group are listed: those the plan routes there, those reserving something
    there, the default and the classes of prompt-length rules (a request of any other class is not planned here; the
    plugin gives it the default class's reservation). So a file's size follows the classes routed to its group, not
    the spec's: listing all of 256 classes in each of 64 groups' files would take about 1.3 MiB of the state
    ConfigMap, over a ConfigMap's 1 MiB."""
    gate = dec.gate.groups.get(group)
    reserve = gate.reserve if gate is not None else {}  # a classification file only: nothing reserved
    routed = {c.name for c in dec.plan.classes if c.admitted and c.routing.get(group, 0.0) > 0}
    return classification_document(spec, owner=run.owner, plan=pid, reserve=reserve, routed=routed,
                                   priorities=dec.knobs.class_priority)


def notes_for(obs: Observation, dec: Decided, desired: Desired) -> list[str]:
    spec = obs.spec
    notes = [dec.decision.reason]
    for c in spec.classes:
        note = radius_policy(c.robustness or spec.robustness, horizon=horizon_ratio(spec)).note
        if note:
            notes.append(f"class {c.name}: {note}")
    engines = {gp.name: gp.replicas for gp in dec.plan.groups}
    for g in spec.groups:
        s, t = obs.groups[g.name], desired.groups[g.name]
        if s.autoscaler:
            notes.append(f"group {g.name}: replicas left to {s.autoscaler} (planned {t.replicas})")
        ref = controller_ref(s.body)
        if ref is not None and spec.mode == "DryRun":  # Apply refuses it (OwnedByController); DryRun only tells
            notes.append(f"group {g.name}: Deployment {g.deployment} is controlled by {ref.describe()}; in mode Apply "
                         "kvplan would refuse to write it (OwnedByController)")
        if s.helm_release:
            notes.append(f"group {g.name}: Deployment {g.deployment} is rendered by Helm release {s.helm_release}; "
                         "a helm upgrade restores the chart's values of the fields kvplan writes (docs/upgrade.md, "
                         "\"Helm and GitOps\")")
        note = pods_note(g.name, engines.get(g.name, 0), t.dp_local, t.replicas) if t.replicas else None
        if note:
            notes.append(note)
    notes += source_notes(obs)
    return notes


def source_notes(obs: Observation) -> list[str]:
    """Where the inputs came from, when it matters: classes sharing one stock vLLM histogram, engine capacity that
    could not be used or looks off, an unverified TLS connection."""
    spec = obs.spec
    notes: list[str] = []
    shared: dict[tuple[str, str], list[str]] = {}
    for i, c in enumerate(spec.classes):
        shared.setdefault(history_key(spec, i), []).append(c.name)
    for (source, key), names in shared.items():
        if len(names) > 1:
            notes.append(f"classes {', '.join(names)} share one {source} history ({key.partition(':')[2] or key}): "
                         "the mix of their traffic, not each one's")
    for g in spec.groups:
        cap = obs.capacity.get(g.name)
        if cap is not None and cap.note and spec.capacity.from_engine:
            notes.append(f"group {g.name} capacity: {cap.note}")
    notes += capacity_overrides(spec, obs.capacity)[1]
    notes += step_overrides(spec, obs.capacity)[1]
    if spec.prometheus.tls is not None and spec.prometheus.tls.insecure_skip_verify:
        notes.append("Prometheus TLS certificate not verified (spec.prometheus.tls.insecureSkipVerify)")
    return notes


def build(run: RunContext, obs: Observation, dec: Decided) -> Built | Failure:
    """Phase 3 (see the module docstring)."""
    desired = desired_state(run, obs, dec)
    notes = notes_for(obs, dec, desired)
    targets = all_targets()
    foreign = [m for name, body in sorted(obs.detail.chunks.items())
               if (m := own_conflict("plan detail", name, body, owner=run.owner, namespace=run.namespace,
                                     owners_alive=obs.owners_alive))]
    if foreign:  # the record phase writes them, in DryRun too: refused before anything is applied (issue 26)
        return Failure("build", C.OWNED_BY_OTHER, "; ".join(foreign) + "; nothing applied", temporary=True,
                       details={"planId": desired.plan_id})
    if obs.spec.mode == "DryRun":
        return Built(desired, (), targets, tuple(notes))
    inp = BuildInput(run=run, spec=obs.spec, desired=desired, observed=obs.objects, owners_alive=obs.owners_alive)
    writes: list[Write] = []
    for target in targets:
        try:
            planned = target.build(inp)
        except TargetRefused as exc:
            return Failure("build", exc.reason, f"{exc}; nothing applied", temporary=exc.reason in TEMPORARY,
                           details={"planId": desired.plan_id})
        writes += planned.writes
        notes += planned.notes
    return Built(desired, tuple(writes), targets, tuple(notes))
