"""Turn a solved :class:`~kvcore.planner.state.State` into a :class:`~kvcore.planner.planmodel.Plan` (and diff plans)."""

from __future__ import annotations

from kvcore.planner.planmodel import (
    ClassPlan,
    GroupPlan,
    GroupSlack,
    ObjectiveTerms,
    Plan,
    PlanDiff,
    PlanStatus,
)
from kvcore.planner.problem import Problem
from kvcore.planner.state import State, config_of, evaluate


def build_plan(prob: Problem, st: State, *, status: PlanStatus, reason: str, raw_status: str, method: str,
               iterations: int, seconds: float, previous: Plan | None) -> Plan:
    ev = evaluate(prob, st)
    if not ev.feasible:
        status, reason = PlanStatus.ERROR, f"re-check after the solve failed: {ev.violation}"
    groups: list[GroupPlan] = []
    slack: list[GroupSlack] = []
    for k, g in enumerate(prob.groups):
        cfg = config_of(prob, st.z, k)
        ge = ev.groups[k]
        if cfg is None:
            groups.append(GroupPlan(name=g.name, tp=0, pp=0, replicas=0, gpus_per_replica=0, kv_capacity_tokens=0.0,
                                    throughput_tokens_s=0.0, utilisation=0.0))
            slack.append(GroupSlack(group=g.name, stability_tokens_s=0.0, memory_tokens=0.0))
            continue
        groups.append(GroupPlan(
            name=g.name, tp=cfg.tp, pp=cfg.pp, replicas=cfg.replicas, gpus_per_replica=cfg.tp * cfg.pp,
            kv_capacity_tokens=cfg.kv_per_replica, throughput_tokens_s=cfg.thr_per_replica,
            utilisation=ge.load / cfg.mu, memory_utilisation=ge.memory_used / cfg.memory if cfg.memory else 0.0,
            waiting_seconds=ge.waiting, arrival_rate=ge.arrivals, phi=cfg.phi))
        slack.append(GroupSlack(group=g.name, stability_tokens_s=prob.umax * cfg.mu - ge.load,
                                memory_tokens=cfg.memory - ge.memory_used))
    classes: list[ClassPlan] = []
    for i, name in enumerate(prob.class_names):
        lam = float(prob.lam[i])
        adm = bool(st.a[i])
        routing = {g.name: (float(st.x[i, k]) / lam if adm and lam > 0 else 0.0) for k, g in enumerate(prob.groups)}
        if adm and lam <= 0:  # no traffic yet: route as the service rates would, so the weights still sum to 1
            mus = [cfg.mu if (cfg := config_of(prob, st.z, k)) is not None else 0.0 for k in range(prob.n_groups)]
            total_mu = sum(mus)
            routing = {g.name: (mu / total_mu if total_mu > 0 else 0.0) for g, mu in zip(prob.groups, mus)}
        classes.append(ClassPlan(
            name=name, reserve_tokens=float(st.y[i]), radius=prob.radii[i], admitted=adm, routing=routing,
            prefix_fraction={g.name: float(st.delta[i, k]) for k, g in enumerate(prob.groups)},
            worst_case_cost=prob.curves[i].value(float(st.y[i])), cp=float(prob.cp[i]), cw=float(prob.cw[i])))
    terms = ObjectiveTerms(reservation=ev.reservation, configuration=ev.configuration, queueing=ev.queueing,
                           rejection=ev.rejection, total=ev.total)
    plan = Plan(status=status, reason=reason, raw_status=raw_status, method=method, groups=groups, classes=classes,
                objective=terms, slack=slack, iterations=iterations, solve_seconds=seconds)
    if previous is not None:
        plan = plan.model_copy(update={"diff": diff_plans(previous, plan)})
    return plan


def diff_plans(old: Plan, new: Plan) -> PlanDiff:
    """What changed from ``old`` to ``new`` (groups and classes matched by name)."""
    og = {g.name: g for g in old.groups}
    oc = {c.name: c for c in old.classes}
    d = PlanDiff()
    for g in new.groups:
        p = og.get(g.name)
        if p is None:
            d.layouts.append(f"{g.name}: new -> {g.tp}x{g.pp}")
            continue
        if (p.tp, p.pp) != (g.tp, g.pp):
            d.layouts.append(f"{g.name}: {p.tp}x{p.pp} -> {g.tp}x{g.pp}")
        if p.replicas != g.replicas:
            d.replicas.append(f"{g.name}: {p.replicas} -> {g.replicas}")
    for c in new.classes:
        q = oc.get(c.name)
        if q is None:
            d.admission.append(f"{c.name}: new -> {'admitted' if c.admitted else 'refused'}")
            continue
        if abs(q.reserve_tokens - c.reserve_tokens) > 0.5:
            d.reservations.append(f"{c.name}: {q.reserve_tokens:.0f} -> {c.reserve_tokens:.0f}")
        if q.admitted != c.admitted:
            d.admission.append(f"{c.name}: {'admitted' if q.admitted else 'refused'} -> "
                               f"{'admitted' if c.admitted else 'refused'}")
        for gname, w in c.routing.items():
            w0 = q.routing.get(gname, 0.0)
            if abs(w - w0) > 1e-3:
                d.routing.append(f"{c.name}->{gname}: {w0:.3f} -> {w:.3f}")
    return d


def infeasible_plan(prob: Problem | None, reason: str, *, seconds: float, raw_status: str = "", method: str = "bcd"
                    ) -> Plan:
    return Plan(status=PlanStatus.INFEASIBLE, reason=reason, raw_status=raw_status, method=method,
                solve_seconds=seconds)
