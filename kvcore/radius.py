"""The Wasserstein radius eps: how it is chosen, and why.

A :class:`RadiusPolicy` says which rule picks eps (in tokens: the radius of a type-1 Wasserstein ball over output
lengths has the units of the lengths). :func:`choose_radius` applies it to a :class:`~kvcore.samples.History` and
returns a :class:`RadiusChoice` carrying eps, the rule's name and a one-line human reason, so every plan can say
where its eps came from.

Rules are looked up in :data:`RULES` (kind -> function), so a new kind (e.g. the data-driven ``drift`` rule of the
evaluation issue, in its own module) plugs in by registering a function with :func:`register_rule` and widening
``RadiusPolicy.kind``; nothing here needs rewriting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kvcore.errors import InputError
from kvcore.samples import History, Samples, as_history


class RadiusPolicy(BaseModel):
    """How to choose eps. Frozen; unknown keys are rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["absolute", "fraction"] = Field(
        default="fraction",
        description=(
            "Which rule: 'absolute' uses `eps` as given; 'fraction' uses `frac` times the pooled sample mean. "
            "Default 'fraction', the paper's recommendation (eps = 0.15 E[xi]) until the evaluation issue decides."
        ),
    )
    eps: float = Field(
        default=0.0,
        ge=0.0,
        description=(
            "Radius in output tokens for kind='absolute'. Default 0 (plain SAA) so an absolute policy without a "
            "value never adds robustness silently."
        ),
    )
    frac: float = Field(
        default=0.15,
        ge=0.0,
        description=(
            "Radius as a fraction of the pooled weighted mean output length (dimensionless) for kind='fraction'. "
            "Default 0.15, the paper's recommended value."
        ),
    )


class RadiusChoice(BaseModel):
    """The radius a policy picked. ``eps`` in output tokens (>= 0)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    eps: float = Field(ge=0.0, description="Wasserstein-1 radius, output tokens.")
    rule: str = Field(description="The policy kind that produced eps, e.g. 'fraction'.")
    reason: str = Field(description="One line a human can read: how eps was computed from which numbers.")


RuleFn = Callable[[RadiusPolicy, History, float], RadiusChoice]


def _absolute(policy: RadiusPolicy, history: History, lmax: float) -> RadiusChoice:
    return RadiusChoice(eps=policy.eps, rule="absolute", reason=f"eps = {policy.eps:g} tokens as configured")


def _fraction(policy: RadiusPolicy, history: History, lmax: float) -> RadiusChoice:
    mean = history.pooled().mean()
    eps = policy.frac * mean
    return RadiusChoice(
        eps=eps,
        rule="fraction",
        reason=f"eps = {policy.frac:g} x mean output {mean:.1f} tokens = {eps:.1f} tokens",
    )


RULES: dict[str, RuleFn] = {"absolute": _absolute, "fraction": _fraction}
"""Registry: policy kind -> rule. Extend with :func:`register_rule`."""


def register_rule(kind: str, rule: RuleFn) -> None:
    """Register (or replace) the rule for ``kind``."""
    RULES[kind] = rule


DEFAULT_RADIUS = RadiusPolicy(kind="fraction", frac=0.15)
"""The project's default: eps = 0.15 E[xi], the paper's rule, until the evaluation issue picks a winner."""


def choose_radius(policy: RadiusPolicy, history: History | Samples, *, lmax: float) -> RadiusChoice:
    """Apply ``policy`` to ``history``; ``lmax`` (tokens) is the support bound, available to rules that need it."""
    try:
        rule = RULES[policy.kind]
    except KeyError:
        raise InputError("radius.kind", f"no rule registered for {policy.kind!r}") from None
    return rule(policy, as_history(history), float(lmax))
