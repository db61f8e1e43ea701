"""The chart's monitoring kit, rendered by the project's helm and checked by Debian's promtool.

- The PrometheusRule (``prometheusRule.enabled=true``) at its default values passes ``promtool check rules`` and the
  unit tests in ``tests/e2e/data/kvplan-alerts.test.yml`` (``promtool test rules``): not Ready, Degraded for longer
  than the threshold, stale plan, repeated re-plan failures, layout churn near the disruption budget, calibration
  drift, operator absent,
  each firing for the KVPlan that should and not for the one that should not, with the rendered annotations.
- A threshold value reaches the rule; a bad value is refused by the values schema, naming the key.
- Every rule's expression reads only metrics the operator exports.
- The dashboard ConfigMap carries kube-prometheus-stack's sidecar label and exactly the dashboard file.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvplan_dev.promql import exported_names, rule_queries, unknown_names

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "kvplan-operator"
TESTS = Path(__file__).resolve().parent / "data" / "kvplan-alerts.test.yml"


def render(tools: Any, template: str, *sets: str) -> dict[str, Any]:
    argv = [str(tools.helm), "template", "r", str(CHART), "-s", f"templates/{template}"]
    for item in sets:
        argv += ["--set", item]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return dict(yaml.safe_load(done.stdout))


def promtool(tools: Any, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(tools.promtool), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_rules_pass_promtool_unit_tests(tools: Any, tmp_path: Path) -> None:
    rule = render(tools, "prometheusrule.yaml", "prometheusRule.enabled=true")
    assert rule["kind"] == "PrometheusRule"
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    shutil.copy(TESTS, tmp_path / TESTS.name)
    checked = promtool(tools, "check", "rules", "rules.yml", cwd=tmp_path)
    assert checked.returncode == 0 and "SUCCESS: 8 rules found" in checked.stdout, checked.stdout + checked.stderr
    tested = promtool(tools, "test", "rules", TESTS.name, cwd=tmp_path)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def test_promtool_unit_tests_can_fail(tools: Any, tmp_path: Path) -> None:
    """The same tests against rules whose Degraded threshold moved to 40m must fail (the 32m expectation breaks)."""
    rule = render(tools, "prometheusrule.yaml", "prometheusRule.enabled=true", "prometheusRule.degradedFor=40m")
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    shutil.copy(TESTS, tmp_path / TESTS.name)
    tested = promtool(tools, "test", "rules", TESTS.name, cwd=tmp_path)
    assert tested.returncode != 0 and "KVPlanDegraded" in tested.stdout + tested.stderr


def test_thresholds_come_from_values(tools: Any) -> None:
    rule = render(tools, "prometheusrule.yaml", "prometheusRule.enabled=true", "prometheusRule.staleAfterSeconds=600",
                  "prometheusRule.consecutiveFailures=5", "prometheusRule.labels.release=kps")
    rules = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}
    assert rules["KVPlanStale"]["expr"].endswith("> 600")
    assert rules["KVPlanReplanFailing"]["expr"] == "kvplan_consecutive_failures >= 5"
    assert rule["metadata"]["labels"]["release"] == "kps"


@pytest.mark.parametrize(("setting", "key"), [("prometheusRule.layoutChurnRatio=2", "/prometheusRule/layoutChurnRatio"),
                                              ("prometheusRule.degradedFor=soon", "/prometheusRule/degradedFor")])
def test_bad_threshold_is_refused(tools: Any, setting: str, key: str) -> None:
    done = subprocess.run([str(tools.helm), "template", "r", str(CHART), "--set", "prometheusRule.enabled=true",
                           "--set", setting], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and key in done.stderr, done.stderr


def test_rules_read_exported_metrics_only(tools: Any) -> None:
    rule = render(tools, "prometheusrule.yaml", "prometheusRule.enabled=true")
    assert unknown_names(rule_queries(rule["spec"]["groups"]), exported_names()) == []


def test_dashboard_configmap(tools: Any) -> None:
    cm = render(tools, "dashboard.yaml", "grafanaDashboard.enabled=true", "grafanaDashboard.namespace=monitoring")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == "monitoring"
    shipped = json.loads((CHART / "files" / "dashboards" / "kvplan-operator.json").read_text())
    assert json.loads(cm["data"]["kvplan-operator.json"]) == shipped
