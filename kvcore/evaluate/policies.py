"""The reservation policies the harness compares, in a registry (name -> how to reserve from a history).

Every policy maps ``(history, rho, lmax, horizon_ratio)`` to a :class:`~kvcore.reservation.ReservationResult`
with ``cp = rho`` and ``cw = 1`` (the evaluation's cost units). Only the default's radius rule uses the horizon
ratio (how long the plan is in force over the span of its history); every other policy ignores it. All go
through :func:`kvcore.reservation.reserve`, so "P95" or "DRO" mean exactly what ``kvcore reserve`` computes.

- ``default``: ``reserve(method="dro")`` with the project default radius (:data:`kvcore.reservation.radius.DEFAULT_RADIUS`,
  the data-driven ``drift`` rule) told the episode's horizon ratio, as the operator tells it
  ``interval / lookback``;
- ``dro-paper``: DRO with the paper's eps = 0.15 E[xi]; ``dro-0.02``: DRO with eps = 0.02 E[xi];
- ``saa`` (the rho / (rho + 1) critical fractile), ``p90``, ``p95``, ``p99``, ``mean``, ``max`` (L_max),
  ``mean+1sigma``, ``mean+2sigma``.

Add one with :func:`register_policy`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvcore.errors import InputError
from kvcore.reservation.radius import RadiusPolicy, with_horizon
from kvcore.reservation import ReservationResult, reserve
from kvcore.history.samples import History

PolicyFn = Callable[[History, float, float, float], ReservationResult]
"""(history, rho, lmax, horizon_ratio) -> reservation; cp = rho, cw = 1."""


@dataclass(frozen=True)
class Policy:
    """A named policy with a one-line description for tables."""

    name: str
    description: str
    fn: PolicyFn


POLICIES: dict[str, Policy] = {}
"""Registry, in table order."""


def register_policy(name: str, description: str, fn: PolicyFn) -> None:
    """Add (or replace) a policy."""
    POLICIES[name] = Policy(name=name, description=description, fn=fn)


def _method(method: str) -> PolicyFn:
    def fn(history: History, rho: float, lmax: float, horizon_ratio: float) -> ReservationResult:
        return reserve(history, cp=rho, cw=1.0, lmax=lmax, method=method)

    return fn


def _dro(radius: RadiusPolicy) -> PolicyFn:
    def fn(history: History, rho: float, lmax: float, horizon_ratio: float) -> ReservationResult:
        return reserve(history, cp=rho, cw=1.0, lmax=lmax, method="dro", radius=radius)

    return fn


def _default(history: History, rho: float, lmax: float, horizon_ratio: float) -> ReservationResult:
    return reserve(history, cp=rho, cw=1.0, lmax=lmax, method="dro", radius=with_horizon(None, horizon_ratio))


register_policy("default", "DRO with the project's default radius (the drift rule, told the plan's horizon ratio)",
                _default)
register_policy("dro-paper", "DRO, eps = 0.15 E[xi] (the paper's recommendation)",
                _dro(RadiusPolicy(kind="fraction", frac=0.15)))
register_policy("dro-0.02", "DRO, eps = 0.02 E[xi]", _dro(RadiusPolicy(kind="fraction", frac=0.02)))
register_policy("saa", "SAA: the rho/(rho+1) critical fractile of the history", _method("saa"))
for _q in ("p90", "p95", "p99"):
    register_policy(_q, f"fixed {_q[1:]}th percentile of the history", _method(_q))
register_policy("mean", "the mean output length", _method("mean"))
register_policy("max", "L_max (never preempts)", _method("max"))
register_policy("mean+1sigma", "mean + 1 standard deviation (the paper's LP+1 sigma)", _method("mean+1sigma"))
register_policy("mean+2sigma", "mean + 2 standard deviations (the paper's LP+2 sigma)", _method("mean+2sigma"))

DEFAULT_METHODS: tuple[str, ...] = tuple(POLICIES)
"""What ``kvcore evaluate`` compares unless told otherwise: every policy above."""


def get_policy(name: str) -> Policy:
    """Look a policy up; an unknown name is an :class:`InputError` listing the known ones."""
    try:
        return POLICIES[name]
    except KeyError:
        raise InputError("method", f"unknown policy {name!r}", hint="one of " + ", ".join(POLICIES)) from None
