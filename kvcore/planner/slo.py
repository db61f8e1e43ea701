"""SLO -> cost ratio rho = cp / cw (seed eq. 8): ``rho ~ exp(mu / (sigma * sqrt(2 * log(lambda))))``.

What the symbols mean here (the seed does not define them; this is our reading, stated so users can check it):

* ``mu`` — the latency SLO target, in seconds (> 0).
* ``sigma`` — the standard deviation of one request's latency, in seconds (> 0); only ``mu / sigma`` matters, so
  any common time unit works.
* ``lambda`` — the number of requests over which the SLO is judged (e.g. a P99 over a window: lambda = arrivals per
  window), dimensionless, **> 1**. ``sqrt(2 log lambda)`` is the Gaussian extreme-value scale: the expected maximum
  of lambda standard normals grows like it, so ``mu / (sigma sqrt(2 log lambda))`` is the deadline measured in units
  of the worst latency expected among lambda requests.

Assumptions: latencies roughly Gaussian with independent requests (extreme-value approximation); the result is an
*approximation* for choosing rho when costs are unknown, not a derived optimum. Domain: mu > 0, sigma > 0,
lambda > 1 (at lambda = 1 the denominator is 0). rho grows with mu, falls with sigma and with lambda.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from kvcore.bounds import MAX_SECONDS, MAX_WEIGHT
from kvcore.errors import InputError

RHO_MAX = 1e6
"""Ratios above this are refused (exp overflows quickly and such a ratio means 'never preempt': use cp/cw)."""


class SloSpec(BaseModel):
    """SLO parameters of eq. 8 (dimensionless; see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mu: float = Field(gt=0.0, le=MAX_SECONDS, allow_inf_nan=False, description="SLO target scale mu (> 0).")
    sigma: float = Field(gt=0.0, le=MAX_SECONDS, allow_inf_nan=False, description="Latency spread sigma (> 0).")
    lam: float = Field(gt=1.0, le=MAX_WEIGHT, allow_inf_nan=False,
                       description="Requests per SLO judgement lambda (> 1).")


def rho_from_slo(mu: float, sigma: float, lam: float, *, field: str = "slo") -> float:
    """rho = exp(mu / (sigma sqrt(2 log lam))). Raises :class:`InputError` outside the domain or above RHO_MAX."""
    for name, value in (("mu", mu), ("sigma", sigma), ("lam", lam)):
        if not math.isfinite(value):
            raise InputError(f"{field}.{name}", f"must be finite, got {value}")
    if mu <= 0:
        raise InputError(f"{field}.mu", f"must be > 0, got {mu:g}")
    if sigma <= 0:
        raise InputError(f"{field}.sigma", f"must be > 0, got {sigma:g}")
    if lam <= 1:
        raise InputError(f"{field}.lam", f"must be > 1 (sqrt(2 log lambda) is 0 or undefined), got {lam:g}")
    exponent = mu / (sigma * math.sqrt(2.0 * math.log(lam)))
    if exponent > math.log(RHO_MAX):
        raise InputError(field, f"rho = exp({exponent:.3g}) exceeds {RHO_MAX:g}", hint="give cp and cw instead")
    return math.exp(exponent)


def cost_ratio(slo: SloSpec) -> float:
    """rho for an :class:`SloSpec`."""
    return rho_from_slo(slo.mu, slo.sigma, slo.lam)
