"""The highest arrival rate that still meets an SLO: bracket, then bisect, on a measured attainment curve.

``attainment(rate)`` is the share of a replay's requests within the SLO when the replay arrives at ``rate``
requests/s (:mod:`kvcore.evaluate.slo_capacity` measures it in the vLLM engine model). The search assumes that
attainment does not rise with the rate (more load never helps a queue); a finite replay can break that locally, so
the search never trusts a rate it did not measure:

1. **Bracket.** From ``start_rps``, double while the rate meets the share (at most ``max_bracket`` times) or halve
   while it does not (at most ``max_bracket`` times), until one measured rate meets the share and the next one up
   (twice it) does not.
2. **Bisect** the bracket at its geometric midpoint until ``hi / lo <= 1 + rel_tol`` (at most ``max_bisect``
   times): ``lo`` always a measured rate that meets the share, ``hi`` one that does not.

Rates are points of one geometric lattice, ``start_rps * (1 + rel_tol)^k`` (bracketing moves by the whole number
of lattice steps that first makes a factor of 2), so the bisection ends exactly at adjacent lattice points.

3. **Check below.** A finite replay can make attainment dip and recover. Before answering, the rates 1, 2, 4, ...
   lattice steps below ``lo`` (down to the bracket's low end) are measured too; if one misses the share, the
   bisection restarts between the bracket's low end and that rate. The answer is thus the crossing nearest the
   bracket's low end that this sparse check finds, a conservative one.

The answer is ``lo``: a rate measured to meet the share, with a measured failing rate one lattice step (``rel_tol``)
above it, and the checked rates below it meeting the share. Where attainment is not monotone, a higher rate may
also meet the share; the search never reports a rate it did not measure. Everything is iteration-limited and
deterministic given a deterministic ``attainment`` (the caller seeds its replays); measurements are memoised, so
searches for several shares on one curve share them (:class:`AttainmentCurve`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from kvcore.errors import InputError

REL_TOL = 0.01
"""Bisection stops when the bracket is this narrow, relative (1%: finer than a replay of hundreds of requests
resolves)."""
MAX_BRACKET = 12
"""Doublings or halvings while bracketing: 2^12 = 4096x either way from the start covers any sane start."""
MAX_BISECT = 40
"""Bisection steps: a 2x bracket of 70 lattice steps narrows to one in 7; 40 is a safety stop."""


class SloRate(BaseModel):
    """One search's answer."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    share: float = Field(description="Share of requests that must meet the SLO.")
    rate_rps: float | None = Field(description="Highest measured rate (requests/s) meeting the share, None if none.")
    fail_rps: float | None = Field(description="Lowest measured rate above it that misses the share (None: none "
                                   "missed within the bracket's reach).")
    evaluations: int = Field(description="Attainments measured by this search (memoised ones included).")
    reason: str = Field(default="", description="Why there is no rate, or why it is only a lower bound.")


class AttainmentCurve:
    """Memoised ``attainment(rate)``: one measurement per distinct rate, shared by every search on it."""

    def __init__(self, attainment: Callable[[float], float]) -> None:
        self._fn = attainment
        self.points: dict[float, float] = {}

    def __call__(self, rate: float) -> float:
        if rate not in self.points:
            value = float(self._fn(rate))
            if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                raise ValueError(f"attainment at {rate:g} req/s is {value}, not a share in [0, 1]")
            self.points[rate] = value
        return self.points[rate]


def lattice_steps(factor: float, rel_tol: float) -> int:
    """Lattice steps of ``1 + rel_tol`` that make at least ``factor``."""
    return max(1, math.ceil(math.log(factor) / math.log1p(rel_tol) - 1e-9))


def find_slo_rate(curve: Callable[[float], float], *, share: float, start_rps: float, rel_tol: float = REL_TOL,
                  max_bracket: int = MAX_BRACKET, max_bisect: int = MAX_BISECT) -> SloRate:
    """The highest rate at which ``curve(rate) >= share`` (module docstring: bracket, then bisect). Every rate
    measured is on the lattice ``start_rps * (1 + rel_tol)^k`` (integer k), so searches from one start measure the
    same rates, and methods that behave the same get the same answer."""
    if not (0.0 < share <= 1.0):
        raise InputError("share", f"must be in (0, 1], got {share}")
    if not (math.isfinite(start_rps) and start_rps > 0):
        raise InputError("start_rps", f"must be finite and > 0, got {start_rps}")
    if not (0.0 < rel_tol < 1.0):
        raise InputError("rel_tol", f"must be in (0, 1), got {rel_tol}")
    n = 0
    double = lattice_steps(2.0, rel_tol)

    def rate(k: int) -> float:
        return start_rps * (1.0 + rel_tol) ** k

    def meets(k: int) -> bool:
        nonlocal n
        n += 1
        return curve(rate(k)) >= share

    lo: int | None = None
    hi: int | None = None
    if meets(0):
        lo = 0
        for i in range(1, max_bracket + 1):
            if not meets(i * double):
                hi = i * double
                break
            lo = i * double
        if hi is None:
            return SloRate(share=share, rate_rps=rate(lo), fail_rps=None, evaluations=n,
                           reason=f"meets the share up to {rate(lo):.4g} req/s, the bracket's top: a lower bound")
    else:
        hi = 0
        for i in range(1, max_bracket + 1):
            if meets(-i * double):
                lo = -i * double
                break
            hi = -i * double
        if lo is None:
            return SloRate(share=share, rate_rps=None, fail_rps=rate(hi), evaluations=n,
                           reason=f"misses the share at every rate down to {rate(hi):.4g} req/s")
    floor = lo
    for _ in range(max_bisect):
        if hi - lo <= 1:
            below = _first_miss_below(lo, floor, meets)
            if below is None:
                break
            hi = below
            lo = floor
            continue
        mid = (lo + hi) // 2
        if meets(mid):
            lo = mid
        else:
            hi = mid
    return SloRate(share=share, rate_rps=rate(lo), fail_rps=rate(hi), evaluations=n)


def _first_miss_below(lo: int, floor: int, meets: Callable[[int], bool]) -> int | None:
    """The first of ``lo - 1, lo - 2, lo - 4, ...`` (above ``floor``, a measured pass) that misses the share."""
    step = 1
    while lo - step > floor:
        if not meets(lo - step):
            return lo - step
        step *= 2
    return None
