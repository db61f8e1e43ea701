"""Closed-form reservations: SAA (the critical fractile) and the paper's baselines.

All work on weighted samples and are clipped to [0, L_max]:

- ``saa``: the rho / (rho + 1) = cp / (cp + cw) weighted quantile, the minimiser of the empirical E[Q];
- ``p90`` / ``p95`` / ``p99``: fixed weighted quantiles (lower quantile, as numpy's ``inverted_cdf``);
- ``mean``; ``max`` (reserve L_max, never preempt); ``mean+1sigma`` / ``mean+2sigma`` (the paper's "LP + k sigma",
  population sigma).
"""

from __future__ import annotations

from collections.abc import Callable

from kvcore.history.samples import Samples

BaselineFn = Callable[[Samples, float, float, float], float]
"""(samples, cp, cw, lmax) -> unclipped reservation in output tokens."""


def critical_fractile(cp: float, cw: float) -> float:
    """rho / (rho + 1) with rho = cp / cw, written so cw = 0 gives 1 and cp = 0 gives 0."""
    return cp / (cp + cw)


def _saa(s: Samples, cp: float, cw: float, lmax: float) -> float:
    return s.quantile(critical_fractile(cp, cw))


def _quantile(q: float) -> BaselineFn:
    def fn(s: Samples, cp: float, cw: float, lmax: float) -> float:
        return s.quantile(q)

    return fn


def _mean_plus(k: float) -> BaselineFn:
    def fn(s: Samples, cp: float, cw: float, lmax: float) -> float:
        return s.mean() + k * s.std()

    return fn


def _max(s: Samples, cp: float, cw: float, lmax: float) -> float:
    return lmax


BASELINES: dict[str, BaselineFn] = {
    "saa": _saa,
    "p90": _quantile(0.90),
    "p95": _quantile(0.95),
    "p99": _quantile(0.99),
    "mean": _mean_plus(0.0),
    "max": _max,
    "mean+1sigma": _mean_plus(1.0),
    "mean+2sigma": _mean_plus(2.0),
}
"""Registry: method name -> closed-form rule."""


def baseline_reserve(method: str, samples: Samples, *, cp: float, cw: float, lmax: float) -> float:
    """The reservation (output tokens) of a closed-form ``method``, clipped to [0, lmax]."""
    y = BASELINES[method](samples, cp, cw, lmax)
    return min(max(y, 0.0), lmax)
