"""Operator metrics (prometheus_client) on their own registry, served over HTTP by ``main``.

Every per-plan series carries two labels, ``namespace`` and ``name`` (the KVPlan's), so dashboards and alerts can
select and join on them the way kube-state-metrics labels objects.

| metric | type | labels (besides namespace, name) | meaning, unit |
|---|---|---|---|
| ``kvplan_build_info`` | info | version, python, kopf | 1, with the running versions |
| ``kvplan_replans_total`` | counter | | successful plans |
| ``kvplan_failures_total`` | counter | reason | failed reconcile attempts, by condition reason |
| ``kvplan_consecutive_failures`` | gauge | | failed attempts since the last successful plan |
| ``kvplan_solve_seconds`` | histogram | | planner wall time per reconcile, seconds |
| ``kvplan_objective`` | gauge | | planned objective, cost units per second |
| ``kvplan_layout_changes_total`` | counter | | re-layouts (rolling restarts) triggered |
| ``kvplan_layout_changes_last_hour`` | gauge | | re-layouts in the last hour, as the disruption budget counts them |
| ``kvplan_layout_change_budget_per_hour`` | gauge | | ``spec.replan.maxLayoutChangesPerHour`` |
| ``kvplan_last_successful_plan_timestamp_seconds`` | gauge | | Unix time of the last successful plan |
| ``kvplan_condition`` | gauge | type | 1 when the condition is True, 0 when False |
| ``kvplan_reservation_tokens`` | gauge | class | y_i, reserved output tokens per request |
| ``kvplan_radius_tokens`` | gauge | class | Wasserstein radius eps_i, output tokens |
| ``kvplan_class_admitted`` | gauge | class | a_i (1 admitted, 0 refused) |
| ``kvplan_group_tensor_parallel`` | gauge | group | TP of the group's layout (0 idle) |
| ``kvplan_group_pipeline_parallel`` | gauge | group | PP of the group's layout (0 idle) |
| ``kvplan_group_replicas`` | gauge | group | m_k, replicas |
| ``kvplan_group_utilisation`` | gauge | group | offered work / service rate, in [0, 1) |
| ``kvplan_routing_weight`` | gauge | class, group | pi_ik, share of class i routed to group k |
| ``kvplan_calibration_ratio`` | gauge | class, quantity | floored ratio realised / predicted of the plan in force (quantity ``preemptions``: per finished request; ``overflow``: share of requests above y_i), dimensionless, 1 = as predicted |
| ``kvplan_calibration_drifting`` | gauge | | classes whose calibration ratio is outside the tolerance (absent while nothing could be compared) |

Plus the standard ``process_*`` (CPU, memory, open fds, start time), ``python_info`` and ``python_gc_*``
collectors. A registry per operator (not the process-global one), so two operators in one test process never
collide. :meth:`Metrics.forget` removes every series of a deleted KVPlan; a class or group that leaves a plan loses
its series at the next :meth:`Metrics.plan_outputs`, and a class no longer compared its calibration series at the next
:meth:`Metrics.calibration`. Calibration adds at most 2 series per class (512 at the CRD's 256 classes), fewer than
``kvplan_routing_weight``.
"""

from __future__ import annotations

import platform
import time
from importlib import metadata
from typing import Any, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, start_http_server
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

PLAN = ("namespace", "name")
CONDITIONS = ("Ready", "Planned", "Applied", "Degraded")


def split_key(kvplan: str) -> tuple[str, str]:
    """``"namespace/name"`` -> ``(namespace, name)``; a bare name has namespace ``""``."""
    namespace, _, name = kvplan.rpartition("/")
    return namespace, name


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        reg = self.registry
        self.build = Info("kvplan_build", "Versions of the running operator.", registry=reg)
        import kvcore

        self.build.info({"version": kvcore.__version__, "python": platform.python_version(),
                         "kopf": _version("kopf")})
        self.replans = Counter("kvplan_replans", "Successful plans.", PLAN, registry=reg)
        self.failures = Counter("kvplan_failures", "Failed reconcile attempts by reason.", (*PLAN, "reason"),
                                registry=reg)
        self.consecutive_failures = Gauge("kvplan_consecutive_failures",
                                          "Failed reconcile attempts since the last successful plan.", PLAN,
                                          registry=reg)
        self.solve = Histogram("kvplan_solve_seconds", "Planner wall time per reconcile, seconds.", PLAN,
                               buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60), registry=reg)
        self.objective = Gauge("kvplan_objective", "Planned objective, cost units per second.", PLAN, registry=reg)
        self.layout_changes = Counter("kvplan_layout_changes", "Re-layouts (rolling restarts) triggered.", PLAN,
                                      registry=reg)
        self.layout_changes_last_hour = Gauge("kvplan_layout_changes_last_hour",
                                              "Re-layouts in the last hour, as the disruption budget counts them.",
                                              PLAN, registry=reg)
        self.layout_budget = Gauge("kvplan_layout_change_budget_per_hour",
                                   "The disruption budget: spec.replan.maxLayoutChangesPerHour.", PLAN, registry=reg)
        self.last_success = Gauge("kvplan_last_successful_plan_timestamp_seconds",
                                  "Unix time of the last successful plan, seconds.", PLAN, registry=reg)
        self.condition_state = Gauge("kvplan_condition", "1 when the KVPlan's condition is True, 0 when False.",
                                     (*PLAN, "type"), registry=reg)
        self.reservation = Gauge("kvplan_reservation_tokens", "Reserved output tokens per request (y_i).",
                                 (*PLAN, "class"), registry=reg)
        self.radius = Gauge("kvplan_radius_tokens", "Wasserstein radius of the class's reservation, output tokens.",
                            (*PLAN, "class"), registry=reg)
        self.admitted = Gauge("kvplan_class_admitted", "1 when the class is admitted, 0 when refused.",
                              (*PLAN, "class"), registry=reg)
        self.tp = Gauge("kvplan_group_tensor_parallel", "Tensor-parallel size of the group's layout (0 idle).",
                        (*PLAN, "group"), registry=reg)
        self.pp = Gauge("kvplan_group_pipeline_parallel", "Pipeline-parallel size of the group's layout (0 idle).",
                        (*PLAN, "group"), registry=reg)
        self.replicas = Gauge("kvplan_group_replicas", "Planned replicas of the group.", (*PLAN, "group"),
                              registry=reg)
        self.utilisation = Gauge("kvplan_group_utilisation", "Offered work / service rate of the group, in [0, 1).",
                                 (*PLAN, "group"), registry=reg)
        self.routing = Gauge("kvplan_routing_weight", "Share of the class's requests routed to the group.",
                             (*PLAN, "class", "group"), registry=reg)
        self.calibration_ratio = Gauge("kvplan_calibration_ratio", "Plan calibration: realised / predicted of the "
                                       "plan in force, floored (1 = as predicted).", (*PLAN, "class", "quantity"),
                                       registry=reg)
        self.calibration_drifting = Gauge("kvplan_calibration_drifting", "Classes whose calibration ratio is outside "
                                          "the tolerance.", PLAN, registry=reg)
        self._outputs: dict[tuple[str, str], dict[Gauge, set[tuple[str, ...]]]] = {}
        self._calibrated: dict[tuple[str, str], set[tuple[str, ...]]] = {}

    # -- what the reconcile reports ----------------------------------------------------------------------------------
    def planned(self, kvplan: str, plan: Any, solve_seconds: float, *, relayout: bool,
                now: float | None = None) -> None:
        """A successful plan for ``"namespace/name"``: counters, solve time, objective, the plan's outputs and the
        last-success timestamp (``now``, Unix seconds; default the wall clock)."""
        namespace, name = split_key(kvplan)
        self.replans.labels(namespace, name).inc()
        self.solve.labels(namespace, name).observe(solve_seconds)
        if plan.objective is not None:
            self.objective.labels(namespace, name).set(plan.objective.total)
        if relayout:
            self.layout_changes.labels(namespace, name).inc()
        self.consecutive_failures.labels(namespace, name).set(0)
        self.last_success.labels(namespace, name).set(time.time() if now is None else now)
        self.plan_outputs(namespace, name, plan)

    def relayout(self, kvplan: str) -> None:
        """A re-layout was attempted for ``"namespace/name"`` outside :meth:`planned` (the apply then failed)."""
        self.layout_changes.labels(*split_key(kvplan)).inc()

    def failure(self, kvplan: str, reason: str) -> None:
        """A failed attempt for ``"namespace/name"`` with its condition reason."""
        namespace, name = split_key(kvplan)
        self.failures.labels(namespace, name, reason).inc()
        self.consecutive_failures.labels(namespace, name).inc()

    def conditions(self, namespace: str, name: str, states: dict[str, bool]) -> None:
        """The KVPlan's conditions, type -> True/False."""
        for kind, state in states.items():
            self.condition_state.labels(namespace, name, kind).set(1 if state else 0)

    def disruption(self, namespace: str, name: str, changes_last_hour: int, budget_per_hour: int) -> None:
        """Re-layouts in the last hour and the budget they count against."""
        self.layout_changes_last_hour.labels(namespace, name).set(changes_last_hour)
        self.layout_budget.labels(namespace, name).set(budget_per_hour)

    def plan_outputs(self, namespace: str, name: str, plan: Any) -> None:
        """Set the output gauges from a kvcore ``Plan``; series of classes/groups no longer planned are removed."""
        seen: dict[Gauge, set[tuple[str, ...]]] = {}

        def put(gauge: Gauge, labels: tuple[str, ...], value: float) -> None:
            gauge.labels(namespace, name, *labels).set(value)
            seen.setdefault(gauge, set()).add(labels)

        for cls in plan.classes:
            put(self.reservation, (cls.name,), cls.reserve_tokens)
            put(self.admitted, (cls.name,), 1 if cls.admitted else 0)
            if cls.radius is not None:
                put(self.radius, (cls.name,), cls.radius.eps)
            for group, weight in cls.routing.items():
                put(self.routing, (cls.name, group), weight)
        for grp in plan.groups:
            put(self.tp, (grp.name,), grp.tp)
            put(self.pp, (grp.name,), grp.pp)
            put(self.replicas, (grp.name,), grp.replicas)
            put(self.utilisation, (grp.name,), grp.utilisation)
        previous = self._outputs.get((namespace, name), {})
        for gauge, labelsets in previous.items():
            for labels in labelsets - seen.get(gauge, set()):
                gauge.remove(namespace, name, *labels)
        self._outputs[(namespace, name)] = seen

    def calibration(self, namespace: str, name: str, verdicts: Any) -> None:
        """Plan calibration: per class and quantity the floored ratio (only those compared), and how many classes
        drift; series of classes no longer compared are removed, and the drifting count while none is."""
        seen: set[tuple[str, ...]] = set()
        drifting, compared = 0, 0
        for cls, per in verdicts.items():
            ratios = {q: v for q, v in per.items() if v.ratio is not None}
            compared += bool(ratios)
            drifting += any(v.drifting for v in ratios.values())
            for quantity, v in ratios.items():
                self.calibration_ratio.labels(namespace, name, cls, quantity).set(v.ratio)
                seen.add((cls, quantity))
        for labels in self._calibrated.get((namespace, name), set()) - seen:
            self.calibration_ratio.remove(namespace, name, *labels)
        self._calibrated[(namespace, name)] = seen
        if compared:
            self.calibration_drifting.labels(namespace, name).set(drifting)
        elif (namespace, name) in _label_sets(self.calibration_drifting):
            self.calibration_drifting.remove(namespace, name)

    def forget(self, namespace: str, name: str) -> None:
        """Remove every series of KVPlan ``namespace/name`` (it was deleted)."""
        self._outputs.pop((namespace, name), None)
        self._calibrated.pop((namespace, name), None)
        for metric in self._plan_metrics():
            for labels in _label_sets(metric):
                if labels[:2] == (namespace, name):
                    metric.remove(*labels)

    def _plan_metrics(self) -> Iterable[Any]:
        return (self.replans, self.failures, self.consecutive_failures, self.solve, self.objective,
                self.layout_changes, self.layout_changes_last_hour, self.layout_budget, self.last_success,
                self.condition_state, self.reservation, self.radius, self.admitted, self.tp, self.pp,
                self.replicas, self.utilisation, self.routing, self.calibration_ratio, self.calibration_drifting)

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Expose ``/metrics`` on ``port`` (a daemon thread)."""
        start_http_server(port, addr=addr, registry=self.registry)


def _label_sets(metric: Any) -> list[tuple[str, ...]]:
    """The label values of every child of a labelled metric (prometheus_client keeps them in ``_metrics``)."""
    with metric._lock:
        return list(metric._metrics.keys())
