"""The demo's pure parts: the documented trace split, and the before/after views it prints.

The demo itself (control plane, Prometheus, operator) runs in ``tests/e2e/test_demo.py``.
"""

from __future__ import annotations

from collections import namedtuple

import pytest
import yaml

from kvplan_dev import demo, demo_report

Row = namedtuple("Row", "arrival_s input_tokens output_tokens")


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        pytest.param(0, "chat", id="empty-prompt"),
        pytest.param(999, "chat", id="chat-upper-edge"),
        pytest.param(1000, "code", id="code-lower-edge"),
        pytest.param(1999, "code", id="code-upper-edge"),
        pytest.param(2000, "batch", id="batch-lower-edge"),
        pytest.param(14050, "batch", id="longest-in-trace"),
    ],
)
def test_class_of(prompt: int, expected: str) -> None:
    assert demo.class_of(prompt) == expected


def test_split_matches_example_classes() -> None:
    """The split's class names are exactly the plugin example's classes, read from the kvplan source; the stock
    example's classes are the Deployments' groups, read from the vllm source."""
    plan = yaml.safe_load(demo.EXAMPLE_PLAN.read_text())
    classes = {c["name"]: c for c in plan["spec"]["classes"]}
    assert list(classes) == [name for name, _, _ in demo.CLASS_SPLIT]
    for spec in classes.values():
        assert spec["history"]["source"] == "kvplan" and "classValue" not in spec["history"]
    stock = yaml.safe_load(demo.EXAMPLES["stock"].read_text())
    assert stock["metadata"]["name"] == plan["metadata"]["name"]  # one replaces the other
    groups = {g["name"]: g["deployment"] for g in stock["spec"]["groups"]}
    assert {c["name"]: c["history"]["group"] for c in stock["spec"]["classes"]} == {g: g for g in groups}


def test_split_rows_keeps_order_and_every_class() -> None:
    rows = [Row(0.0, 5, 1), Row(1.0, 3000, 2), Row(2.0, 10, 3)]
    parts = demo.split_rows(rows)
    assert [r.output_tokens for r in parts["chat"]] == [1, 3]
    assert parts["code"] == []
    assert [r.output_tokens for r in parts["batch"]] == [2]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(["--tensor-parallel-size=8"], [("--tensor-parallel-size", "8")], id="equals"),
        pytest.param(["--tensor-parallel-size", "8"], [("--tensor-parallel-size", "8")], id="separate"),
        pytest.param(["--enable-prefix-caching", "--port=1"], [("--enable-prefix-caching", None), ("--port", "1")],
                     id="bare-flag"),
        pytest.param(["serve", "--x", "1"], [("", "serve"), ("--x", "1")], id="positional"),
    ],
)
def test_parse_args(args: list[str], expected: list[tuple[str, str | None]]) -> None:
    assert demo_report.parse_args(args) == expected


def _deployment(tp: int, replicas: int, selector: dict[str, str], env: list[dict[str, object]]) -> dict[str, object]:
    return {
        "metadata": {"name": "d", "annotations": {}},
        "spec": {"replicas": replicas, "template": {"spec": {
            "nodeSelector": selector,
            "containers": [{"name": "vllm", "args": ["--model=m", "--tensor-parallel-size", str(tp)],
                            "resources": {"limits": {"nvidia.com/gpu": str(tp)}}, "env": env}],
        }}},
    }


def test_view_changes_reads_like_the_patch() -> None:
    before = demo_report.deployment_view(_deployment(8, 2, {"gpu": "a100"}, []))
    ref = {"configMapKeyRef": {"name": "s", "key": "KVPLAN_RESERVE_CHAT"}}
    env = [{"name": "KVPLAN_RESERVE_CHAT", "valueFrom": ref}]
    after = demo_report.deployment_view(_deployment(4, 4, {"gpu": "a100", "pool": "p"}, env),
                                 configmaps={"s": {"KVPLAN_RESERVE_CHAT": "512"}})
    assert demo_report.view_changes(before, after) == [
        "replicas: 2 -> 4",
        "args: --tensor-parallel-size=8 -> --tensor-parallel-size=4",
        "limits[nvidia.com/gpu]: 8 -> 4",
        "nodeSelector: + pool = p",
        "env: + KVPLAN_RESERVE_CHAT = ConfigMap s[KVPLAN_RESERVE_CHAT] = 512",
    ]
    assert demo_report.view_changes(before, before) == []


def test_text_diff_pretty_prints_json() -> None:
    diff = demo_report.text_diff('{"b": 1, "a": {"x": 0.5}}', '{"a": {"x": 0.25}, "b": 1}', "router")
    assert '-    "x": 0.5' in diff and '+    "x": 0.25' in diff
    assert demo_report.text_diff(None, '{"a": 1}', "router")[3] == "-(absent)"


def test_rbac_documents_keep_only_rbac() -> None:
    rendered = "\n---\n".join(yaml.safe_dump({"kind": k, "metadata": {"name": k.lower()}}) for k in
                               ("ServiceAccount", "Deployment", "ClusterRole", "Service", "RoleBinding"))
    assert [d["kind"] for d in demo.rbac_documents(rendered)] == ["ServiceAccount", "ClusterRole", "RoleBinding"]


@pytest.mark.parametrize(("line", "found"), [
    ("HTTP response headers: status 403", True),
    ("kubernetes.client.exceptions.ApiException: (403)", True),
    ("Reason: Forbidden", True),
    ('deployments.apps "x" is forbidden: User cannot patch', True),
    ("[2026-11-30 16:53:44,403] kopf.objects [INFO] Creation is processed: 1 succeeded; 0 failed.", False),
    ("re-plan took 0.403 s, 4031 requests", False),
])
def test_forbidden_lines_ignore_403_inside_timestamps_and_numbers(line: str, found: bool) -> None:
    # a kopf log line stamped at millisecond 403 once failed the demo's RBAC check
    assert demo.forbidden_lines(f"before\n{line}\nafter") == ([line] if found else [])
