"""The joint planner's behaviour as a model: bad input names the field, infeasibility is a result, a larger rho
never lowers a reservation, removing a layout never improves the objective, an overwhelming class is refused when
refusing is cheaper, plans re-check feasibility, diffs, routing over two groups against a fine grid, and a HiGHS
failure reported as an error rather than as infeasibility."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from kvcore.errors import InputError
from kvcore.planner.instance import Instance, load_instance
from kvcore.planner.planmodel import PlanStatus
from kvcore.planner import compile_problem, plan
from kvcore.planner.continuous import solve_continuous
from kvcore.planner.exact import exact_objective, solve_exact
from kvcore.planner.synthetic import generate
from kvcore.history.samples import Samples

RNG = np.random.default_rng(7)
OUT = np.minimum(RNG.lognormal(5.0, 0.8, 200), 4000.0)


def _class(name: str = "chat", **kw: Any) -> dict[str, Any]:
    c: dict[str, Any] = dict(name=name, arrival_rate=1.0, input_tokens=600.0, lmax=4096.0, prefix_tokens=200.0,
                             cp=10.0, cw=1.0, history=Samples.from_arrays(OUT))
    c.update(kw)
    return c


def _group(name: str = "pool", **kw: Any) -> dict[str, Any]:
    g: dict[str, Any] = dict(name=name, gpu_type="A100-80GB", gpus=16, gpus_per_node=8, model="llama-70b",
                             layouts=[dict(tp=2, pp=1), dict(tp=4, pp=1), dict(tp=4, pp=2)])
    g.update(kw)
    return g


def _instance(classes: list[dict[str, Any]] | None = None, groups: list[dict[str, Any]] | None = None,
              **kw: Any) -> Instance:
    data: dict[str, Any] = dict(classes=classes if classes is not None else [_class()],
                                groups=groups if groups is not None else [_group()])
    data.update(kw)
    return load_instance(data)


BAD = [
    ("no-groups", dict(groups=[]), "groups"),
    ("no-classes", dict(classes=[]), "classes"),
    ("negative-rate", dict(classes=[_class(), _class("b", arrival_rate=-1.0)]), "classes[1].arrival_rate"),
    ("unknown-gpu", dict(groups=[_group(gpu_type="H100-80GB")]), "groups[0].gpu_type"),
    ("unknown-model", dict(groups=[_group(model="llama-405b")]), "groups[0].model"),
    ("bad-profile", dict(profiles=[dict(gpu_type="A100-80GB", model="llama-70b", tp=4, pp=1,
                                        kv_capacity_tokens=0.0)]), "profiles[0].kv_capacity_tokens"),
    ("negative-input", dict(classes=[_class(input_tokens=-3.0)]), "classes[0].input_tokens"),
    ("prefix-too-long", dict(classes=[_class(prefix_tokens=900.0)]), "classes[0]"),
    ("no-costs", dict(classes=[_class(cp=None, cw=None)]), "classes[0]"),
    ("sample-above-lmax", dict(classes=[_class(lmax=100.0)]), "classes[0].history"),
    ("duplicate-class", dict(classes=[_class(), _class()]), "classes[1].name"),
    ("zero-layouts", dict(groups=[_group(layouts=[])]), "groups[0].layouts"),
    ("extra-key", dict(groups=[_group(colour="red")]), "groups[0].colour"),
]


@pytest.mark.parametrize("name,change,field", BAD, ids=[b[0] for b in BAD])
def test_bad_input_names_the_field(name: str, change: dict[str, Any], field: str) -> None:
    data: dict[str, Any] = dict(classes=[_class()], groups=[_group()])
    data.update(change)
    with pytest.raises(InputError) as err:
        load_instance(data)
    assert err.value.field == field


def test_no_feasible_layout_is_a_result_with_a_reason() -> None:
    p = plan(_instance(groups=[_group(layouts=[dict(tp=1, pp=1)])]))
    assert p.status is PlanStatus.INFEASIBLE
    assert "weights" in p.reason and p.objective is None


def test_layout_needing_more_gpus_than_the_group_is_skipped() -> None:
    p = plan(_instance(groups=[_group(gpus=4, layouts=[dict(tp=4, pp=2), dict(tp=4, pp=1)])]))
    assert p.status is PlanStatus.FEASIBLE
    assert (p.groups[0].tp, p.groups[0].pp) == (4, 1)


RHOS = [(2.0, 5.0), (5.0, 10.0), (10.0, 50.0), (50.0, 100.0)]


@pytest.mark.slow
@pytest.mark.parametrize("lo,hi", RHOS, ids=[f"rho{a:g}-to-{b:g}" for a, b in RHOS])
def test_larger_rho_never_lowers_a_reservation(lo: float, hi: float) -> None:
    def reserves(rho: float) -> list[float]:
        inst = generate(3, 4, 150, seed=3, load=1.0)
        classes = [c.model_copy(update={"cp": rho}) for c in inst.classes]
        return [c.reserve_tokens for c in plan(inst.model_copy(update={"classes": tuple(classes)})).classes]

    for a, b in zip(reserves(lo), reserves(hi)):
        assert b >= a - 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2, 3], ids=lambda s: f"seed{s}")
def test_removing_a_config_never_improves_the_objective(seed: int) -> None:
    inst = generate(3, 5, 100, seed=seed)
    full = plan(inst).objective
    assert full is not None
    g = inst.groups[0]
    for j in range(len(g.layouts)):
        layouts = g.layouts[:j] + g.layouts[j + 1:]
        fewer = inst.model_copy(update={"groups": (g.model_copy(update={"layouts": layouts}),)})
        p = plan(fewer)
        if p.objective is not None:
            assert p.objective.total >= full.total * (1 - 1e-9)
            e = solve_exact(fewer)
            assert exact_objective(e) >= exact_objective(solve_exact(inst)) * (1 - 1e-9)


@pytest.mark.parametrize("c_rej,refused", [(1000.0, True), (1e6, False)], ids=["refusal-cheaper", "refusal-dearer"])
def test_overwhelming_class_is_refused_only_when_cheaper(c_rej: float, refused: bool) -> None:
    heavy = _class("flood", arrival_rate=200.0, input_tokens=3000.0, prefix_tokens=0.0)
    inst = _instance(classes=[_class(), heavy], costs=dict(c_rej=c_rej))
    p = plan(inst)
    assert p.status is PlanStatus.FEASIBLE
    by = {c.name: c for c in p.classes}
    # 200 req/s x 3000 tokens is far beyond every layout, so serving it is impossible: refusal is forced.
    assert by["flood"].admitted is False
    assert by["chat"].admitted is True
    # A class that fits but costs more to serve than c_rej is refused only when c_rej is cheaper.
    pricey = _class("pricey", arrival_rate=0.5, cp=1000.0)
    q = plan(_instance(classes=[_class(), pricey], costs=dict(c_rej=c_rej)))
    assert {c.name: c.admitted for c in q.classes}["pricey"] is (not refused)


def test_plan_rechecks_and_explains_itself() -> None:
    p = plan(_instance(classes=[_class(), _class("b", arrival_rate=2.0, prefix_tokens=0.0)]))
    assert p.status is PlanStatus.FEASIBLE
    assert p.objective is not None and p.objective.total == pytest.approx(
        p.objective.reservation + p.objective.configuration + p.objective.queueing + p.objective.rejection)
    for s in p.slack:
        assert s.stability_tokens_s >= -1e-6 and s.memory_tokens >= -1e-6
    for c in p.classes:
        assert sum(c.routing.values()) == pytest.approx(1.0)
        assert 0.0 <= c.reserve_tokens <= 4096.0
    again = plan(_instance(classes=[_class(), _class("b", arrival_rate=2.0, prefix_tokens=0.0)]), previous=p)
    assert again.diff is not None and again.diff.empty
    moved = plan(_instance(classes=[_class(cp=100.0), _class("b", arrival_rate=2.0, prefix_tokens=0.0)]), previous=p)
    assert moved.diff is not None and moved.diff.reservations


def test_prefix_caching_is_used_when_memory_is_free() -> None:
    p = plan(_instance())
    assert p.classes[0].prefix_fraction["pool"] == pytest.approx(1.0)


@pytest.mark.slow
def test_two_group_routing_matches_a_fine_grid() -> None:
    """With two groups and fixed layouts, BCD's objective is within grid resolution of brute force over pi."""
    groups = [_group("a", gpus=8, layouts=[dict(tp=4, pp=1)]), _group("b", gpus=4, layouts=[dict(tp=4, pp=1)])]
    classes = [_class("x", arrival_rate=1.5, input_tokens=2000.0, prefix_tokens=0.0),
               _class("y", arrival_rate=3.0, input_tokens=200.0, prefix_tokens=0.0, cp=2.0)]
    inst = _instance(classes=classes, groups=groups, costs=dict(c_slo=500.0))
    p = plan(inst)
    assert p.objective is not None
    prob = compile_problem(inst)
    a = np.ones(2, dtype=bool)
    best = np.inf
    grid = np.linspace(0.0, 1.0, 26)
    for p0, p1 in itertools.product(grid, grid):
        x = np.array([[p0, 1 - p0], [p1, 1 - p1]]) * prob.lam[:, None]
        r = solve_continuous(prob, (0, 0), a, x)
        if r.ok:
            best = min(best, r.value)
    fixed = p.objective.configuration
    assert p.objective.total - fixed <= best * (1 + 1e-6)


def test_solver_failure_is_an_error_not_infeasibility(monkeypatch: pytest.MonkeyPatch) -> None:
    """A HiGHS failure (not 'Infeasible') must not be read as infeasibility: every subproblem failing -> error."""
    import kvcore.planner.bcd as bcd
    from kvcore.planner.continuous import ContinuousResult

    def broken(prob: Any, z: Any, a: Any, x: Any, **kw: Any) -> ContinuousResult:
        return ContinuousResult(False, np.zeros(prob.n_classes), np.zeros((prob.n_classes, prob.n_groups)),
                                np.inf, np.inf, 0, "Time limit reached")

    monkeypatch.setattr(bcd, "solve_continuous", broken)
    p = plan(_instance())
    assert p.status is PlanStatus.ERROR
    assert "HiGHS failed" in p.reason


def test_idle_class_is_admitted_with_weights_that_sum_to_one() -> None:
    p = plan(_instance(classes=[_class(), _class("idle", arrival_rate=0.0)]))
    idle = {c.name: c for c in p.classes}["idle"]
    assert idle.admitted and sum(idle.routing.values()) == pytest.approx(1.0)
