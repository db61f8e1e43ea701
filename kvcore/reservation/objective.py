"""Cost functions of the one-class reservation problem, in token-slot units.

- :func:`cost`: one request, ``Q(y, xi) = cp (xi - y)^+ + cw (y - xi)^+``. ``y`` is the reservation in output
  tokens (excluding input), ``xi`` the realised output length; ``cp`` is paid per token that overflows the
  reservation (preemption / recompute), ``cw`` per reserved token left unused (waste).
- :func:`expected_cost`: the empirical mean of Q over weighted samples.
- :func:`dro_objective`: the Wasserstein DRO objective (seed eq. 6) at a given ``(y, gamma)``, with ``theta``
  eliminated: ``gamma eps + sum_n w_n max(Q(y, xi_n), cp (L - y) - gamma (L - xi_n), cw y - gamma xi_n)``.
  Any ``y in [0, L]``, ``gamma >= 0`` gives an upper bound on the worst-case expected cost over the ball; the
  minimum is the worst-case cost itself. Both solvers report this re-evaluated value, never a solver's own claim.
"""

from __future__ import annotations

from typing import overload

import numpy as np
import numpy.typing as npt

from kvcore.bounds import MAX_COST, MAX_TOKENS
from kvcore.errors import InputError
from kvcore.history.samples import FloatArray, Samples


@overload
def cost(y: float, xi: float, *, cp: float, cw: float) -> float: ...
@overload
def cost(y: float, xi: FloatArray, *, cp: float, cw: float) -> FloatArray: ...
def cost(y: float, xi: float | FloatArray, *, cp: float, cw: float) -> float | FloatArray:
    """Q(y, xi) per request, token slots; vectorised over ``xi``."""
    if isinstance(xi, np.ndarray):
        d = xi - y
        out: FloatArray = cp * np.maximum(d, 0.0) + cw * np.maximum(-d, 0.0)
        return out
    d0 = float(xi) - y
    return cp * max(d0, 0.0) + cw * max(-d0, 0.0)


def expected_cost(y: float, samples: Samples, *, cp: float, cw: float) -> float:
    """Empirical E[Q(y, xi)] under the sample weights (token slots per request)."""
    return float(np.dot(samples.weights, cost(y, samples.values, cp=cp, cw=cw)))


def dro_objective(
    y: float, gamma: float, samples: Samples, *, cp: float, cw: float, lmax: float, eps: float
) -> float:
    """The DRO objective at ``(y, gamma)`` (token slots per request); see the module docstring."""
    xi = samples.values
    # Written with in-place operations (three temporaries) because the exact solver re-checks with it at N = 1e5.
    # Lines with slope -cp in y: cp (xi - y) and cp (L - y) - gamma (L - xi).
    per: npt.NDArray[np.float64] = xi * cp
    per -= cp * y
    tmp = xi * gamma
    tmp += cp * (lmax - y) - gamma * lmax
    np.maximum(per, tmp, out=per)
    # Lines with slope +cw in y: cw (y - xi) and cw y - gamma xi.
    up = xi * -cw
    up += cw * y
    np.multiply(xi, -gamma, out=tmp)
    tmp += cw * y
    np.maximum(up, tmp, out=up)
    np.maximum(per, up, out=per)
    return float(gamma * eps + np.dot(samples.weights, per))


def check_problem(samples: Samples, *, cp: float, cw: float, lmax: float, eps: float | None = None) -> None:
    """Validate the scalars of one reservation problem; each error names its field."""
    for name, value in (("cp", cp), ("cw", cw), ("lmax", lmax)):
        if not np.isfinite(value):
            raise InputError(name, f"must be finite, got {value}")
        if value < 0:
            raise InputError(name, f"must be >= 0, got {value:g}")
        top, bound = (MAX_TOKENS, "MAX_TOKENS") if name == "lmax" else (MAX_COST, "MAX_COST")
        if value > top:
            raise InputError(name, f"must be at most {top:g} (kvcore.bounds.{bound}), got {value:g}")
    if cp + cw <= 0:
        raise InputError("cp", "cp and cw are both zero; at least one cost must be positive")
    if lmax <= 0:
        raise InputError("lmax", f"must be > 0 tokens, got {lmax:g}")
    if eps is not None:
        if not np.isfinite(eps):
            raise InputError("eps", f"must be finite, got {eps}")
        if eps < 0:
            raise InputError("eps", f"radius must be >= 0 tokens, got {eps:g}")
    biggest = samples.max()
    if biggest > lmax:
        raise InputError(
            "lmax",
            f"L_max = {lmax:g} is below the largest sample ({biggest:g} tokens); the DRO support [0, L_max] must "
            "contain every sample",
            hint=f"use --lmax >= {biggest:g}",
        )
