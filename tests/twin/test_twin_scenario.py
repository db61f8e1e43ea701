"""The short scenario of ``kvplan-dev twin`` as an end-to-end test (issue 25): the loop closes on real parts.

Stock vLLM Deployments serve a trace segment; the KVPlan is applied; the operator becomes Ready from what
Prometheus scraped from the pods (vLLM's own series, nothing backfilled), re-lays-out both groups, the real
controllers roll them (on full GPU nodes, with the ``maxUnavailable`` the operator holds), and the same segment is
served again by the new pods, every token accounted for by the replayer and by vLLM's own counter. The waits are
for conditions (the scenario's own); pytest's per-test timeout stops a hang. Nothing asserts on time."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvplan_dev.twin.scenario import EXAMPLE, ScenarioConfig, run_scenario, segment

pytestmark = [pytest.mark.integration, pytest.mark.vllm]


@pytest.mark.timeout(1800)
def test_the_loop_closes_stock_fleet_to_kvplans_layouts(control_plane_tools, plugin_python: Path) -> None:
    cfg = ScenarioConfig()
    report = run_scenario(plugin_python, cfg, progress=lambda message: print(f"[twin] {message}", flush=True))
    assert report.get("error") is None, report.get("error")
    assert report["examples"][EXAMPLE.name]["ready"] is True, report["examples"]
    assert report["rollout"] == "settled"
    # Both Deployments rolled (revision 1 is the stock template) to the plan's layouts.
    assert report["revisions"] and all(r >= 2 for r in report["revisions"].values()), report["revisions"]
    assert set(report["plan"]) == {"interactive", "batch"}
    wanted = sum(r.output_tokens for r in segment(cfg))
    for phase in ("before", "after"):
        got = report[phase]
        assert got["completed"] == got["requests"] == len(segment(cfg)) and got["failed"] == 0, \
            f"{phase}: {got['completed']} of {got['requests']} completed, {got['failed']} failed: {got['errors']}"
        assert got["tokens_received"] == wanted, phase
        assert got["vllm"]["generation_tokens"] >= wanted, phase  # vLLM counted at least what was received
    # The operator compared the plan's predictions with what vLLM realised, and found them within its tolerance.
    assert report["calibration"]["classes"] >= 1 and report["calibration"]["drifting"] == 0, report["calibration"]
