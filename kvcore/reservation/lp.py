"""Wasserstein DRO for one class as a linear program, solved with HiGHS (highspy).

Variables ``x = [y, gamma, theta_0 .. theta_{N-1}]``; minimise ``gamma eps + sum_n w_n theta_n`` subject to,
for every sample n (four rows, all ``>=``)::

    theta_n + cp y                       >= cp xi_n          theta_n >= cp (xi_n - y)
    theta_n - cw y                       >= -cw xi_n         theta_n >= cw (y - xi_n)
    theta_n + cp y + (L - xi_n) gamma    >= cp L             theta_n >= cp (L - y) - gamma (L - xi_n)
    theta_n - cw y + xi_n gamma          >= 0                theta_n >= cw y - gamma xi_n

with ``y in [0, L]``, ``gamma >= 0``, theta free. The constraint matrix is built column-wise in bulk with numpy
and handed over in one ``passModel`` call (no per-row Python loop).

Boundary, as in scipy's HiGHS adapter: every HiGHS model status maps to :class:`SolverStatus` (the raw name is
kept), and after the solve the bounds are re-checked and the objective is re-evaluated at the returned (y, gamma)
with theta eliminated; a mismatch beyond ``_RECHECK_RTOL`` turns the status into ``error``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import highspy
import numpy as np

from kvcore.highs import silent_highs

from kvcore.reservation.objective import dro_objective
from kvcore.reservation.result import SolverStatus
from kvcore.history.samples import FloatArray, Samples

_RECHECK_RTOL = 1e-6
_BOUND_TOL = 1e-7

_STATUS_MAP: dict[str, SolverStatus] = {
    "kOptimal": SolverStatus.OPTIMAL,
    "kInfeasible": SolverStatus.INFEASIBLE,
}
"""HiGHS model statuses that mean something definite; every other one (kUnbounded, kUnboundedOrInfeasible,
kTimeLimit, kIterationLimit, kObjectiveBound, kObjectiveTarget, kSolutionLimit, kInterrupt, kHighsInterrupt,
kMemoryLimit, kNotset, kLoadError, kModelError, kPresolveError, kSolveError, kPostsolveError, kModelEmpty, kUnknown)
maps to ``error``. The problem is always feasible and bounded below (theta_n >= Q >= 0), so anything but
optimal is a backend failure."""


def map_status(raw: str) -> SolverStatus:
    """Map a HiGHS model-status name (e.g. ``"kOptimal"``) to the small status set."""
    return _STATUS_MAP.get(raw, SolverStatus.ERROR)


@dataclass(frozen=True)
class LpSolution:
    """What the LP produced: ``y`` (tokens), ``gamma``, the objective re-evaluated at (y, gamma) (token slots per
    request), the mapped and raw status, HiGHS's own objective, the solve time and a human note."""

    y: float
    gamma: float
    objective: float
    status: SolverStatus
    raw_status: str
    highs_objective: float
    solve_seconds: float
    detail: str


def build_lp(samples: Samples, *, cp: float, cw: float, lmax: float, eps: float) -> highspy.HighsLp:
    """The LP of the module docstring as a column-wise ``HighsLp``; zero coefficients are left out."""
    xi: FloatArray = np.asarray(samples.values, dtype=np.float64)
    n = int(xi.size)
    rows = np.arange(4 * n, dtype=np.int32)
    # Column y.
    y_val = np.tile(np.array([cp, -cw, cp, -cw]), n)
    y_idx = rows[y_val != 0]
    y_val = y_val[y_val != 0]
    # Column gamma: rows 4n+2 (coefficient L - xi_n) and 4n+3 (xi_n).
    g_idx = np.empty(2 * n, dtype=np.int32)
    g_idx[0::2] = rows[2::4]
    g_idx[1::2] = rows[3::4]
    g_val = np.empty(2 * n)
    g_val[0::2] = lmax - xi
    g_val[1::2] = xi
    keep = g_val != 0
    g_idx, g_val = g_idx[keep], g_val[keep]
    # Columns theta_n: coefficient 1 in rows 4n .. 4n+3.
    index = np.concatenate([y_idx, g_idx, rows])
    value = np.concatenate([y_val, g_val, np.ones(4 * n)])
    start = np.concatenate([[0, y_idx.size], y_idx.size + g_idx.size + 4 * np.arange(n + 1)]).astype(np.int32)

    row_lower = np.empty(4 * n)
    row_lower[0::4] = cp * xi
    row_lower[1::4] = -cw * xi
    row_lower[2::4] = cp * lmax
    row_lower[3::4] = 0.0

    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_col_ = n + 2
    lp.num_row_ = 4 * n
    lp.col_cost_ = np.concatenate([[0.0, eps], samples.weights])
    lp.col_lower_ = np.concatenate([[0.0, 0.0], np.full(n, -inf)])
    lp.col_upper_ = np.concatenate([[lmax, inf], np.full(n, inf)])
    lp.row_lower_ = row_lower
    lp.row_upper_ = np.full(4 * n, inf)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.num_col_ = n + 2
    lp.a_matrix_.num_row_ = 4 * n
    lp.a_matrix_.start_ = start
    lp.a_matrix_.index_ = index
    lp.a_matrix_.value_ = value
    return lp


def solve_dro_lp(
    samples: Samples,
    *,
    cp: float,
    cw: float,
    lmax: float,
    eps: float,
    solver: str = "ipm",
    time_limit: float | None = None,
) -> LpSolution:
    """Solve the DRO LP with HiGHS. Inputs are assumed validated (see ``check_problem``).

    ``solver`` is HiGHS's ``solver`` option. The default is interior point (with HiGHS's crossover to a vertex):
    on 20,000 real output lengths it was about 10x faster than HiGHS's default choice (dual simplex) here.

    ``eps`` above ``lmax`` is solved as ``lmax``: two distributions on [0, L_max] are at most L_max apart in W1, so
    every such ball is the same set and the worst-case cost is the same. Without the clamp the LP's coefficient
    range blows up (eps = 1e7 against costs of order 1: HiGHS reported a feasible instance infeasible).
    """
    eps = min(eps, lmax)
    lp = build_lp(samples, cp=cp, cw=cw, lmax=lmax, eps=eps)
    h = silent_highs()
    h.setOptionValue("primal_feasibility_tolerance", 1e-9)
    h.setOptionValue("dual_feasibility_tolerance", 1e-9)
    h.setOptionValue("solver", solver)
    if time_limit is not None:
        h.setOptionValue("time_limit", float(time_limit))
    t0 = time.perf_counter()
    h.passModel(lp)
    h.run()
    seconds = time.perf_counter() - t0
    model_status = h.getModelStatus()
    raw = model_status.name if hasattr(model_status, "name") else str(model_status)
    status = map_status(raw)
    if status is not SolverStatus.OPTIMAL:
        return LpSolution(float("nan"), float("nan"), float("nan"), status, raw, float("nan"), seconds,
                          f"HiGHS: {h.modelStatusToString(model_status)}")
    sol = np.asarray(h.getSolution().col_value, dtype=np.float64)
    highs_obj = float(h.getInfo().objective_function_value)
    y_raw, g_raw = float(sol[0]), float(sol[1])
    detail = ""
    if not (-_BOUND_TOL * max(lmax, 1.0) <= y_raw <= lmax * (1 + _BOUND_TOL)) or g_raw < -_BOUND_TOL:
        status = SolverStatus.ERROR
        detail = f"post-solve check: y = {y_raw:g} or gamma = {g_raw:g} outside its bounds"
    y, g = min(max(y_raw, 0.0), lmax), max(g_raw, 0.0)
    obj = dro_objective(y, g, samples, cp=cp, cw=cw, lmax=lmax, eps=eps)
    # Relative tolerance, plus an absolute floor of 1e-9 of the cost scale for optima at or near zero.
    tol = _RECHECK_RTOL * max(abs(obj), abs(highs_obj)) + 1e-9 * max(cp, cw) * lmax
    if abs(obj - highs_obj) > tol:
        status = SolverStatus.ERROR
        detail = f"post-solve check: re-evaluated objective {obj:.9g} != HiGHS objective {highs_obj:.9g}"
    return LpSolution(y, g, obj, status, raw, highs_obj, seconds, detail)
