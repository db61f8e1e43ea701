"""Which metric names a PromQL expression reads, and which names the operator really exports; used by the tests
that check the Grafana dashboard and the PrometheusRule against ``operator/record/metrics.py``.

The extraction is deliberately simple and conservative: it removes string literals, label matchers ``{...}``, range
selectors ``[...]``, grouping clauses ``by (...)`` / ``without (...)`` / ``on (...)`` / ``ignoring (...)``, Grafana
variables and numbers, then keeps every identifier that is not a function call or a PromQL keyword.
"""

from __future__ import annotations

import re
from typing import Any

KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
                      "bool", "offset", "inf", "nan"})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_VARIABLE = re.compile(r"\$\{?\w+\}?")
_IDENT = re.compile(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """Metric names read by ``expr`` (``label_values(metric{...}, label)`` counts its metric)."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    text = _VARIABLE.sub("", text)
    if text.strip().startswith("label_values("):
        text = text.strip()[len("label_values("):].split(",", 1)[0]
    names = set()
    for match in _IDENT.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in KEYWORDS:
            continue
        names.add(name)
    return names


def exported_names() -> set[str]:
    """Every sample name the operator's :class:`Metrics` exposes once each of its methods has been used."""
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client import generate_latest

    from kvcore import ClassPlan, GroupPlan, ObjectiveTerms, Plan, PlanStatus
    from kvcore import RadiusChoice
    from kvplan_operator.record.metrics import Metrics

    metrics = Metrics()
    plan = Plan(status=PlanStatus.FEASIBLE, reason="",
                objective=ObjectiveTerms(reservation=1, configuration=1, queueing=1, rejection=0, total=3),
                classes=[ClassPlan(name="c", reserve_tokens=1, admitted=True, routing={"g": 1.0},
                                   radius=RadiusChoice(eps=1, rule="fraction", reason="x"))],
                groups=[GroupPlan(name="g", tp=1, pp=1, replicas=1, gpus_per_replica=1, kv_capacity_tokens=1,
                                  throughput_tokens_s=1, utilisation=0.5)])
    metrics.planned("ns/p", plan, 0.1, relayout=True)
    metrics.failure("ns/p", "ApplyFailed")
    metrics.conditions("ns", "p", {"Ready": True})
    metrics.disruption("ns", "p", changes_last_hour=1, budget_per_hour=2)
    from kvcore import CalibrationVerdict

    metrics.calibration("ns", "p", {"c": {"preemptions": CalibrationVerdict(0.1, 0.1, 1.0, False)}})
    names: set[str] = set()
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        names |= {sample.name for sample in family.samples}
    return names


def unknown_names(queries: list[tuple[str, str]], exported: set[str]) -> list[str]:
    """``where: name`` for every metric a query reads that is not exported."""
    return [f"{where}: {name}" for where, expr in queries for name in sorted(metric_names(expr))
            if name not in exported]


def rule_queries(groups: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(alert or record name, expr) of every rule in PrometheusRule/rule-file groups."""
    return [(rule.get("alert") or rule.get("record"), rule["expr"]) for group in groups for rule in group["rules"]]
