"""The memory of reconciles at the caps stays under the chart's memory limit (issue 26, item 4): three KVPlans
reconciled at once in a fresh process (as kopf's workers would), each reading the caps answer -- 1,024 values of
the class label x 64 buckets x 48 windows = 65,536 series, 57 MiB -- from a scripted Prometheus on loopback with the
real client, then the real planner; the child's peak RSS (VmHWM, exact, not a timing) must stay under
``resources.limits.memory`` of charts/kvplan-operator/values.yaml. 16 classes plan in full; 256 classes (the CRD's
most) hold more history than the planner accepts and stop at that bound (TooManySeries) before building it.
Before the streaming reader one such answer took a process from 160 to 658 MiB and three peaked at 1,585 MiB."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kvplan_dev.prom_caps import CapsPrometheus

ROOT = Path(__file__).resolve().parents[3]
CHILD = Path(__file__).resolve().parent / "memory_child.py"


def chart_limit_mib() -> float:
    raw = str(yaml.safe_load((ROOT / "charts/kvplan-operator/values.yaml").read_text())["resources"]["limits"]["memory"])
    units = {"Gi": 1024.0, "Mi": 1.0}
    return float(raw[:-2]) * units[raw[-2:]]


@pytest.mark.parametrize(("classes", "reason"), [pytest.param(16, "Reconciled", id="16-classes-plan"),
                                                 pytest.param(256, "TooManySeries", id="256-classes-bounded")])
@pytest.mark.slow
def test_three_kvplans_at_the_caps_stay_under_the_chart_limit(classes, reason):
    with CapsPrometheus() as prom:
        out = subprocess.run([sys.executable, str(CHILD), prom.url, "3", str(classes)], capture_output=True,
                             text=True, timeout=1500, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"\n[{classes} classes x 3 KVPlans] peak RSS {report['peak_rss_mib']} MiB "
          f"(start {report['rss_before_mib']} MiB; chart limit {chart_limit_mib():.0f} MiB)")
    assert [r.split(":")[0] for r in report["reasons"]] == [reason] * 3, report["reasons"]
    assert report["peak_rss_mib"] < chart_limit_mib(), report


def test_histories_stop_at_the_planners_sample_bound(monkeypatch):
    """The bound itself, small: binning stops at the first class past it, naming the count and the bound."""
    from kvplan_operator import conditions as C
    from kvplan_operator.prom import PromError
    from kvplan_operator.observe.sources import observe as obs
    from kvplan_operator.spec import parse_spec
    from op_history_world import RecordedProm  # type: ignore[import-not-found]
    from op_targets_world import SPEC  # type: ignore[import-not-found]

    spec = parse_spec(SPEC)
    kept = obs.observe_histories(RecordedProm(), spec, "ns", now=1700007200.0)
    total = sum(obs.history_samples(o.history) for o in kept.values())
    assert total > 0
    monkeypatch.setattr(obs, "MAX_HISTORY_SAMPLES", total - 1)
    with pytest.raises(PromError) as info:
        obs.observe_histories(RecordedProm(), spec, "ns", now=1700007200.0)
    assert info.value.reason == C.TOO_MANY_SERIES and f"{total - 1:,}" in str(info.value)
