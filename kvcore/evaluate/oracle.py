"""The shift-blind oracle: how well can ONE reservation per scenario do at every shift level at once?

Under the split protocol a reservation rule sees the same training half at every shift level l (the test
outputs are ``min(shift_l * xi, lmax)``), so a rule that only reads history ("shift-blind") picks one
reservation ``y_i`` per scenario i = (trace, rho) and is scored with it at every level. This module bounds the
best any such rule can do, measured the way :mod:`.summary` scores policies.

**Objective.** For scenario i and level l, ``c_il(y)`` is the mean of ``rho * (xi - y)^+ + (y - xi)^+`` over that
level's test outputs (:func:`~kvcore.evaluate.harness.request_cost`) and ``best_il > 0`` a fixed reference cost
(the cheapest listed policy). ``f_il(y) = log(c_il(y) / best_il)`` and the level gm of a choice ``(y_i)`` is
``G_l = exp(mean_i f_il(y_i))``. We bound ``OPT = min over y_i in [0, lmax_i] of max_l G_l``;
:func:`shift_blind_bound` returns a certified ``lower <= OPT`` and an achieved ``upper >= OPT``.

**Exact per-scenario minimisation (no grid).** Let ``x_1..x_n`` be one level's test outputs. Each term
``rho (x_j - y)^+ + (y - x_j)^+`` is convex piecewise linear in y with one kink, at ``x_j``, so ``c_il`` is convex
piecewise linear with kinks only at that level's test values. Let ``K_i`` be the union over levels of the test
values, plus 0 and ``lmax_i`` (every test value lies in ``[0, lmax_i]``), sorted. On a segment ``[a, b]`` between
consecutive points of ``K_i`` no test value lies in the open interior, so every ``c_il`` is affine there. It is
also positive in the interior: ``c_il(y) = 0`` needs every term to vanish, i.e. every test value of level l to
equal y, and y is not a test value. Hence ``log c_il`` is concave on ``[a, b]`` (with value ``-inf`` at an
endpoint where ``c_il`` vanishes, which keeps it concave and upper semicontinuous into ``[-inf, inf)``), and so is
``h(y) = sum_l w_l f_il(y)`` for any ``w_l >= 0`` (levels with ``w_l = 0`` are dropped, i.e. ``0 * -inf := 0``).
A concave h on a segment is minimised at an endpoint: ``h((1-t)a + tb) >= (1-t)h(a) + t h(b) >= min(h(a), h(b))``.
The segments cover ``[0, lmax_i]``, so ``min over [0, lmax_i] of h = min over K_i of h``, exactly. (0 and
``lmax_i`` never win strictly: below the smallest test value every cost falls, above the largest every cost rises.
They are kept so that the segments cover the whole range without that extra argument.)

**Zero cost.** ``c_il(y) = 0`` only when every test value of level l equals y (e.g. every output capped at
``lmax``). Then ``f_il(y) = -inf`` and the level's gm is 0 for any choice that uses that y, which is the exact
value of the objective, so it is kept as ``-inf`` rather than replaced by a large finite number (which would
raise f and could push the "lower bound" above OPT).

**Lower bound (weak Lagrangian duality).** Write ``G'_l(y) = log G_l(y) = mean_i f_il(y_i)`` and
``OPT' = log OPT``. For ANY weight vector w on the simplex, ``max_l G'_l(y) >= sum_l w_l G'_l(y)
= mean_i sum_l w_l f_il(y_i)``, and the right side separates over scenarios, so

    ``OPT' >= L(w) := mean_i min_{y in K_i} sum_l w_l f_il(y)``.

Every w thus certifies ``exp(L(w)) <= OPT``; the grid of weights (all ``w = k / steps`` with integer
``k_l >= 0`` summing to ``steps``) only decides how tight the reported maximum is, never its validity.

**Upper bound.** The minimisers ``y_i(w)`` of each ``L(w)`` are a feasible choice; its worst level gm is an
achieved value, ``>= OPT``. The smallest over the weight grid is reported with its level gms. The two bounds
need not meet (the problem is not convex in y), and the gap is the price of the duality relaxation.

**Cost.** Per scenario, ``F_i[l, k] = f_il(K_i[k])`` is computed once (levels x |K_i|, via :func:`scenario_costs`:
sort, prefix sums, binary search); each weight is then a matrix-vector product and an argmin. Numbers are
IEEE doubles: "certified" is up to the round-off of those sums (relative ~1e-12 on real traces).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvcore.errors import InputError
from kvcore.history.samples import FloatArray, as_float_array, check_finite_nonnegative

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_CHUNK_ENTRIES = 4_000_000
"""At most this many (weight, kink) objective values are held at once per scenario (32 MB of doubles)."""


@dataclass(frozen=True, eq=False)
class Scenario:
    """One (trace, rho) scenario of the split protocol, seen at every shift level.

    Attributes:
        tests: test output lengths (tokens) at each level, one 1-D array per level, all in ``[0, lmax]``.
        best: the reference cost of each level (cheapest listed policy), ``> 0``.
        rho: cost ratio c_p / c_w, ``> 0``.
        lmax: the largest admissible reservation (tokens); the oracle chooses y in ``[0, lmax]``.
    """

    tests: tuple[FloatArray, ...]
    best: tuple[float, ...]
    rho: float
    lmax: float


@dataclass(frozen=True)
class ShiftBlindBound:
    """Bounds on the best worst-level gm of cost / best that one reservation per scenario can reach.

    Attributes:
        lower: certified lower bound on OPT (a gm ratio): ``exp(max_w L(w))`` over the weight grid.
        upper: the worst-level gm of an achieved choice ``ys_upper`` (so an upper bound on OPT).
        levels_at_upper: the level gms of that choice; ``upper == max(levels_at_upper)``.
        weights_lower: the level weights w whose L(w) gives ``lower``.
        weights_upper: the level weights w whose minimisers give ``upper``.
        ys_upper: the achieving reservation of each scenario (tokens), in input order.
    """

    lower: float
    upper: float
    levels_at_upper: tuple[float, ...]
    weights_lower: tuple[float, ...]
    weights_upper: tuple[float, ...]
    ys_upper: tuple[float, ...]


def _check_rho(rho: float, field: str) -> float:
    if not (isinstance(rho, (int, float, np.floating, np.integer)) and math.isfinite(rho) and rho > 0):
        raise InputError(field, f"must be a finite number > 0, got {rho!r}")
    return float(rho)


def _check_values(data: FloatArray, field: str) -> FloatArray:
    """A non-empty 1-D array of finite values >= 0; names the first bad entry."""
    arr = as_float_array(data, field)
    if arr.size == 0:
        raise InputError(field, "is empty")
    check_finite_nonnegative(arr, field, "test output")
    return arr


def _costs_sorted(xs: FloatArray, prefix: FloatArray, rho: float, ys: FloatArray) -> FloatArray:
    """Mean newsvendor cost at each y, from sorted ``xs`` and ``prefix = [0, cumsum(xs)]``."""
    n = xs.size
    if xs[0] == xs[-1]:
        # Every value equal: exact (the prefix sums would leave round-off where the true cost is 0).
        v = xs[0]
        return np.asarray(rho * np.maximum(v - ys, 0.0) + np.maximum(ys - v, 0.0), dtype=np.float64)
    k = np.searchsorted(xs, ys, side="right")  # values <= y: over-reserved (ties cost 0 on either side)
    below = k * ys - prefix[k]
    above = (prefix[n] - prefix[k]) - (n - k) * ys
    cost = (rho * above + below) / n
    return np.asarray(np.maximum(cost, 0.0), dtype=np.float64)  # round-off never makes a cost negative


def scenario_costs(test_outputs: FloatArray, rho: float, ys: FloatArray) -> FloatArray:
    """Mean cost ``mean_j rho * (x_j - y)^+ + (y - x_j)^+`` over ``test_outputs`` at every y of ``ys``.

    Exact up to round-off in O((n + m) log n): one sort, prefix sums, and a binary search per y (no n x m
    matrix). ``ys`` may have any shape; the result has the same shape.

    Raises:
        InputError: ``test_outputs`` empty, not 1-D, not finite or negative; ``rho`` not a finite number > 0;
            ``ys`` not finite.
    """
    r = _check_rho(rho, "rho")
    xs = np.sort(_check_values(test_outputs, "test_outputs"))
    y = np.asarray(ys, dtype=np.float64)
    if not np.all(np.isfinite(y)):
        i = int(np.argmax(~np.isfinite(y.ravel())))
        raise InputError(f"ys[{i}]", f"is not finite ({y.ravel()[i]})")
    prefix = np.concatenate(([0.0], np.cumsum(xs)))
    return _costs_sorted(xs, prefix, r, y)


def _validate(scenarios: Sequence[Scenario]) -> int:
    """Check every field; return the number of levels."""
    if len(scenarios) == 0:
        raise InputError("scenarios", "is empty", hint="give at least one (trace, rho) scenario")
    levels = len(scenarios[0].tests)
    if levels == 0:
        raise InputError("scenarios[0].tests", "is empty", hint="give the test outputs of at least one level")
    for i, sc in enumerate(scenarios):
        at = f"scenarios[{i}]"
        if len(sc.tests) != levels:
            raise InputError(f"{at}.tests", f"has {len(sc.tests)} levels but scenarios[0] has {levels}")
        if len(sc.best) != levels:
            raise InputError(f"{at}.best", f"has {len(sc.best)} entries but there are {levels} levels")
        _check_rho(sc.rho, f"{at}.rho")
        if not (isinstance(sc.lmax, (int, float, np.floating, np.integer)) and math.isfinite(sc.lmax)
                and sc.lmax > 0):
            raise InputError(f"{at}.lmax", f"must be a finite number > 0, got {sc.lmax!r}")
        for lv, b in enumerate(sc.best):
            if not (isinstance(b, (int, float, np.floating, np.integer)) and math.isfinite(b) and b > 0):
                raise InputError(f"{at}.best[{lv}]", f"must be a finite number > 0, got {b!r}",
                                 hint="a zero reference cost makes every ratio infinite or undefined")
        for lv, t in enumerate(sc.tests):
            arr = _check_values(t, f"{at}.tests[{lv}]")
            top = int(np.argmax(arr))
            if arr[top] > sc.lmax:
                raise InputError(f"{at}.tests[{lv}][{top}]",
                                 f"test output {arr[top]:g} is above lmax {sc.lmax:g}")
    return levels


def _simplex_grid(levels: int, steps: int) -> FloatArray:
    """Every ``k / steps`` with integer ``k_l >= 0`` summing to ``steps`` (rows), the unit vectors included."""

    def parts(left: int, slots: int) -> Iterator[tuple[int, ...]]:
        if slots == 1:
            yield (left,)
            return
        for first in range(left, -1, -1):
            for rest in parts(left - first, slots - 1):
                yield (first, *rest)

    return np.array(list(parts(steps, levels)), dtype=np.float64) / steps


def _log_ratios(sc: Scenario) -> tuple[FloatArray, FloatArray]:
    """``K_i`` and ``F_i[l, k] = log(c_il(K_i[k]) / best_il)`` (``-inf`` where the cost is exactly 0)."""
    tests = [np.sort(np.asarray(t, dtype=np.float64)) for t in sc.tests]
    kinks = np.unique(np.concatenate([*tests, np.array([0.0, float(sc.lmax)])]))
    f = np.empty((len(tests), kinks.size), dtype=np.float64)
    for lv, xs in enumerate(tests):
        prefix = np.concatenate(([0.0], np.cumsum(xs)))
        cost = _costs_sorted(xs, prefix, float(sc.rho), kinks)
        with np.errstate(divide="ignore"):
            f[lv] = np.log(cost / float(sc.best[lv]))
    return kinks, f


def _minimise(f: FloatArray, weights: FloatArray) -> tuple[FloatArray, IntArray]:
    """For each weight row w: ``min_k sum_{l: w_l > 0} w_l f[l, k]`` and its first argmin k."""
    neg: BoolArray = np.isneginf(f)
    has_neg = bool(neg.any())
    finite = np.where(neg, 0.0, f) if has_neg else f
    n_w, n_k = weights.shape[0], f.shape[1]
    mins = np.empty(n_w, dtype=np.float64)
    args = np.empty(n_w, dtype=np.int64)
    chunk = max(1, _CHUNK_ENTRIES // n_k)
    for s in range(0, n_w, chunk):
        w = weights[s:s + chunk]
        obj = w @ finite
        if has_neg:
            # A level with weight > 0 and cost 0 at k sends the sum to -inf; weight-0 levels drop out.
            obj[((w > 0).astype(np.float64) @ neg.astype(np.float64)) > 0] = -np.inf
        k = np.argmin(obj, axis=1)
        args[s:s + chunk] = k
        mins[s:s + chunk] = obj[np.arange(w.shape[0]), k]
    return mins, args


def scenario_minimum(scenario: Scenario, weights: Sequence[float]) -> tuple[float, float]:
    """``(min, argmin)`` over y in ``[0, lmax]`` of ``sum_l w_l log(c_l(y) / best_l)`` for one scenario, exactly.

    The minimum is taken over the kink set K (module docstring), which is exact; levels with weight 0 are
    dropped. The value is ``-inf`` when a level with positive weight has cost 0 at the minimiser.

    Raises:
        InputError: a bad scenario field (as in :func:`shift_blind_bound`); ``weights`` of the wrong length,
            negative, not finite, or all zero.
    """
    levels = _validate([scenario])
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (levels,):
        raise InputError("weights", f"must hold one weight per level ({levels}), got shape {w.shape}")
    if not (np.all(np.isfinite(w)) and np.all(w >= 0) and w.sum() > 0):
        raise InputError("weights", f"must be finite, >= 0 and not all zero, got {w.tolist()}")
    kinks, f = _log_ratios(scenario)
    m, k = _minimise(f, w[None, :])
    return float(m[0]), float(kinks[k[0]])


def shift_blind_bound(scenarios: Sequence[Scenario], *, steps: int = 40) -> ShiftBlindBound:
    """Certified lower and achieved upper bounds on the best worst-level gm of one reservation per scenario.

    See the module docstring for the argument. ``steps`` divisions of the weight simplex are tried
    (C(steps + levels - 1, levels - 1) weights, 861 for 3 levels and the default 40); any grid gives valid bounds.

    Raises:
        InputError: no scenario; a scenario whose level count differs from the first; ``best`` not > 0; a test
            output negative, not finite, or above ``lmax``; ``rho`` or ``lmax`` not a finite number > 0;
            ``steps`` < 1.
    """
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise InputError("steps", f"must be an integer >= 1, got {steps!r}")
    levels = _validate(scenarios)
    weights = _simplex_grid(levels, int(steps))
    n_w, n_s = weights.shape[0], len(scenarios)
    mins = np.empty((n_w, n_s), dtype=np.float64)  # [w, i]: min_k sum_l w_l F_i[l, k]
    vals = np.empty((n_w, levels, n_s), dtype=np.float64)  # [w, l, i]: F_i[l, k_i(w)]
    ys = np.empty((n_w, n_s), dtype=np.float64)
    for i, sc in enumerate(scenarios):
        kinks, f = _log_ratios(sc)
        m, k = _minimise(f, weights)
        mins[:, i] = m
        vals[:, :, i] = f[:, k].T
        ys[:, i] = kinks[k]
    dual = np.mean(mins, axis=-1)  # L(w), log scale
    level_logs = np.mean(vals, axis=-1)  # G'_l(y(w)), log scale
    worst = level_logs.max(axis=1)
    wl = int(np.argmax(dual))
    wu = int(np.argmin(worst))
    upper = float(np.exp(worst[wu]))
    # exp(L(w)) <= OPT <= upper holds exactly; min() only absorbs round-off between the two summation orders.
    lower = min(float(np.exp(dual[wl])), upper)
    return ShiftBlindBound(
        lower=lower,
        upper=upper,
        levels_at_upper=tuple(float(v) for v in np.exp(level_logs[wu])),
        weights_lower=tuple(float(v) for v in weights[wl]),
        weights_upper=tuple(float(v) for v in weights[wu]),
        ys_upper=tuple(float(v) for v in ys[wu]),
    )
