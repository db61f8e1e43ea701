"""``make demo``'s body, end to end: the operator reconciles the example KVPlan under the chart's ServiceAccount.

Runs ``kvplan-dev demo --json`` as a subprocess (what ``make demo`` runs, after its tool check) and
checks: it exits 0 within minutes; the KVPlan became Ready with a plan for both groups and all three classes,
learnt from the kvplan plugin's per-class series with each class's arrival rate from the same series (the trace's
own rates, since it is played once an hour) and each group's KV capacity shown both as vLLM reports it and as the
profile has it (the profile used, since no Deployment controller runs here); both Deployments changed the way the
plan says (TP/PP args, GPU limits, the pool's node selector, reservation env); the router ConfigMap got weights for
every class; the operator, authenticated only by a TokenRequest token of the chart's ServiceAccount, met no 403;
every process the demo started is gone afterwards; and the README's excerpt has the report's own table headings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"


@pytest.fixture(scope="module")
def report() -> dict[str, object]:
    from kvplan_dev.tools import locate_tools

    try:
        locate_tools()
    except Exception as exc:  # loud, never a skip
        pytest.fail(f"project tools not built ({exc}); run `make tools`")
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    kvplan_dev = Path(sys.executable).parent / "kvplan-dev"
    done = subprocess.run([str(kvplan_dev), "demo", "--json"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    try:
        data: dict[str, object] = json.loads(done.stdout)
    except ValueError:
        pytest.fail(f"demo printed no JSON (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    data["_exit"] = done.returncode
    data["_stderr"] = done.stderr
    return data


def test_demo_exits_zero_and_kvplan_is_ready(report: dict[str, object]) -> None:
    assert report["_exit"] == 0, f"{report.get('error')}\n{report.get('operator_log_tail', '')}\n{report['_stderr']}"
    kvplan = report["kvplan"]
    assert isinstance(kvplan, dict) and kvplan["ready"] == "True"
    plan = kvplan["plan"]
    assert set(plan["groups"]) == {"interactive", "batch"}
    assert set(plan["classes"]) == {"chat", "code", "batch"}
    assert float(report["seconds"]) < 600  # type: ignore[arg-type]


def test_histories_rates_and_capacity_come_from_the_exporters(report: dict[str, object]) -> None:
    from kvcore.profiles import roofline
    from kvplan_dev.demo_series import BLOCK_SIZE, engine_blocks

    plan = report["kvplan"]["plan"]  # type: ignore[index]
    trace_rates = {"chat": 9039, "code": 7567, "batch": 2760}  # requests in one 3502 s play of the trace
    for name, requests in trace_rates.items():
        c = plan["classes"][name]
        assert (c["source"], c["arrivalRateFrom"]) == ("kvplan", "source")
        # the newest hour holds one play less its first minute: the rate is the trace's own to within 6 %
        assert c["arrivalRate"] == pytest.approx(requests / 3501.7, rel=0.06)
        assert c["samples"] == pytest.approx(6 * requests, rel=0.05)
    for g in plan["groups"].values():
        cap = g["capacity"]
        assert cap["engineKvCapacityTokens"] == engine_blocks() * BLOCK_SIZE
        assert cap["profileKvCapacityTokens"] == roofline("A100-80GB", "llama-70b", 8, 1).kv_capacity_tokens
        assert (cap["tp"], cap["source"]) == (8, "profile") and "no Deployment controller" in cap["note"]


def test_readme_excerpt_has_the_reports_headings(report: dict[str, object]) -> None:
    from kvplan_dev.demo_report import plan_lines

    kvplan = report["kvplan"]
    lines = plan_lines({"status": {"plan": kvplan["plan"], "objective": kvplan["objective"]}})  # type: ignore[index]
    readme = (REPO / "README.md").read_text()
    excerpt = readme.split("What it prints")[1].split("```text")[1].split("```")[0].splitlines()
    headings = [line for line in lines if line.lstrip().startswith(("group ", "class "))]
    assert len(headings) == 2 and all(h in excerpt for h in headings), (headings, excerpt)
    rows = {line.split()[0] for line in lines[3:] if line.startswith("  ") and not line.lstrip().startswith(
        ("group ", "class "))}
    shown = {line.split()[0] for line in excerpt if line.startswith("  ") and line.split()[0] in rows}
    assert shown == {"batch", "interactive", "chat", "code"}


def test_each_deployment_got_the_planned_layout(report: dict[str, object]) -> None:
    plan = report["kvplan"]["plan"]  # type: ignore[index]
    deployments = report["deployments"]
    by_group = {"interactive": "vllm-llama70b-interactive", "batch": "vllm-llama70b-batch"}
    for group, name in by_group.items():
        after = deployments[name]["after"]  # type: ignore[index]
        g = plan["groups"][group]
        assert f"--tensor-parallel-size={g['tp']}" in after["args"]
        assert f"--pipeline-parallel-size={g['pp']}" in after["args"]
        assert str(after["gpuLimit"]) == str(g["tp"] * g["pp"])
        assert "cloud.google.com/gke-nodepool" in after["nodeSelector"]
        assert not [e for e in after["env"] if e.startswith("KVPLAN_RESERVE_")]  # read by nothing: not written
        assert deployments[name]["changes"], f"{name} did not change"  # type: ignore[index]


def test_router_configmap_has_weights_for_every_class(report: dict[str, object]) -> None:
    router = report["router"]
    assert isinstance(router, dict) and router["after"] is not None and router["diff"]
    document = json.loads(router["after"])
    assert set(document["classes"]) == {"chat", "code", "batch"}
    for weights in (c["weights"] for c in document["classes"].values()):
        assert sum(weights.values()) == pytest.approx(1.0, abs=1e-3) or sum(weights.values()) == 0


def test_operator_needed_nothing_beyond_the_chart_rbac(report: dict[str, object]) -> None:
    assert report["operator_forbidden"] == [], report["operator_forbidden"]


def test_nothing_left_running(report: dict[str, object]) -> None:
    pids = report["started_pids"]
    assert isinstance(pids, list) and len(pids) >= 4  # etcd, kube-apiserver, prometheus, operator
    assert [p for p in pids if _alive(int(p))] == []


def test_standalone_mode_reconciles() -> None:
    """The chart with ``peering.enabled=false`` runs ``kvplan-operator --standalone``; it must reconcile too."""
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    kvplan_dev = Path(sys.executable).parent / "kvplan-dev"
    done = subprocess.run([str(kvplan_dev), "demo", "--json", "--standalone"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)  # the demo's own wait for Ready: 240 s
    data = json.loads(done.stdout)
    assert [p for p in data["started_pids"] if _alive(int(p))] == []
    assert done.returncode == 0, data.get("error")
