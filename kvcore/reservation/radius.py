"""The Wasserstein radius eps: how it is chosen, and why.

A :class:`RadiusPolicy` says which rule picks eps (in tokens: the radius of a type-1 Wasserstein ball over output
lengths has the units of the lengths). :func:`choose_radius` applies it to a :class:`~kvcore.history.samples.History` and
returns a :class:`RadiusChoice` carrying eps, the rule's name and a one-line human reason, so every plan can say
where its eps came from.

Rules are looked up in :data:`RULES` (kind -> function), so a new kind (e.g. the data-driven ``drift`` rule of the
evaluation issue, in its own module) plugs in by registering a function with :func:`register_rule` and adding the
kind to :data:`kvcore.catalogue.RadiusKind` (which the CRD's enum is checked against); nothing here needs
rewriting.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvcore.bounds import MAX_POWER, MAX_RATIO, MAX_TOKENS
from kvcore.catalogue import RadiusKind
from kvcore.errors import InputError
from kvcore.reservation.radius_drift import (
    DEFAULT_BINNING,
    DEFAULT_DRIFT_Z,
    DEFAULT_FLOOR_SCALE,
    DEFAULT_HORIZON_FRAC,
    DEFAULT_HORIZON_POWER,
    DEFAULT_HORIZON_RATIO,
    Binning,
    Side,
    drift_radius,
    exposed_side,
)
from kvcore.history.samples import History, Samples, as_history


class RadiusPolicy(BaseModel):
    """How to choose eps. Frozen; unknown keys are rejected; every number is finite and within :mod:`kvcore.bounds`
    (so ``horizon_ratio ** horizon_power`` cannot overflow)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: RadiusKind = Field(
        default="drift",
        description=(
            "Which rule: 'absolute' uses `eps` as given; 'fraction' uses `frac` times the pooled sample mean (the "
            "paper's eps = 0.15 E[xi]); 'drift' is the data-driven rule of kvcore.reservation.radius_drift (sampling floor + "
            "observed drift between history windows, capped at saturation). Default 'drift': it won the evaluation "
            "(docs/results.md)."
        ),
    )
    eps: float = Field(
        default=0.0,
        ge=0.0,
        le=MAX_TOKENS,
        allow_inf_nan=False,
        description=(
            "Radius in output tokens for kind='absolute'. Default 0 (plain SAA) so an absolute policy without a "
            "value never adds robustness silently."
        ),
    )
    frac: float = Field(
        default=0.15,
        ge=0.0,
        le=MAX_RATIO,
        allow_inf_nan=False,
        description=(
            "Radius as a fraction of the pooled weighted mean output length (dimensionless) for kind='fraction'. "
            "Default 0.15, the paper's recommended value."
        ),
    )
    floor_scale: float = Field(
        default=DEFAULT_FLOOR_SCALE,
        ge=0.0,
        le=MAX_RATIO,
        allow_inf_nan=False,
        description=(
            "kind='drift': how many of the N observed requests the ball may relocate across the spread S, so the "
            "sampling floor is floor_scale * S / N_eff tokens (dimensionless). Default 3, the rule of three "
            "(see kvcore.reservation.radius_drift)."
        ),
    )
    drift_z: float = Field(
        default=DEFAULT_DRIFT_Z,
        ge=0.0,
        le=MAX_RATIO,
        allow_inf_nan=False,
        description=(
            "kind='drift': window-to-window W1 distance up to this many noise scales is treated as chance "
            "(dimensionless). Default 6, so diurnal wobble does not count as drift but a step change does."
        ),
    )
    horizon_ratio: float = Field(
        default=DEFAULT_HORIZON_RATIO,
        ge=0.0,
        le=MAX_RATIO,
        allow_inf_nan=False,
        description=(
            "kind='drift': how long the plan will be in force, as a multiple of the time span of the history it is "
            "fitted on (dimensionless). The operator sets it to spec.replan.interval / spec.prometheus.lookback. "
            "Default 1: a one-off plan holds as long as its history."
        ),
    )
    horizon_frac: float = Field(
        default=DEFAULT_HORIZON_FRAC,
        ge=0.0,
        le=MAX_RATIO,
        allow_inf_nan=False,
        description=(
            "kind='drift': the horizon term at horizon_ratio = 1, as a fraction of the pooled mean output length "
            "(dimensionless). Default 0.15, the paper's radius for a plan used as long as its training data."
        ),
    )
    horizon_power: float = Field(
        default=DEFAULT_HORIZON_POWER,
        gt=0.0,
        le=MAX_POWER,
        allow_inf_nan=False,
        description=(
            "kind='drift': the horizon term is horizon_frac * mean * horizon_ratio ** horizon_power "
            "(dimensionless exponent). Default 2 (see kvcore.reservation.radius_drift)."
        ),
    )
    binning: Binning = Field(
        default=DEFAULT_BINNING,
        description=(
            "kind='drift': which part of the distance that histogram binning can introduce (the samples' "
            "`binning` bound, tokens) joins the sampling floor: 'open' the open +Inf bucket's, whose requests may "
            "sit anywhere up to max_model_len; 'all' every bucket's (every placement of each bucket's requests "
            "inside it is in the ball); 'none'. Default 'open': inside a finite bucket binning moves a request "
            "less than the bucket's width, which the within-bucket model handles; counting it costs more than the "
            "binning itself (docs/model.md, 'Histogram buckets')."
        ),
    )


class RadiusChoice(BaseModel):
    """The radius a policy picked. ``eps`` in output tokens (>= 0)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    eps: float = Field(ge=0.0, description="Wasserstein-1 radius, output tokens.")
    rule: str = Field(description="The policy kind that produced eps, e.g. 'fraction'.")
    reason: str = Field(description="One line a human can read: how eps was computed from which numbers.")


RuleFn = Callable[[RadiusPolicy, History, float, Side], RadiusChoice]
"""(policy, history, lmax in tokens, side the reservation is exposed on) -> choice."""


def _absolute(policy: RadiusPolicy, history: History, lmax: float, side: Side) -> RadiusChoice:
    return RadiusChoice(eps=policy.eps, rule="absolute", reason=f"eps = {policy.eps:g} tokens as configured")


def _fraction(policy: RadiusPolicy, history: History, lmax: float, side: Side) -> RadiusChoice:
    mean = history.pooled().mean()
    eps = policy.frac * mean
    return RadiusChoice(
        eps=eps,
        rule="fraction",
        reason=f"eps = {policy.frac:g} x mean output {mean:.1f} tokens = {eps:.1f} tokens",
    )


def _drift(policy: RadiusPolicy, history: History, lmax: float, side: Side) -> RadiusChoice:
    d = drift_radius(history, lmax, floor_scale=policy.floor_scale, drift_z=policy.drift_z, side=side,
                     horizon_ratio=policy.horizon_ratio, horizon_frac=policy.horizon_frac,
                     horizon_power=policy.horizon_power, binning=policy.binning)
    return RadiusChoice(eps=d.eps, rule="drift", reason=d.reason)


RULES: dict[str, RuleFn] = {"absolute": _absolute, "fraction": _fraction, "drift": _drift}
"""Registry: policy kind -> rule. Extend with :func:`register_rule`."""


def register_rule(kind: str, rule: RuleFn) -> None:
    """Register (or replace) the rule for ``kind``."""
    RULES[kind] = rule


DEFAULT_RADIUS = RadiusPolicy(kind="drift")
"""The project's default: the data-driven drift rule (:mod:`kvcore.reservation.radius_drift`), chosen by the evaluation of
the radius-rule comparison (docs/results.md §1) over the paper's eps = 0.15 E[xi] (``RadiusPolicy(kind="fraction", frac=0.15)``); see docs/results.md."""


def with_horizon(policy: RadiusPolicy | None, ratio: float) -> RadiusPolicy:
    """``policy`` (the project default when None) told how long the plan stays in force over the span of its
    history; kinds other than 'drift' do not use the ratio and are returned unchanged. Validated (0 <= ratio <=
    :data:`kvcore.bounds.MAX_RATIO`); an :class:`InputError` names ``horizon_ratio`` otherwise."""
    base = policy if policy is not None else DEFAULT_RADIUS
    if base.kind != "drift":
        return base
    try:
        return RadiusPolicy.model_validate({**base.model_dump(), "horizon_ratio": ratio})
    except ValidationError as exc:
        raise InputError("horizon_ratio", str(exc.errors()[0]["msg"])) from None


def choose_radius(policy: RadiusPolicy, history: History | Samples, *, lmax: float, cp: float | None = None,
                  cw: float | None = None) -> RadiusChoice:
    """Apply ``policy`` to ``history``; ``lmax`` (tokens) is the support bound, available to rules that need it.

    ``cp`` and ``cw`` (token slots per token), when given, tell the rule which side the reservation is exposed on
    (:func:`kvcore.reservation.radius_drift.exposed_side`): the drift rule then counts only drift towards that side."""
    try:
        rule = RULES[policy.kind]
    except KeyError:
        raise InputError("radius.kind", f"no rule registered for {policy.kind!r}") from None
    return rule(policy, as_history(history), float(lmax), exposed_side(cp, cw))
