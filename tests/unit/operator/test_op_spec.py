"""KVPlan spec validation: defaults, every error reported at once with its field path, cross-field rules,
layouts that do not fit one node (LayoutExceedsNode), and the shipped example CR."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from kvplan_operator.spec import InvalidSpec, parse_spec
from kvplan_operator.spec.base import parse_duration

from op_targets_world import SPEC  # type: ignore[import-not-found]

REPO = Path(__file__).resolve().parents[3]


def with_(path: str, value, base=SPEC):
    d = copy.deepcopy(base)
    cur = d
    parts = path.split(".")
    for p in parts[:-1]:
        cur = cur[int(p)] if p.isdigit() else cur.setdefault(p, {})
    last = parts[-1]
    if value is KeyError:
        del cur[last]
    elif last.isdigit():
        cur[int(last)] = value
    else:
        cur[last] = value
    return d


def test_defaults():
    s = parse_spec(copy.deepcopy(SPEC))
    assert s.mode == "Apply"
    assert s.groups[0].node_pool.gpus_per_node == 8
    assert s.groups[0].node_pool.selector() == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert s.groups[1].node_pool.selector() == {"pool": "b"}
    assert s.prometheus.lookback_seconds == 6 * 3600 and s.prometheus.windows == 6
    assert s.replan.interval_seconds == 300 and s.replan.min_improvement == 0.05
    assert s.robustness.policy == "drift"
    assert s.costs.c_rej == 5000


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        pytest.param("groups.0.nodePool.gpuCount", 0, "spec.groups[0].nodePool.gpuCount", id="gpu-count-range"),
        pytest.param("groups.0.name", "Big", "spec.groups[0].name", id="group-name-pattern"),
        pytest.param("groups.1.name", "big", "spec.groups[1].name", id="duplicate-group"),
        pytest.param("groups.1.deployment", "vllm-big", "spec.groups[1].deployment", id="duplicate-deployment"),
        pytest.param("groups.0.layouts", [{"tp": 3}], "spec.groups[0].layouts[0].tp", id="tp-enum"),
        pytest.param("groups.0.layouts", [{"tp": 4}, {"tp": 4, "pp": 1}], "spec.groups[0].layouts[1]", id="dup-layout"),
        pytest.param("classes.0.costs", KeyError, "spec.classes[0]", id="neither-costs-nor-slo"),
        pytest.param("classes.1.costs", {"preemption": 1, "waste": 1}, "spec.classes[1]", id="both-costs-and-slo"),
        pytest.param("classes.0.arrivalRateQuery", "up", "spec.classes[0]", id="rate-and-query"),
        pytest.param("classes.0.prefixTokens", 600, "spec.classes[0].prefixTokens", id="prefix-over-input"),
        pytest.param("classes.0.costs.waste", 0, "spec.classes[0].costs.waste", id="waste-positive"),
        pytest.param("classes.1.slo.lambda", 1, "spec.classes[1].slo.lambda", id="slo-lambda-over-1"),
        pytest.param("classes.0.history.selector", "{a=\"b\"}", "spec.classes[0].history.selector", id="braces"),
        pytest.param("mode", "Yolo", "spec.mode", id="mode-enum"),
        pytest.param("prometheus.url", "prom:9090", "spec.prometheus.url", id="url-scheme"),
        pytest.param("prometheus.url", "http://prom:9090/#", "spec.prometheus.url", id="url-fragment"),
        pytest.param("prometheus.url", "http://x@evil.example/", "spec.prometheus.url", id="url-userinfo"),
        pytest.param("prometheus.url", "http://prom:9090/api?x=1", "spec.prometheus.url", id="url-query"),
        pytest.param("prometheus.timeoutSeconds", 0.1, "spec.prometheus.timeoutSeconds", id="timeout-min"),
        pytest.param("prometheus.lookback", "1m", "spec.prometheus.lookback", id="lookback-min"),
        pytest.param("prometheus.lookback", "60d", "spec.prometheus.lookback", id="lookback-max"),
        pytest.param("replan.interval", "1s", "spec.replan.interval", id="interval-min"),
        pytest.param("router.configMap.key", "routing/json", "spec.router.configMap.key", id="configmap-key"),
        pytest.param("router.configMap.name", "Router_CM", "spec.router.configMap.name", id="configmap-name"),
        pytest.param("router.httpRoute.classHeader", "x class", "spec.router.httpRoute.classHeader",
                     id="header-name"),
        pytest.param("groups.0.inferencePool", "Pool!", "spec.groups[0].inferencePool", id="pool-name"),
        pytest.param("prometheus.authSecretRef", {"name": "tok", "key": "a/b"}, "spec.prometheus.authSecretRef.key",
                     id="secret-key"),
        pytest.param("classes.0.arrivalRate", 1e308, "spec.classes[0].arrivalRate", id="rate-1e308"),
        pytest.param("classes.0.costs.preemption", 1e308, "spec.classes[0].costs.preemption", id="cost-1e308"),
        pytest.param("classes.0.prefixTokens", 10**8, "spec.classes[0].prefixTokens", id="prefix-huge"),
        pytest.param("costs", {"cRej": 1e308}, "spec.costs.cRej", id="rejection-cost-1e308"),
        pytest.param("classes.1.slo.lambda", 1e308, "spec.classes[1].slo.lambda", id="slo-lambda-1e308"),
        pytest.param("prometheus.lookback", "6 hours", "spec.prometheus.lookback", id="lookback-duration"),
        pytest.param("replan.interval", "0s", "spec.replan.interval", id="interval-positive"),
        pytest.param("replan.minImprovement", 2, "spec.replan.minImprovement", id="min-improvement-range"),
        pytest.param("robustness", {"policy": "absolute"}, "spec.robustness", id="absolute-needs-eps"),
        pytest.param("robustness", {"policy": "drift", "frac": 0.1}, "spec.robustness", id="frac-only-for-fraction"),
        pytest.param("extraKnob", 1, "spec.extraKnob", id="unknown-field"),
        pytest.param("groups.0.engine", {"latencyTargets": {"ttftSeconds": 0}},
                     "spec.groups[0].engine.latencyTargets.ttftSeconds", id="ttft-target-positive"),
        pytest.param("groups.0.engine", {"latencyTargets": {"tpotSeconds": 1e308}},
                     "spec.groups[0].engine.latencyTargets.tpotSeconds", id="tpot-target-1e308"),
        pytest.param("groups.0.engine", {"latencyTargets": {"ttftSecs": 1}},
                     "spec.groups[0].engine.latencyTargets.ttftSecs", id="latency-target-unknown"),
    ],
)
def test_bad_input_names_the_field(path, value, field):
    with pytest.raises(InvalidSpec) as info:
        parse_spec(with_(path, value))
    assert field in [p for p, _ in info.value.errors], info.value.errors
    assert info.value.reason == "InvalidSpec"


def test_all_errors_at_once():
    bad = with_("groups.0.nodePool.gpuCount", 0, with_("prometheus.url", "x", with_("mode", "No")))
    with pytest.raises(InvalidSpec) as info:
        parse_spec(bad)
    paths = {p for p, _ in info.value.errors}
    assert {"spec.groups[0].nodePool.gpuCount", "spec.prometheus.url", "spec.mode"} <= paths
    assert "spec.groups" not in paths  # no noise from the containing list


def test_uniqueness_the_crd_leaves_to_the_operator():
    """The CRD has no pairwise rule (evaluated on every status write, it cost seconds at fleet size): two groups
    naming one Deployment are refused here, naming both; duplicate names and layouts too (list-map keys in the CRD)."""
    twice = with_("groups.1.deployment", SPEC["groups"][0]["deployment"])
    with pytest.raises(InvalidSpec) as info:
        parse_spec(twice)
    assert info.value.errors == [("spec.groups[1].deployment",
                                  f"Deployment {SPEC['groups'][0]['deployment']!r} is already spec.groups[0]")]
    names = with_("classes.1.name", SPEC["classes"][0]["name"])
    with pytest.raises(InvalidSpec) as info:
        parse_spec(names)
    assert [p for p, _ in info.value.errors] == ["spec.classes[1].name"]
    layouts = with_("groups.0.layouts", [{"tp": 4}, {"tp": 4, "pp": 1}])
    with pytest.raises(InvalidSpec) as info:
        parse_spec(layouts)
    assert [p for p, _ in info.value.errors] == ["spec.groups[0].layouts[1]"]


def test_layout_bigger_than_a_node_is_refused():
    bad = with_("groups.0.nodePool", {"gpuCount": 16, "gpusPerNode": 4})
    with pytest.raises(InvalidSpec) as info:
        parse_spec(bad)
    assert info.value.reason == "LayoutExceedsNode"
    assert [p for p, _ in info.value.errors] == ["spec.groups[0].layouts[1]"]
    assert "LeaderWorkerSet" in str(info.value)


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("5m", 300), ("6h", 21600), ("1d", 86400)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


def test_shipped_example_parses():
    example = REPO / "examples"
    found = [d for f in sorted(example.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text())
             if d and d.get("kind") == "KVPlan"]
    assert found, "examples/ must ship a KVPlan example (README quickstart and the demo apply it)"
    for doc in found:
        parse_spec(doc["spec"])
