"""Baselines (P90/P95/P99, mean, max, mean + k sigma, SAA) against numpy, result fields, status mapping and
reserve()'s input errors."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from kvcore.errors import InputError
from kvcore.reservation.radius import RadiusPolicy
from kvcore.reservation import METHODS, SolverStatus, cost, reserve
from kvcore.reservation.lp import map_status
from kvcore.history.samples import History, Samples

RNG_SEED = 7

Ref = Callable[[np.ndarray, float], float]

BASELINE_REFS: list[tuple[str, Ref]] = [
    ("p90", lambda x, L: float(np.quantile(x, 0.90, method="inverted_cdf"))),
    ("p95", lambda x, L: float(np.quantile(x, 0.95, method="inverted_cdf"))),
    ("p99", lambda x, L: float(np.quantile(x, 0.99, method="inverted_cdf"))),
    ("mean", lambda x, L: float(np.mean(x))),
    ("max", lambda x, L: L),
    ("mean+1sigma", lambda x, L: min(float(np.mean(x) + np.std(x)), L)),
    ("mean+2sigma", lambda x, L: min(float(np.mean(x) + 2 * np.std(x)), L)),
    ("saa", lambda x, L: float(np.quantile(x, 10 / 11, method="inverted_cdf"))),
]


@pytest.mark.parametrize(("method", "ref"), BASELINE_REFS, ids=[m for m, _ in BASELINE_REFS])
@pytest.mark.parametrize("n", [1, 7, 1000], ids=lambda n: f"n{n}")
def test_baseline_matches_numpy(method: str, ref: Ref, n: int) -> None:
    rng = np.random.default_rng(RNG_SEED + n)
    x = np.floor(rng.lognormal(5.0, 1.0, n))
    lmax = float(max(x.max(), 1.0) * 1.2)
    r = reserve(Samples.from_arrays(x), cp=10.0, cw=1.0, lmax=lmax, method=method)
    assert r.reserve_tokens == pytest.approx(ref(x, lmax))
    assert 0.0 <= r.reserve_tokens <= lmax
    assert r.expected_cost == pytest.approx(float(np.mean(cost(r.reserve_tokens, x, cp=10.0, cw=1.0))))
    assert r.worst_case_cost is None and r.gamma is None
    assert r.status is SolverStatus.OPTIMAL


def test_mean_plus_sigma_is_clipped_to_lmax() -> None:
    x = np.array([0.0, 0.0, 0.0, 100.0])
    r = reserve(Samples.from_arrays(x), cp=1.0, cw=1.0, lmax=100.0, method="mean+2sigma")
    assert np.mean(x) + 2 * np.std(x) > 100.0
    assert r.reserve_tokens == 100.0


@pytest.mark.parametrize(
    ("y", "xi", "expected"),
    [
        pytest.param(10.0, 15.0, 5 * 4.0, id="under-reserve-pays-cp"),
        pytest.param(10.0, 4.0, 6 * 1.0, id="over-reserve-pays-cw"),
        pytest.param(10.0, 10.0, 0.0, id="exact"),
    ],
)
def test_cost(y: float, xi: float, expected: float) -> None:
    assert cost(y, xi, cp=4.0, cw=1.0) == expected
    assert cost(y, np.array([xi]), cp=4.0, cw=1.0).tolist() == [expected]


@pytest.mark.parametrize("method", ["dro", "dro-lp"])
def test_dro_result_fields(method: str) -> None:
    s = Samples.from_arrays([100, 200, 300, 400, 800])
    paper = RadiusPolicy(kind="fraction", frac=0.15)
    r = reserve(History.of(s), cp=20.0, cw=1.0, lmax=1000.0, method=method, radius=paper)
    assert r.method == method
    assert r.eps == pytest.approx(0.15 * 360.0)
    assert r.radius is not None and r.radius.rule == "fraction"
    assert r.worst_case_cost is not None and r.worst_case_cost >= r.expected_cost
    assert r.gamma is not None and r.gamma >= 0
    assert r.status is SolverStatus.OPTIMAL
    assert r.solve_seconds >= 0


def test_methods_list_is_the_contract() -> None:
    assert set(METHODS) == {"dro", "dro-lp", "saa", "p90", "p95", "p99", "mean", "max", "mean+1sigma", "mean+2sigma"}


@pytest.mark.parametrize(
    ("raw", "mapped"),
    [
        pytest.param("kOptimal", SolverStatus.OPTIMAL, id="optimal"),
        pytest.param("kInfeasible", SolverStatus.INFEASIBLE, id="infeasible"),
        pytest.param("kUnboundedOrInfeasible", SolverStatus.ERROR, id="unbounded-or-infeasible"),
        pytest.param("kTimeLimit", SolverStatus.ERROR, id="time-limit"),
        pytest.param("kSolveError", SolverStatus.ERROR, id="solve-error"),
        pytest.param("kSomethingNew", SolverStatus.ERROR, id="unknown"),
    ],
)
def test_status_mapping(raw: str, mapped: SolverStatus) -> None:
    assert map_status(raw) is mapped


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        pytest.param({"cp": -1.0}, "cp", id="negative-cp"),
        pytest.param({"cw": -1.0}, "cw", id="negative-cw"),
        pytest.param({"cp": 0.0, "cw": 0.0}, "cp", id="both-costs-zero"),
        pytest.param({"cp": float("nan")}, "cp", id="nan-cp"),
        pytest.param({"lmax": 50.0}, "lmax", id="lmax-below-max-sample"),
        pytest.param({"lmax": 0.0}, "lmax", id="lmax-zero"),
        pytest.param({"method": "p50"}, "method", id="unknown-method"),
    ],
)
def test_reserve_rejects(kwargs: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"cp": 10.0, "cw": 1.0, "lmax": 1000.0, "method": "dro"}
    args.update(kwargs)
    with pytest.raises(InputError) as info:
        reserve(Samples.from_arrays([10.0, 60.0]), **args)  # type: ignore[arg-type]
    assert info.value.field == field


def test_lmax_error_suggests_the_fix() -> None:
    with pytest.raises(InputError) as info:
        reserve(Samples.from_arrays([10.0, 60.0]), cp=1.0, cw=1.0, lmax=50.0, method="p90")
    assert info.value.hint is not None and "60" in info.value.hint


def test_absolute_radius_is_used_verbatim() -> None:
    r = reserve(
        Samples.from_arrays([1.0, 2.0]), cp=1.0, cw=1.0, lmax=10.0, radius=RadiusPolicy(kind="absolute", eps=3.0)
    )
    assert r.eps == 3.0
