"""One-class KV reservations under output-length uncertainty: SAA, Wasserstein DRO (exact and LP) and baselines.

Entry point :func:`reserve`; everything returns a :class:`ReservationResult`. Units: reservations in output
tokens (excluding input), costs in token slots per request (:func:`cost`).

Modules: :mod:`.objective` (Q, E[Q], the DRO objective, input checks), :mod:`.exact` (O(N) DRO),
:mod:`.lp` (HiGHS LP), :mod:`.baselines` (closed forms), :mod:`.result` (types).

The radius of the DRO methods is chosen by a :class:`RadiusPolicy` (re-exported from :mod:`kvcore.reservation.radius`);
:data:`DEFAULT_RADIUS` is the data-driven ``drift`` rule of :mod:`kvcore.reservation.radius_drift`, and every result carries
the :class:`RadiusChoice` it used (eps and the reason).
"""

from __future__ import annotations

import time

from kvcore.errors import InputError
from kvcore.reservation.radius import DEFAULT_RADIUS, RadiusChoice, RadiusPolicy, choose_radius
from kvcore.reservation.baselines import baseline_reserve, critical_fractile
from kvcore.reservation.exact import solve_dro_exact
from kvcore.reservation.lp import solve_dro_lp
from kvcore.reservation.objective import check_problem, cost, dro_objective, expected_cost
from kvcore.reservation.result import DRO_METHODS, METHODS, Method, ReservationResult, SolverStatus
from kvcore.history.samples import History, Samples, as_history

__all__ = [
    "DEFAULT_RADIUS",
    "METHODS",
    "Method",
    "RadiusChoice",
    "RadiusPolicy",
    "ReservationResult",
    "SolverStatus",
    "choose_radius",
    "cost",
    "critical_fractile",
    "dro_objective",
    "expected_cost",
    "reserve",
]


def reserve(
    history_or_samples: History | Samples,
    *,
    cp: float,
    cw: float,
    lmax: float,
    method: str = "dro",
    radius: RadiusPolicy | None = None,
) -> ReservationResult:
    """The reservation for one class.

    Args:
        history_or_samples: output-length samples (tokens); a :class:`History` is pooled.
        cp: cost per overflowing token (token slots), >= 0.
        cw: cost per unused reserved token (token slots), >= 0; cp + cw > 0.
        lmax: maximum output length L_max (tokens); must be >= the largest sample.
        method: one of :data:`METHODS`. ``dro`` is the exact algorithm, ``dro-lp`` the HiGHS LP.
        radius: how to choose eps for the DRO methods; None means :data:`kvcore.reservation.radius.DEFAULT_RADIUS`.

    Raises:
        InputError: a bad input, naming the field.
    """
    if method not in METHODS:
        raise InputError("method", f"unknown method {method!r}", hint="one of " + ", ".join(METHODS))
    history = as_history(history_or_samples)
    samples = history.pooled()
    check_problem(samples, cp=cp, cw=cw, lmax=lmax)
    if method in DRO_METHODS:
        choice = choose_radius(radius if radius is not None else DEFAULT_RADIUS, history, lmax=lmax, cp=cp, cw=cw)
        check_problem(samples, cp=cp, cw=cw, lmax=lmax, eps=choice.eps)
        if method == "dro":
            t0 = time.perf_counter()
            sol = solve_dro_exact(samples, cp=cp, cw=cw, lmax=lmax, eps=choice.eps)
            seconds = time.perf_counter() - t0
            return ReservationResult(
                method="dro", reserve_tokens=sol.y, worst_case_cost=sol.objective,
                expected_cost=expected_cost(sol.y, samples, cp=cp, cw=cw), gamma=sol.gamma, eps=choice.eps,
                radius=choice, status=SolverStatus.OPTIMAL, raw_status="exact", solve_seconds=seconds,
            )
        lp = solve_dro_lp(samples, cp=cp, cw=cw, lmax=lmax, eps=choice.eps)
        ok = lp.status is SolverStatus.OPTIMAL
        y = lp.y if ok else lmax
        return ReservationResult(
            method="dro-lp", reserve_tokens=y, worst_case_cost=lp.objective if ok else None,
            expected_cost=expected_cost(y, samples, cp=cp, cw=cw), gamma=lp.gamma if ok else None, eps=choice.eps,
            radius=choice, status=lp.status, raw_status=lp.raw_status, solve_seconds=lp.solve_seconds,
            detail=lp.detail if ok else f"{lp.detail}; reserve_tokens falls back to lmax (never preempts)",
        )
    t0 = time.perf_counter()
    y = baseline_reserve(method, samples, cp=cp, cw=cw, lmax=lmax)
    seconds = time.perf_counter() - t0
    return ReservationResult(
        method=method,  # checked against METHODS above
        reserve_tokens=y, expected_cost=expected_cost(y, samples, cp=cp, cw=cw),
        eps=0.0 if method == "saa" else None, solve_seconds=seconds,
    )
