"""The joint planner's input: request classes, GPU groups, costs and profile overrides.

Units: arrival rates in requests/s, lengths in tokens, costs in token-slot units per request (``cp``, ``cw``) or per
unit time (see :class:`CostSpec`). All models are frozen pydantic models with ``extra="forbid"``; every number is
finite and below its bound in :mod:`kvcore.bounds`.

Constructing a model directly raises pydantic's ``ValidationError`` (its ``loc`` names the field);
:func:`load_instance` turns that into :class:`kvcore.errors.InputError` with a dotted path such as
``classes[2].arrival_rate``, which is what the CLI and the operator report.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kvcore.bounds import MAX_COST, MAX_COUNT, MAX_RATE, MAX_TOKENS
from kvcore.errors import InputError
from kvcore.profiles import (ProfileOverride, check_known, check_layout, check_override, gpu_from_config,
                             model_arch_from_config)
from kvcore.reservation.radius import RadiusPolicy
from kvcore.history.samples import History, Samples, as_history
from kvcore.planner.slo import SloSpec, cost_ratio

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Layout(BaseModel):
    """One allowed (TP, PP) layout of a group; a replica uses ``tp * pp`` GPUs."""

    model_config = _FROZEN

    tp: int = Field(ge=1, le=MAX_COUNT, description="Tensor-parallel size (vLLM --tensor-parallel-size).")
    pp: int = Field(ge=1, le=MAX_COUNT, description="Pipeline-parallel size (vLLM --pipeline-parallel-size).")


class ClassSpec(BaseModel):
    """One request class.

    Give either ``cp`` and ``cw`` (costs per overflowing / per unused reserved token, token-slot units) or ``slo``
    (then ``cw`` = 1 and ``cp`` = rho(slo), seed eq. 8; see :mod:`kvcore.planner.slo`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    name: str = Field(min_length=1, description="Class name, unique in the instance.")
    arrival_rate: float = Field(ge=0.0, le=MAX_RATE, allow_inf_nan=False, description="lambda_i, requests/s.")
    input_tokens: float = Field(ge=0.0, le=MAX_TOKENS, allow_inf_nan=False,
                                description="L_in, prompt tokens per request.")
    lmax: float = Field(gt=0.0, le=MAX_TOKENS, allow_inf_nan=False,
                        description="L_max, maximum output tokens per request.")
    prefix_tokens: float = Field(
        default=0.0, ge=0.0, le=MAX_TOKENS, allow_inf_nan=False,
        description="L_pre, shared-prefix tokens (part of the input) that prefix caching can reuse. Default 0.",
    )
    cp: float | None = Field(default=None, ge=0.0, le=MAX_COST, allow_inf_nan=False,
                             description="Cost per overflowing token.")
    cw: float | None = Field(default=None, ge=0.0, le=MAX_COST, allow_inf_nan=False,
                             description="Cost per unused reserved token.")
    slo: SloSpec | None = Field(default=None, description="SLO parameters mapped to rho = cp / cw (seed eq. 8).")
    history: History = Field(description="Output-length samples (tokens), time-ordered windows; DRO fits the union.")
    radius: RadiusPolicy | None = Field(default=None, description="Wasserstein radius rule; None = project default.")

    @field_validator("history", mode="before")
    @classmethod
    def _as_history(cls, value: Any) -> Any:
        return as_history(value) if isinstance(value, Samples) else value

    @model_validator(mode="after")
    def _check(self) -> ClassSpec:
        if self.prefix_tokens > self.input_tokens:
            raise ValueError(f"prefix_tokens ({self.prefix_tokens:g}) exceeds input_tokens ({self.input_tokens:g})")
        if self.slo is None and (self.cp is None or self.cw is None):
            raise ValueError("give cp and cw, or slo")
        if self.slo is not None and (self.cp is not None):
            raise ValueError("give cp/cw or slo, not both")
        cp, cw = self.costs()
        if cp + cw <= 0:
            raise ValueError("cp + cw must be > 0")
        return self

    def costs(self) -> tuple[float, float]:
        """(cp, cw) in token-slot units; from ``slo`` when given (cw defaults to 1)."""
        if self.slo is not None:
            cw = 1.0 if self.cw is None else self.cw
            return cost_ratio(self.slo) * cw, cw
        assert self.cp is not None and self.cw is not None
        return self.cp, self.cw

    def samples(self) -> Samples:
        """The pooled output-length samples."""
        return self.history.pooled()


class GroupSpec(BaseModel):
    """One group: a Deployment on a node pool of ``gpus`` GPUs of one type, serving one model."""

    model_config = _FROZEN

    name: str = Field(min_length=1, description="Group name (the Deployment), unique in the instance.")
    gpu_type: str = Field(description="GPU type: a catalogue name, e.g. 'A100-80GB' (kvcore.profiles.GPUS), or a "
                                      "name in the instance's gpu_types.")
    gpus: int = Field(ge=1, le=MAX_COUNT, description="G_k, GPUs in the group's node pool.")
    gpus_per_node: int = Field(default=8, ge=1, le=MAX_COUNT,
                               description="GPUs per node; TP stays inside a node. Default 8 (DGX).")
    model: str = Field(description="Served model, e.g. 'llama-70b' (see kvcore.profiles.MODELS).")
    layouts: tuple[Layout, ...] = Field(min_length=1, description="Allowed (TP, PP) layouts Z_k.")


class CostSpec(BaseModel):
    """Objective weights. Cost unit: one token slot (cw = 1 in the paper's setup); all terms are per second."""

    model_config = _FROZEN

    kappa: float = Field(default=0.2, ge=0.0, le=MAX_COST, allow_inf_nan=False,
                         description="Cost per GPU in use per second (times phi). Default 0.2, the paper's value.")
    c_slo: float = Field(default=5.0, ge=0.0, le=MAX_COST, allow_inf_nan=False,
                         description="Cost per second of queueing delay per request. Default 5 (paper: c_slo/c_w).")
    c_rej: float = Field(default=5000.0, ge=0.0, le=MAX_COST, allow_inf_nan=False,
                         description="Cost per rejected request. Default 5000 (paper: c_rej/c_w).")
    max_utilisation: float = Field(
        default=0.95, gt=0.0, lt=1.0,
        description="Stability: offered work <= max_utilisation x service rate per group. Default 0.95 headroom.",
    )


class Instance(BaseModel):
    """A complete planning problem."""

    model_config = _FROZEN

    classes: tuple[ClassSpec, ...] = Field(description="Request classes (at least one).")
    groups: tuple[GroupSpec, ...] = Field(description="GPU groups (at least one).")
    costs: CostSpec = Field(default_factory=CostSpec, description="Objective weights.")
    profiles: tuple[ProfileOverride, ...] = Field(default=(), description="Measured profile overrides.")
    models: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="The instance's own models: name -> Hugging Face config.json fields "
                                          "(kvcore.profiles.arch.from_hf_config); groups[].model may name them.")
    gpu_types: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="The instance's own GPU types: name -> datasheet figures "
                                          "(kvcore.profiles.gpus.gpu_from_spec: memoryBytes, hbmBytesPerSecond, "
                                          "bf16Flops, ...); groups[].gpu_type may name them.")

    @model_validator(mode="after")
    def _check(self) -> Instance:
        check_instance(self)
        return self


def check_instance(inst: Instance) -> None:
    """Cross-field checks; raises :class:`InputError` naming the field."""
    if not inst.classes:
        raise InputError("classes", "no classes", hint="give at least one request class")
    if not inst.groups:
        raise InputError("groups", "no groups", hint="give at least one GPU group")
    _unique([c.name for c in inst.classes], "classes")
    _unique([g.name for g in inst.groups], "groups")
    for name, cfg in inst.models.items():
        model_arch_from_config(cfg, name=name, field=f"models.{name}")
    for name, spec in inst.gpu_types.items():
        gpu_from_config(spec, name=name, field=f"gpu_types.{name}")
    own = {"models": inst.models, "gpus": inst.gpu_types}
    for k, g in enumerate(inst.groups):
        check_known(g.gpu_type, g.model, field=f"groups[{k}]", **own)
        for j, lay in enumerate(g.layouts):
            check_layout(g.gpu_type, g.model, lay.tp, lay.pp, field=f"groups[{k}].layouts[{j}]", **own)
    for j, ov in enumerate(inst.profiles):
        check_override(ov, field=f"profiles[{j}]", **own)
    for i, c in enumerate(inst.classes):
        top = c.samples().max()
        if top > c.lmax * (1 + 1e-12):
            raise InputError(f"classes[{i}].history", f"a sample ({top:g}) exceeds lmax ({c.lmax:g})")
        if not math.isfinite(c.arrival_rate):
            raise InputError(f"classes[{i}].arrival_rate", "must be finite")


def _unique(names: list[str], field: str) -> None:
    seen: set[str] = set()
    for j, n in enumerate(names):
        if n in seen:
            raise InputError(f"{field}[{j}].name", f"duplicate name {n!r}")
        seen.add(n)


def dotted(loc: tuple[int | str, ...]) -> str:
    """('classes', 2, 'arrival_rate') -> 'classes[2].arrival_rate'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out or "instance"


def input_error(exc: ValidationError) -> InputError:
    """The first error of a pydantic ``ValidationError`` as an :class:`InputError` with a dotted field path."""
    err = exc.errors()[0]
    inner = (err.get("ctx") or {}).get("error")
    if isinstance(inner, InputError):
        base = dotted(tuple(err["loc"]))
        field = inner.field if base == "instance" else f"{base}.{inner.field}"
        return InputError(field, inner.message, hint=inner.hint)
    msg = str(err["msg"]).removeprefix("Value error, ")
    return InputError(dotted(tuple(err["loc"])), msg)


def load_instance(data: Mapping[str, Any] | Instance) -> Instance:
    """Validate a mapping (e.g. parsed YAML whose histories are already :class:`History`) into an Instance.

    Raises:
        InputError: naming the field, e.g. ``classes[2].arrival_rate``.
    """
    if isinstance(data, Instance):
        return data
    try:
        return Instance.model_validate(data)
    except ValidationError as exc:
        raise input_error(exc) from None
