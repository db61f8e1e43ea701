"""Operator metrics (prometheus_client) on their own registry, served over HTTP by ``main``.

- ``kvplan_replans_total{kvplan}``: successful plans;
- ``kvplan_failures_total{kvplan,reason}``: failed attempts by condition reason;
- ``kvplan_solve_seconds{kvplan}``: planner wall time per reconcile (histogram);
- ``kvplan_objective{kvplan}``: planned objective, cost units per second;
- ``kvplan_layout_changes_total{kvplan}``: re-layouts (rolling restarts) triggered.

A registry per operator (not the process-global one), so two operators in one test process never collide.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.replans = Counter("kvplan_replans", "Successful plans.", ["kvplan"], registry=self.registry)
        self.failures = Counter("kvplan_failures", "Failed reconcile attempts by reason.", ["kvplan", "reason"],
                                registry=self.registry)
        self.solve = Histogram("kvplan_solve_seconds", "Planner wall time per reconcile, seconds.", ["kvplan"],
                               buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60), registry=self.registry)
        self.objective = Gauge("kvplan_objective", "Planned objective, cost units per second.", ["kvplan"],
                               registry=self.registry)
        self.layout_changes = Counter("kvplan_layout_changes", "Re-layouts (rolling restarts) triggered.",
                                      ["kvplan"], registry=self.registry)

    def planned(self, kvplan: str, plan: Any, solve_seconds: float, *, relayout: bool) -> None:
        self.replans.labels(kvplan).inc()
        self.solve.labels(kvplan).observe(solve_seconds)
        if plan.objective is not None:
            self.objective.labels(kvplan).set(plan.objective.total)
        if relayout:
            self.layout_changes.labels(kvplan).inc()

    def failure(self, kvplan: str, reason: str) -> None:
        self.failures.labels(kvplan, reason).inc()

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Expose ``/metrics`` on ``port`` (a daemon thread)."""
        start_http_server(port, addr=addr, registry=self.registry)
