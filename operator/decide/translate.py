"""The CR's vocabulary <-> kvcore's: validated spec + observations -> kvcore ``Instance``; kvcore's field paths in
an ``InputError`` -> the CR's (``groups[0].gpu_type`` -> ``spec.groups[0].nodePool.gpuType``). Pure; the only
module that knows both vocabularies.

Capacity from the engine: the groups' capacity (:mod:`kvplan_operator.observe.capacity`) becomes engine-scaled
profiles for kvcore (:func:`capacity_overrides`); step times fitted from the engines become fitted profiles at the
running layout and fitted / modelled-scaled profiles at the others (:func:`step_overrides`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvcore import InputError
from kvcore import ClassSpec, CostSpec, GroupSpec, Instance, Layout as KLayout
from kvcore import ProfileOverride, resolve_profile as resolve
from kvcore import scaled_override, step_fit_ratios
from kvcore import RadiusPolicy, with_horizon
from kvcore import SloSpec

from ..observe.history import ClassObservation
from ..observe.capacity import GroupCapacity, SpecProfiles
from ..spec import KVPlanSpec, Robustness

def capacity_overrides(spec: KVPlanSpec, view: Mapping[str, GroupCapacity]) -> tuple[tuple[ProfileOverride, ...],
                                                                                   list[str]]:
    """Engine-scaled :class:`ProfileOverride` for every allowed layout of every group on engine capacity (module
    docstring), and notes for shared profiles."""
    best: dict[tuple[str, str, int, int], tuple[float, str]] = {}
    notes: list[str] = []
    profiles = SpecProfiles.of(spec)
    for g in spec.groups:
        cap = view.get(g.name)
        if cap is None or cap.source != "engine":
            continue
        for lay in g.layouts:
            z = (lay.tp, lay.pp)
            if z == cap.layout and cap.engine_kv_tokens is not None:
                tokens: float | None = cap.engine_kv_tokens
            else:
                base = profiles.tokens(g, z)
                tokens = None if base is None else base * cap.scale
            if tokens is None:
                continue
            key = (g.node_pool.gpu_name, g.model, z[0], z[1])
            if key in best and abs(best[key][0] - tokens) > 1e-6 * tokens:
                notes.append(f"groups {best[key][1]} and {g.name} share the profile {key[0]} {key[1]} tp={z[0]} "
                             f"pp={z[1]}: the smaller engine capacity is used for both")
            if key not in best or tokens < best[key][0]:
                best[key] = (tokens, g.name)
    overrides = tuple(ProfileOverride(gpu_type=k[0], model=k[1], tp=k[2], pp=k[3], kv_capacity_tokens=math.floor(v))
                      for k, (v, _) in sorted(best.items()))
    return overrides, notes


def step_overrides(spec: KVPlanSpec, view: Mapping[str, GroupCapacity],
                   before: tuple[ProfileOverride, ...] = ()) -> tuple[tuple[ProfileOverride, ...], list[str]]:
    """Step-time :class:`ProfileOverride` for every allowed layout of every group with a step-time fit: t0, t1
    and the prefill rate of the running layout from the fit, the other layouts' profiles times fitted / modelled
    at the running one, and each layout's decode throughput from its new line (:func:`kvcore.scaled_override`).
    ``before``: the overrides they apply on top of (the spec's and the engine capacity's). Groups sharing a
    (GPU, model, layout) take the fit with the most decode tokens, with a note."""
    own = SpecProfiles.of(spec)
    chosen: dict[tuple[str, str], tuple[str, float]] = {}
    out: dict[tuple[str, str, int, int], ProfileOverride] = {}
    notes: list[str] = []
    fitted = [(g, cap, cap.step_fit) for g in spec.groups if (cap := view.get(g.name)) is not None
              and cap.step_fit is not None and cap.step_fit.ok and cap.layout is not None]
    for g, cap, fit in sorted(fitted, key=lambda item: -item[2].tokens):
        assert cap.layout is not None
        key = (g.node_pool.gpu_name, g.model)
        if key in chosen:
            notes.append(f"groups {chosen[key][0]} and {g.name} share {key[0]} {key[1]}: the step times fitted on "
                         f"{chosen[key][0]} ({chosen[key][1]:.0f} decode tokens) are used for both")
            continue
        chosen[key] = (g.name, fit.tokens)
        try:
            base = resolve(key[0], key[1], cap.layout[0], cap.layout[1], before, own.models, own.gpus)
        except InputError:
            continue
        ratios = step_fit_ratios(fit, base)
        for lay in g.layouts:
            try:
                prof = resolve(key[0], key[1], lay.tp, lay.pp, before, own.models, own.gpus)
            except InputError:
                continue
            if prof.feasible:
                out[(*key, lay.tp, lay.pp)] = scaled_override(prof, ratios)
    return tuple(v for _, v in sorted(out.items())), notes


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


def build_instance(spec: KVPlanSpec, observed: Mapping[str, ClassObservation], *,
                   layouts: Mapping[str, tuple[int, int]] | None = None,
                   capacity: Mapping[str, GroupCapacity] | None = None) -> Instance:
    """The planning problem. ``layouts`` pins groups to one (tp, pp) (the "hold" plan of the disruption policy);
    ``capacity`` (from :func:`capacity_view`) puts the engine's KV capacity in the profiles.

    Classes must all have a history (the caller checks samples first). Raises kvcore ``InputError`` or pydantic
    ``ValidationError`` on what kvcore refuses.
    """
    classes = []
    horizon = horizon_ratio(spec)
    for c in spec.classes:
        obs = observed[c.name]
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
        groups.append(GroupSpec(name=g.name, gpu_type=g.node_pool.gpu_name, gpus=g.node_pool.gpu_count,
                                gpus_per_node=g.node_pool.gpus_per_node, model=g.model,
                                layouts=tuple(KLayout(tp=tp, pp=pp) for tp, pp in allowed)))
    own = SpecProfiles.of(spec)
    profiles = own.overrides + (capacity_overrides(spec, capacity)[0] if capacity else ())
    profiles += step_overrides(spec, capacity, profiles)[0] if capacity else ()
    costs = CostSpec(kappa=spec.costs.kappa, c_slo=spec.costs.c_slo, c_rej=spec.costs.c_rej)
    return Instance(classes=tuple(classes), groups=tuple(groups), costs=costs, profiles=profiles,
                    models=own.models, gpu_types=own.gpus)


#: kvcore's field names -> the CR's, per kvcore list (classes[i], groups[k], profiles[j], costs).
_CLASS_FIELDS = {"arrival_rate": "arrivalRate", "input_tokens": "inputTokens", "lmax": "maxOutputTokens",
                 "prefix_tokens": "prefixTokens", "cp": "costs.preemption", "cw": "costs.waste", "slo.mu": "slo.mu",
                 "slo.sigma": "slo.sigma", "slo.lam": "slo.lambda", "history": "history", "radius": "robustness",
                 "name": "name", "slo": "slo"}
_GROUP_FIELDS = {"gpu_type": "nodePool.gpuType", "gpus": "nodePool.gpuCount", "gpus_per_node": "nodePool.gpusPerNode",
                 "model": "model", "layouts": "layouts", "name": "name"}
_PROFILE_FIELDS = {"gpu_type": "gpuType", "model": "model", "tp": "tp", "pp": "pp",
                   "kv_capacity_tokens": "kvCapacityTokens", "throughput_tokens_s": "throughputTokensPerSecond"}
_COSTS_FIELDS = {"kappa": "kappa", "c_slo": "cSlo", "c_rej": "cRej"}
_PATH = re.compile(r"^(classes|groups|profiles)\[(\d+)\](?:\.(.*))?$")


def cr_path(field: str, spec: KVPlanSpec | None = None) -> str:
    """A kvcore ``InputError.field`` -> the CR field path the user wrote (``spec...``).

    kvcore's ``classes[i]``/``groups[k]``/``profiles[j]`` index like the spec's (build_instance keeps the order).
    A class's ``arrival_rate`` is ``arrivalRateQuery`` when the spec gives a query; a group's ``layouts[j]`` is
    reported as ``layouts`` (the hold plan pins a single layout, so kvcore's index is not the spec's). Fields
    with no CR counterpart map to the nearest enclosing one."""
    if field.startswith("models.") and spec is not None:  # a group's modelConfig(Ref), by its model name
        for k, g in enumerate(spec.groups):
            if g.hf_config and field.startswith(f"models.{g.model}"):
                ref = g.model_config_ref
                base = f"spec.groups[{k}].modelConfig" if ref is None else ref.cr_path(k)
                return base + field[len(f"models.{g.model}"):]
    if field.startswith("gpu_types.") and spec is not None:  # a group's gpuSpec, by its name
        for k, g in enumerate(spec.groups):
            gs = g.node_pool.gpu_spec
            if gs is not None and (field == f"gpu_types.{gs.name}" or field.startswith(f"gpu_types.{gs.name}.")):
                return f"spec.groups[{k}].nodePool.gpuSpec" + field[len(f"gpu_types.{gs.name}"):]
    m = _PATH.match(field)
    if m:
        kind, idx, rest = m.group(1), int(m.group(2)), m.group(3) or ""
        base = f"spec.{kind}[{idx}]"
        if not rest:
            return base
        if kind == "classes":
            if rest == "arrival_rate" and spec is not None and idx < len(spec.classes) \
                    and spec.classes[idx].arrival_rate_query is not None:
                return f"{base}.arrivalRateQuery"
            table = _CLASS_FIELDS
        elif kind == "groups":
            rest = "layouts" if rest.startswith("layouts") else rest
            table = _GROUP_FIELDS
        else:
            table = _PROFILE_FIELDS
        key = rest if rest in table else rest.split(".", 1)[0]
        return f"{base}.{table[key]}" if key in table else base
    if field.startswith("costs."):
        key = field.split(".", 1)[1]
        return f"spec.costs.{_COSTS_FIELDS[key]}" if key in _COSTS_FIELDS else "spec.costs"
    if field in ("classes", "groups", "profiles", "costs"):
        return f"spec.{field}"
    return "spec"
