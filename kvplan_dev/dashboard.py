"""The Grafana dashboard for the operator, built with grafanalib (never hand-written JSON).

``make dashboard`` (``python -m kvplan_dev.dashboard``) writes ``charts/kvplan-operator/files/dashboards/
kvplan-operator.json``; the chart ships it in a ConfigMap labelled ``grafana_dashboard: "1"``, which
kube-prometheus-stack's Grafana sidecar loads. ``tests/unit/project/test_dashboard.py`` checks that the file is what this
module builds and that every panel's PromQL names only metrics the operator exports.

Variables: the Prometheus data source, the KVPlan ``namespace`` and ``name`` (both multi-select, from
``kvplan_condition``). Rows: health, planning, the plan's outputs, disruption, the operator process.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from grafanalib import core as g
from grafanalib._gen import DashboardEncoder

OUT = Path(__file__).resolve().parent.parent / "charts" / "kvplan-operator" / "files" / "dashboards" / \
    "kvplan-operator.json"
UID = "kvplan-operator"
DS = "${datasource}"
SEL = 'namespace=~"$namespace", name=~"$name"'
"""The label selector every per-plan query carries."""
WIDTH = 24


def _target(expr: str, legend: str, ref: str = "A") -> g.Target:
    return g.Target(expr=expr, legendFormat=legend, refId=ref, datasource=DS)


def _series(title: str, targets: list[tuple[str, str]], unit: str, pos: tuple[int, int, int, int],
            description: str, *, minimum: float | None = None) -> g.TimeSeries:
    x, y, w, h = pos
    return g.TimeSeries(
        title=title, description=description, dataSource=DS, unit=unit, gridPos=g.GridPos(h=h, w=w, x=x, y=y),
        targets=[_target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(targets)],
        legendDisplayMode="table", legendPlacement="right", legendCalcs=["lastNotNull", "max"],
        valueMin=minimum, tooltipMode="multi",
    )


def _stat(title: str, expr: str, legend: str, unit: str, pos: tuple[int, int, int, int], description: str,
          mappings: list[dict[str, object]] | None = None) -> g.Stat:
    x, y, w, h = pos
    return g.Stat(title=title, description=description, dataSource=DS, format=unit,
                  gridPos=g.GridPos(h=h, w=w, x=x, y=y), targets=[_target(expr, legend)], reduceCalc="lastNotNull",
                  mappings=mappings or [], graphMode="none", textMode="value_and_name")


def _row(title: str, y: int) -> g.RowPanel:
    return g.RowPanel(title=title, gridPos=g.GridPos(h=1, w=WIDTH, x=0, y=y))


def panels() -> list[g.Panel]:
    """Every panel, top to bottom."""
    plan = "{{namespace}}/{{name}}"
    yes_no = [{"type": "value", "options": {"0": {"text": "False", "color": "red"},
                                              "1": {"text": "True", "color": "green"}}}]
    return [
        _row("Health", 0),
        _stat("Ready", f'kvplan_condition{{type="Ready", {SEL}}}', plan, "none", (0, 1, 6, 4),
              "Ready condition per KVPlan (1 True, 0 False).", yes_no),
        _stat("Degraded", f'kvplan_condition{{type="Degraded", {SEL}}}', plan, "none", (6, 1, 6, 4),
              "Degraded: the last good plan is in force but could not be refreshed.", yes_no),
        _stat("Since last successful plan", f"time() - kvplan_last_successful_plan_timestamp_seconds{{{SEL}}}", plan,
              "s", (12, 1, 6, 4), "Seconds since the last successful plan (re-plan interval 5m by default)."),
        _stat("Failures in a row", f"kvplan_consecutive_failures{{{SEL}}}", plan, "none", (18, 1, 6, 4),
              "Failed reconciles since the last success."),
        _row("Planning", 5),
        _series("Re-plans and failures", [
            (f"sum by (namespace, name) (rate(kvplan_replans_total{{{SEL}}}[$__rate_interval]))", plan + " ok"),
            (f"sum by (namespace, name, reason) (rate(kvplan_failures_total{{{SEL}}}[$__rate_interval]))",
             plan + " {{reason}}"),
        ], "ops", (0, 6, 12, 8), "Successful plans and failed attempts (by condition reason) per second.", minimum=0),
        _series("Solve time", [
            (f"histogram_quantile(0.5, sum by (le, namespace, name) "
             f"(rate(kvplan_solve_seconds_bucket{{{SEL}}}[$__rate_interval])))", plan + " p50"),
            (f"histogram_quantile(0.95, sum by (le, namespace, name) "
             f"(rate(kvplan_solve_seconds_bucket{{{SEL}}}[$__rate_interval])))", plan + " p95"),
        ], "s", (12, 6, 12, 8), "Planner wall time per reconcile.", minimum=0),
        _series("Objective", [(f"kvplan_objective{{{SEL}}}", plan)], "none", (0, 14, 12, 8),
                "Planned objective, cost units per second (lower is better)."),
        _series("Class admission", [(f"kvplan_class_admitted{{{SEL}}}", plan + " {{class}}")], "none",
                (12, 14, 12, 8), "1 admitted, 0 refused, per class.", minimum=0),
        _row("Plan outputs", 22),
        _series("Reservation per class", [(f"kvplan_reservation_tokens{{{SEL}}}", plan + " {{class}}")], "none",
                (0, 23, 12, 8), "Reserved output tokens per request (y_i).", minimum=0),
        _series("Radius per class", [(f"kvplan_radius_tokens{{{SEL}}}", plan + " {{class}}")], "none",
                (12, 23, 12, 8), "Wasserstein radius eps_i of the class's reservation, output tokens.", minimum=0),
        _series("Layout per group (TP x PP)", [
            (f"kvplan_group_tensor_parallel{{{SEL}}}", plan + " {{group}} TP"),
            (f"kvplan_group_pipeline_parallel{{{SEL}}}", plan + " {{group}} PP"),
        ], "none", (0, 31, 8, 8), "Tensor- and pipeline-parallel size of each group's layout.", minimum=0),
        _series("Replicas per group", [(f"kvplan_group_replicas{{{SEL}}}", plan + " {{group}}")], "none",
                (8, 31, 8, 8), "Planned replicas per group.", minimum=0),
        _series("Utilisation per group", [(f"kvplan_group_utilisation{{{SEL}}}", plan + " {{group}}")],
                "percentunit", (16, 31, 8, 8), "Offered work / service rate of each group.", minimum=0),
        _series("Routing weight (class -> group)", [
            (f"kvplan_routing_weight{{{SEL}}}", plan + " {{class}} -> {{group}}"),
        ], "percentunit", (0, 39, 24, 8), "Share of each class's requests routed to each group.", minimum=0),
        _row("Disruption", 47),
        _series("Re-layouts in the last hour vs budget", [
            (f"kvplan_layout_changes_last_hour{{{SEL}}}", plan + " used"),
            (f"kvplan_layout_change_budget_per_hour{{{SEL}}}", plan + " budget"),
        ], "none", (0, 48, 12, 8), "Layout changes counted by the disruption budget, and the budget.", minimum=0),
        _series("Re-layouts triggered", [
            (f"sum by (namespace, name) (increase(kvplan_layout_changes_total{{{SEL}}}[1h]))", plan),
        ], "none", (12, 48, 12, 8), "Rolling restarts triggered by layout changes, per hour.", minimum=0),
        _row("Operator", 56),
        _series("Operator CPU", [("rate(process_cpu_seconds_total{job=~\"$job\"}[$__rate_interval])",
                                  "{{pod}}")], "percentunit", (0, 57, 8, 8), "CPU of the operator process.",
                minimum=0),
        _series("Operator memory", [("process_resident_memory_bytes{job=~\"$job\"}", "{{pod}}")], "bytes",
                (8, 57, 8, 8), "Resident memory of the operator process.", minimum=0),
        _stat("Operator version", "kvplan_build_info", "{{version}} (Python {{python}}, kopf {{kopf}})", "none",
              (16, 57, 8, 8), "kvplan_build_info of every running operator."),
    ]


def dashboard() -> g.Dashboard:
    """The whole dashboard."""
    datasource = g.Template(name="datasource", type="datasource", query="prometheus", label="Data source",
                            default="Prometheus")
    namespace = g.Template(name="namespace", label="Namespace", dataSource=DS,
                           query="label_values(kvplan_condition, namespace)", includeAll=True, multi=True,
                           default="$__all", refresh=2, allValue=".*")
    name = g.Template(name="name", label="KVPlan", dataSource=DS,
                      query='label_values(kvplan_condition{namespace=~"$namespace"}, name)', includeAll=True,
                      multi=True, default="$__all", refresh=2, allValue=".*")
    job = g.Template(name="job", label="Scrape job", dataSource=DS, query="label_values(kvplan_build_info, job)",
                     includeAll=True, multi=True, default="$__all", refresh=2, allValue=".*")
    return g.Dashboard(
        title="kvplan operator", uid=UID, description="KVPlan health, planning, the plan's outputs and disruption "
        "(metrics from operator/record/metrics.py).", tags=["kvplan", "vllm"], timezone="utc", refresh="1m",
        time=g.Time("now-6h", "now"), templating=g.Templating([datasource, namespace, name, job]),
        panels=panels(), editable=False,
    ).auto_panel_ids()


def render() -> str:
    """The dashboard as the JSON text the chart ships (sorted keys, stable across runs)."""
    return json.dumps(dashboard().to_json_data(), cls=DashboardEncoder, sort_keys=True, indent=2) + "\n"


def expressions(document: dict[str, object]) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target in a dashboard JSON document, plus the variables' queries."""
    found: list[tuple[str, str]] = []
    for panel in document.get("panels", []):  # type: ignore[union-attr]
        for target in panel.get("targets", []) or []:
            found.append((panel["title"], target["expr"]))
    for variable in document.get("templating", {}).get("list", []):  # type: ignore[union-attr]
        if variable.get("type") == "query":
            found.append((f"${variable['name']}", variable["query"]))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Write the dashboard (``--check``: exit 1 if the file differs from what would be written)."""
    parser = argparse.ArgumentParser(prog="python -m kvplan_dev.dashboard", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        same = OUT.exists() and OUT.read_text() == text
        if not same:
            print(f"{OUT}: out of date; run `make dashboard`", file=sys.stderr)
        return 0 if same else 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(text)} bytes, {len(expressions(json.loads(text)))} queries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
