"""Phase 2 input: validated spec + snapshot -> kvcore ``Instance``; and kvcore ``Plan`` -> builder targets.

The only module that knows both the CR's vocabulary and kvcore's. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvcore.instance import ClassSpec, CostSpec, GroupSpec, Instance, Layout as KLayout
from kvcore.planmodel import Plan
from kvcore.profiles import ProfileOverride
from kvcore.radius import RadiusPolicy, with_horizon
from kvcore.slo import SloSpec

from .builders import ClassTarget, GroupTarget, max_num_seqs
from .snapshot import Snapshot
from .spec import KVPlanSpec, Robustness


@dataclass(frozen=True)
class RadiusTranslation:
    policy: RadiusPolicy
    note: str | None


def horizon_ratio(spec: KVPlanSpec) -> float:
    """How long a plan is in force over the span of history it is fitted on: ``replan.interval / lookback``."""
    return spec.replan.interval_seconds / spec.prometheus.lookback_seconds


def radius_policy(rob: Robustness, *, horizon: float) -> RadiusTranslation:
    """CR robustness -> kvcore ``RadiusPolicy``; a kind this kvcore lacks falls back to its default, with a note.

    ``horizon`` is :func:`horizon_ratio` of the spec; the drift rule (and the default it falls back to) gets it."""
    fields = RadiusPolicy.model_fields
    fallback = with_horizon(None, horizon)
    kwargs: dict[str, Any] = {"kind": rob.policy}
    for ours, theirs in (("eps", "eps"), ("frac", "frac"), ("floor_scale", "floor_scale"), ("drift_z", "drift_z")):
        value = getattr(rob, ours)
        if value is not None:
            if theirs not in fields:
                return RadiusTranslation(fallback, f"radius parameter {ours!r} unsupported by kvcore; project default "
                                         "used")
            kwargs[theirs] = value
    try:
        return RadiusTranslation(with_horizon(RadiusPolicy(**kwargs), horizon), None)
    except ValueError:
        return RadiusTranslation(fallback, f"radius policy {rob.policy!r} unsupported by this kvcore; project default "
                                 "used")


def build_instance(spec: KVPlanSpec, snapshot: Snapshot, *,
                   layouts: Mapping[str, tuple[int, int]] | None = None) -> Instance:
    """The planning problem. ``layouts`` pins groups to one (tp, pp) (the "hold" plan of the disruption policy).

    Classes must all have a history (the caller checks samples first). Raises kvcore ``InputError`` or pydantic
    ``ValidationError`` on what kvcore refuses.
    """
    classes = []
    horizon = horizon_ratio(spec)
    for c in spec.classes:
        obs = snapshot.classes[c.name]
        assert obs.history is not None, f"class {c.name} has no history"
        rob = c.robustness or spec.robustness
        kw: dict[str, Any] = {}
        if c.costs is not None:
            kw.update(cp=c.costs.preemption, cw=c.costs.waste)
        else:
            assert c.slo is not None
            kw.update(slo=SloSpec(mu=c.slo.mu, sigma=c.slo.sigma, lam=c.slo.lambda_))
        classes.append(ClassSpec(
            name=c.name, arrival_rate=obs.arrival_rate, input_tokens=c.input_tokens, lmax=c.max_output_tokens,
            prefix_tokens=c.prefix_tokens, history=obs.history, radius=radius_policy(rob, horizon=horizon).policy,
            **kw))
    groups = []
    for g in spec.groups:
        allowed: list[Any] = [(lay.tp, lay.pp) for lay in g.layouts]  # validated by GroupSpec
        if layouts is not None and g.name in layouts:
            allowed = [layouts[g.name]]
        groups.append(GroupSpec(name=g.name, gpu_type=g.node_pool.gpu_type, gpus=g.node_pool.gpu_count,
                                gpus_per_node=g.node_pool.gpus_per_node, model=g.model,
                                layouts=tuple(KLayout(tp=tp, pp=pp) for tp, pp in allowed)))
    profiles = tuple(ProfileOverride(gpu_type=p.gpu_type, model=p.model, tp=p.tp, pp=p.pp,
                                     kv_capacity_tokens=p.kv_capacity_tokens,
                                     throughput_tokens_s=p.throughput_tokens_per_second) for p in spec.profiles)
    costs = CostSpec(kappa=spec.costs.kappa, c_slo=spec.costs.c_slo, c_rej=spec.costs.c_rej)
    return Instance(classes=tuple(classes), groups=tuple(groups), costs=costs, profiles=profiles)


def targets(spec: KVPlanSpec, plan: Plan, rates: Mapping[str, float],
            current: Mapping[str, tuple[int, int]]) -> tuple[dict[str, GroupTarget], dict[str, ClassTarget]]:
    """Plan -> builder targets, with ``--max-num-seqs`` per group (see builders.max_num_seqs).

    A group the plan leaves idle (tp = 0) keeps its ``current`` layout with 0 replicas.
    """
    ctargets = {
        cp.name: ClassTarget(name=cp.name, reserve_tokens=int(round(cp.reserve_tokens)),
                             admitted=1.0 if cp.admitted else 0.0, routing=dict(cp.routing),
                             prefix_fraction=dict(cp.prefix_fraction))
        for cp in plan.classes
    }
    gtargets = {}
    for gp in plan.groups:
        if gp.tp <= 0:
            tp, pp = current.get(gp.name, (1, 1))
            gtargets[gp.name] = GroupTarget(name=gp.name, tp=tp, pp=pp, replicas=0, max_num_seqs=None)
            continue
        seqs = max_num_seqs(gp.kv_capacity_tokens, spec.classes, ctargets, rates, gp.name)
        gtargets[gp.name] = GroupTarget(name=gp.name, tp=gp.tp, pp=gp.pp, replicas=gp.replicas, max_num_seqs=seqs)
    return gtargets, ctargets
