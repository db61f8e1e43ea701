"""Each group's KV capacity per replica, as the planner will use it: the engine's or the profile's, with the reason.

Capacity from the engine (``spec.capacity.fromEngine: true``, the default): for a group whose engines reported
their KV size (:mod:`kvplan_operator.observe.sources.capacity`) while it runs layout z0, M(z0) is that size, and every
other allowed layout z gets ``M(z) = profile(z) x engine(z0) / profile(z0)`` (tokens; the profile is the roofline,
or ``spec.profiles`` where given): the engine's overheads (activation memory, CUDA graphs, its own
``--gpu-memory-utilization``) are assumed to scale with the profile. These go to kvcore as
:class:`~kvcore.profiles.ProfileOverride` (kvcore stays pure and unchanged). kvcore keys profiles by (GPU type,
model, TP, PP), so groups sharing all four share one value: the smallest (never over-commits memory; a note says
so). A group without an engine report keeps its profile, and status says why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvcore import InputError, StepFit
from kvcore import ProfileOverride, resolve_profile as resolve

from .sources.capacity import EngineCapacity
from ..spec import Group, KVPlanSpec

#: Engine / profile capacity ratios outside this range get a note (a selector matching another model's pods, or a
#: profile far from the hardware); the engine's number is still used.
PLAUSIBLE_SCALE = (0.25, 4.0)


@dataclass(frozen=True)
class GroupCapacity:
    """Where a group's M(z) comes from, for the planner and for ``status.plan.groups.<g>.capacity``. Tokens per
    replica; ``scale`` = engine / profile at the running ``layout`` (1 when the profile is used)."""

    source: str
    layout: tuple[int, int] | None
    engine_kv_tokens: float | None
    profile_kv_tokens: float | None
    scale: float
    engines: int = 0
    usage: float | None = None
    preemptions_per_s: float | None = None
    note: str = ""
    profile_source: Mapping[str, str | None] | None = None
    """Where the profile's figures come from (:func:`profile_source`)."""
    step_fit: StepFit | None = None
    """The step times fitted from the engines at ``layout`` (None: not asked, ``spec.capacity.stepTimes``)."""


def profile_source(spec: KVPlanSpec, g: Group, layout: tuple[int, int] | None) -> dict[str, str | None]:
    """Where group ``g``'s profile comes from: ``gpu`` (``catalogue`` or ``gpuSpec``), ``model`` (``catalogue``,
    ``modelConfig`` or ``modelConfigRef``) and ``override``, the ``spec.profiles`` entry that replaces the model's
    figures at the running ``layout`` (the last one matching, as kvcore applies them), else None."""
    model = "modelConfigRef" if g.model_config_ref is not None else "modelConfig" if g.hf_config else "catalogue"
    override = None
    for j, p in enumerate(spec.profiles):
        if layout is not None and (p.gpu_type, p.model, p.tp, p.pp) == (g.node_pool.gpu_name, g.model, *layout):
            override = f"spec.profiles[{j}]"
    return {"gpu": "gpuSpec" if g.node_pool.gpu_spec is not None else "catalogue", "model": model,
            "override": override}


_LAST_OF: dict[str, tuple[KVPlanSpec, SpecProfiles]] = {}
"""``"last"``: (the last spec :meth:`SpecProfiles.of` built for, its SpecProfiles), one tuple (read atomically)."""


@dataclass(frozen=True)
class SpecProfiles:
    """What kvcore resolves a spec's profiles from, built once per spec: its measured overrides
    (``spec.profiles``), its groups' own model configs (``modelConfig``, or a ConfigMap's once read) and GPU specs
    (``nodePool.gpuSpec``, as kvcore's figures mappings), by name."""

    overrides: tuple[ProfileOverride, ...]
    models: dict[str, dict[str, Any]]
    gpus: dict[str, dict[str, Any]]

    @classmethod
    def of(cls, spec: KVPlanSpec) -> SpecProfiles:
        """The spec's profile inputs; the last spec's are kept, so a cycle's observe, capacity view, overrides and
        instance build them once (specs are frozen; a new spec object misses the cache)."""
        last = _LAST_OF.get("last")
        if last is not None and last[0] is spec:
            return last[1]
        built = cls._build(spec)
        _LAST_OF["last"] = (spec, built)
        return built

    @classmethod
    def _build(cls, spec: KVPlanSpec) -> SpecProfiles:
        overrides = tuple(ProfileOverride(gpu_type=p.gpu_type, model=p.model, tp=p.tp, pp=p.pp,
                                          kv_capacity_tokens=p.kv_capacity_tokens,
                                          throughput_tokens_s=p.throughput_tokens_per_second) for p in spec.profiles)
        models = {g.model: dict(g.hf_config) for g in spec.groups if g.hf_config}
        gpus = {gs.name: gs.model_dump(by_alias=True, exclude={"name"})
                for gs in (g.node_pool.gpu_spec for g in spec.groups) if gs is not None}
        return cls(overrides, models, gpus)

    def tokens(self, g: Group, layout: tuple[int, int]) -> float | None:
        """The profile's KV capacity of group ``g`` at ``layout`` (tokens), None where it has none."""
        try:
            prof = resolve(g.node_pool.gpu_name, g.model, layout[0], layout[1], self.overrides, self.models,
                           self.gpus)
        except InputError:
            return None
        return prof.kv_capacity_tokens if prof.feasible and prof.kv_capacity_tokens > 0 else None


def capacity_view(spec: KVPlanSpec, engines: Mapping[str, EngineCapacity] | None,
                  running: Mapping[str, tuple[int, int] | None],
                  unsettled: Mapping[str, str | None],
                  fits: Mapping[str, StepFit] | None = None) -> dict[str, GroupCapacity]:
    """Per group: the engine's capacity for its running layout if it reported one (and the Deployment is settled:
    ``unsettled[g]`` None), else the profile, with the reason; ``fits``: the step times fitted per group."""
    out: dict[str, GroupCapacity] = {}
    profiles = SpecProfiles.of(spec)
    for g in spec.groups:
        layout = running.get(g.name)
        eng = (engines or {}).get(g.name)
        prof = profiles.tokens(g, layout) if layout else None
        extra: dict[str, Any] = {"profile_source": profile_source(spec, g, layout),
                                 "step_fit": (fits or {}).get(g.name)}
        if eng is not None:
            extra |= {"engines": eng.engines, "usage": eng.usage, "preemptions_per_s": eng.preemptions_per_s}
        why = ""
        if not spec.capacity.from_engine:
            why = "spec.capacity.fromEngine is false"
        elif engines is None:
            why = "not read"
        elif eng is None or eng.kv_tokens is None:
            why = (eng.reason if eng is not None else "no engine series") + "; using the profile"
        elif layout is None:
            why = "the Deployment's layout is unknown; using the profile"
        elif unsettled.get(g.name):
            why = f"layout not known to run ({unsettled[g.name]}): using the profile"
        elif prof is None:
            why = f"no feasible profile for tp={layout[0]} pp={layout[1]} to scale; using the profile"
        if why:
            out[g.name] = GroupCapacity("profile", layout, eng.kv_tokens if eng else None, prof, 1.0, note=why,
                                        **extra)
            continue
        assert eng is not None and eng.kv_tokens is not None and prof is not None and layout is not None
        scale = eng.kv_tokens / prof
        note = ""
        if not PLAUSIBLE_SCALE[0] <= scale <= PLAUSIBLE_SCALE[1]:
            note = (f"engine reports {scale:.2f}x the profile's KV capacity: check the group's metricsSelector "
                    "and model")
        if eng.spread > 0.01:
            note = (note + "; " if note else "") + f"engines differ by {eng.spread:.0%}: the smallest is used"
        out[g.name] = GroupCapacity("engine", layout, eng.kv_tokens, prof, scale, note=note, **extra)
    return out
