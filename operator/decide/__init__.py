"""Phase 2, decide (pure): the kvcore plan, hold vs free, and the disruption budget.

1. ``free`` = ``planner(instance, previous=last good plan)`` over every allowed layout (the last good plan is read
   from the plan's detail ConfigMaps by observe; the planner warm-starts from it and diffs against it). kvcore's refusals come back
   as ``InvalidSpec`` naming the CR's field (``spec.groups[0].nodePool.gpuType``, :func:`translate.cr_path`);
   an infeasible plan is ``Infeasible``, a solver error (or any exception from the planner) ``PlannerError``.
2. If ``free`` moves the layout of a group kvplan already manages, ``hold`` = the same solve with each such group
   pinned to its current layout, but only when that layout is still one the spec allows (a layout the spec no
   longer lists is never held).
3. :func:`kvplan_operator.decide.policy.decide` picks between them with the budget: the re-layouts *attempted* in the last
   hour, read from the state ConfigMap (so failures and restarts do not reset it). Only the continuation of the
   *newest* attempt of the hour (same target layouts; e.g. after the operator died between two Deployment patches)
   is not counted again (:func:`kvplan_operator.decide.policy.resumes`); returning to an older attempt's target is a new
   re-layout. A spec change skips ``minImprovement`` once per generation (not once the Deployments carry that
   generation, nor once its re-layout was attempted: the state ConfigMap remembers which generation did), never
   the hourly budget. When the current layouts cannot be kept and the budget is spent, nothing is applied
   (``Infeasible``, the last good plan stays in force).
4. kvcore's engine-model rules on the chosen plan, within the cycle's work budget (:mod:`.engine_rules`); the
   engine knobs of each group (:mod:`kvplan_operator.decide.knobs`), with the same disruption budget for a knob
   change that restarts pods; and, per group running kvplan's plugin, the reservations it gates admission with
   (:mod:`kvplan_operator.decide.gate`: the reservations that pay on that group).
5. Plan calibration (:mod:`.calibration`): the plan in force's predicted overflow share and preemptions per request
   per class against what the engines realised over the re-plan window; never fails the plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import ValidationError

from kvcore import InputError
from kvcore import Instance, input_error
from kvcore import Plan

from .. import conditions as C
from ..desired import LayoutChange, layouts_key
from .knobs import KnobDecision, class_priorities, decide_knobs, engine_version, running_knobs
from .calibration import Calibration, calibrate
from .rules import KNOBS, RuleAnswers, RuleRun, run_rules
from .gate import GateDecision, gate_reservations
from ..observe import Observation
from .policy import (OK_STATUSES, BudgetSpent, Decision, decide as choose, layout_moves, layouts_of, recent_changes,
                     resumes, target_layouts)
from ..run import Deps, Failure, RunContext
from ..spec import KVPlanSpec
from .translate import build_instance, cr_path


@dataclass(frozen=True)
class Decided:
    """The plan to apply and why. ``current``: adopted groups' layouts; ``pinned``: those the hold plan may keep."""

    plan: Plan
    decision: Decision
    current: Mapping[str, tuple[int, int]]
    pinned: Mapping[str, tuple[int, int]]
    spec_changed: bool
    #: re-layouts in the last hour (the budget), and whether this one resumes a counted attempt.
    changes: tuple[LayoutChange, ...]
    resumed: bool
    solve_seconds: float
    #: each group's engine knobs and the class priorities (:mod:`kvplan_operator.decide.knobs`).
    knobs: KnobDecision = KnobDecision()
    #: per plugin group, the reservation file (:mod:`kvplan_operator.decide.gate`).
    gate: GateDecision = GateDecision()
    #: what the engine-model rules answered, spent and left pending this cycle (:mod:`.engine_rules`).
    rules: RuleAnswers = RuleAnswers()
    #: the plan in force's predictions against what the engines realised (:mod:`.calibration`); None: not run.
    calibration: Calibration | None = None


def _refusal(exc: Exception, spec: KVPlanSpec) -> Failure:
    """kvcore's refusal -> InvalidSpec with the CR's field path."""
    if isinstance(exc, ValidationError):
        exc = input_error(exc)
    assert isinstance(exc, InputError)
    return Failure("decide", C.INVALID_SPEC, f"{cr_path(exc.field, spec)}: {exc.message}"
                   + (f" ({exc.hint})" if exc.hint else ""), temporary=False)


def _solve(deps: Deps, obs: Observation, previous: Plan | None,
           layouts: Mapping[str, tuple[int, int]] | None = None) -> Plan | Failure:
    try:
        return deps.planner(build_instance(obs.spec, obs.classes, layouts=layouts, capacity=obs.capacity),
                            previous=previous)
    except (InputError, ValidationError) as exc:
        return _refusal(exc, obs.spec)
    except Exception as exc:  # a planner bug must not escape the reconcile; the type is enough to find it
        return Failure("decide", C.PLANNER_ERROR, f"planner raised {type(exc).__name__}; nothing applied",
                       temporary=False)


def decide(run: RunContext, obs: Observation, deps: Deps) -> Decided | Failure:
    """Phase 2 (see the module docstring)."""
    spec = obs.spec
    previous = obs.previous_plan()  # the last plan applied in full: warm start and diff
    free = _solve(deps, obs, previous)
    if isinstance(free, Failure):
        return free
    solve_s = free.solve_seconds
    if free.status not in OK_STATUSES:
        reason = C.INFEASIBLE if free.status.value == "infeasible" else C.PLANNER_ERROR
        return Failure("decide", reason, f"planner {free.status.value}: {free.reason}; nothing applied",
                       temporary=False, details={"planner": {"status": free.status.value, "reason": free.reason,
                                                             "rawStatus": free.raw_status}})
    allowed = {g.name: {(lay.tp, lay.pp) for lay in g.layouts} for g in spec.groups}
    current = {k: s.layout for k, s in obs.groups.items() if s.adopted and s.layout is not None}
    pinned = {k: v for k, v in current.items() if v in allowed.get(k, set())}
    changes = tuple(recent_changes_of(obs.layout_changes, run.now))
    # A new generation may re-lay-out once: not again once its layouts reached the Deployments (a failure later in
    # that apply must not turn every retry into a "spec change") or once its re-layout was attempted.
    written = [s.generation == str(run.generation) for s in obs.groups.values() if s.body is not None]
    spec_changed = (run.old_status.get("plannedGeneration") != run.generation
                    and obs.relayout_generation != run.generation and not (written and all(written)))
    seen = {k: s.layout for k, s in obs.groups.items() if s.layout is not None}
    target = layouts_key(target_layouts(free, seen))
    resumed = resumes([c.layouts for c in changes], target)
    hold: Plan | None = None
    if layout_moves(free, pinned) and not resumed:
        held = _solve(deps, obs, previous, layouts=pinned)
        if isinstance(held, Failure):
            return held
        hold = held
        solve_s += hold.solve_seconds
    try:
        decision = choose(free, hold, current=pinned, min_improvement=spec.replan.min_improvement,
                          changes_last_hour=len(changes), max_per_hour=spec.replan.max_layout_changes_per_hour,
                          spec_changed=spec_changed, resuming=resumed)
    except BudgetSpent as exc:
        return Failure("decide", C.INFEASIBLE, str(exc), temporary=False)
    unheld = sorted(k for k, v in current.items() if k not in pinned and layouts_of(decision.plan).get(k) != v)
    if unheld:
        decision = Decision(decision.plan, True, decision.reason + "; layout of " + ", ".join(unheld)
                            + " is not in the spec's allowed layouts (re-laid out)")
    instance = build_instance(obs.spec, obs.classes, capacity=obs.capacity)
    rules = engine_rules(run, deps, obs, decision.plan, instance)
    knobs = engine_knobs(obs, decision.plan, instance, rules, current=current, spec_changed=spec_changed,
                         changes=changes)
    state = obs.objects.get("state-configmap", {}).get(run.state_configmap)
    gate = gate_reservations(spec, decision.plan, rules, knobs, state, pending_note=pending_note(rules))
    return Decided(decision.plan, decision, current, pinned, spec_changed, changes, resumed, solve_s, knobs, gate,
                   rules, calibrate(obs, instance))


def pending_note(rules: RuleAnswers) -> str:
    return (f"this re-plan's work budget of {rules.budget:,} simulated requests was spent ({rules.work:,}); the "
            "groups keep what is in force until a later re-plan")


def engine_rules(run: RunContext, deps: Deps, obs: Observation, plan: Plan, instance: Instance) -> RuleAnswers:
    """Step 4a: kvcore's knob and reservation rules for the groups that need an answer, within the work budget."""
    from kvcore import knobs_for_plan
    from kvcore import reserves_for_plan

    spec = obs.spec
    bodies = {k: s.body for k, s in obs.groups.items()}
    running = {g.name: running_knobs(bodies.get(g.name), g.container) for g in spec.groups}
    versions = {g.name: engine_version(g, bodies.get(g.name)) for g in spec.groups}
    rr = RuleRun(deps.knobs or knobs_for_plan, deps.reserves or reserves_for_plan, deps.knob_cache, run.owner,
                 run.generation, run.now, deps.rule_work)
    return run_rules(spec, plan, instance, rr, running=running, versions=versions,
                     priorities=class_priorities(instance))


def engine_knobs(obs: Observation, plan: Plan, instance: Instance, rules: RuleAnswers, *,
                 current: Mapping[str, tuple[int, int]], spec_changed: bool,
                 changes: tuple[LayoutChange, ...]) -> KnobDecision:
    """Step 4b: the groups' engine knobs for ``plan``, under the disruption budget left after its re-layouts."""
    seen = {k: s.layout for k, s in obs.groups.items() if s.layout is not None}
    layouts = target_layouts(plan, seen)
    return decide_knobs(obs.spec, instance, rules.answers.get(KNOBS, {}),
                        bodies={k: s.body for k, s in obs.groups.items()},
                        adopted=[k for k, s in obs.groups.items() if s.adopted],
                        relaid=[k for k, v in current.items() if layouts.get(k) != v], layouts=layouts,
                        spec_changed=spec_changed, recorded=[c.layouts for c in changes],
                        max_per_hour=obs.spec.replan.max_layout_changes_per_hour,
                        failed=rules.failed.get(KNOBS, {}), pending=rules.pending.get(KNOBS, ()),
                        pending_note=pending_note(rules))


def recent_changes_of(changes: tuple[LayoutChange, ...], now: float) -> list[LayoutChange]:
    """The attempts of the last hour."""
    keep = set(recent_changes([c.t for c in changes], now))
    return [c for c in changes if c.t in keep]
