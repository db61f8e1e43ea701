"""History sources (operator/observe/sources/): each source's one range query (metric spellings, class label, default
selector, the stock-vLLM union of one branch per Deployment), the observation of every class from one query per
source (class label values mapped to classes, arrival rates from the same answer's +Inf bucket, one instant query
only for a class that gives an arrivalRateQuery), ``MetricAbsent`` naming the metric and selector for a source or
a class with no series, and the spec rules of sources (which fields go with which source, classes sharing one
stock histogram must give their own rates)."""

from __future__ import annotations

import copy
import pytest
from kvplan_operator import conditions as C
from kvplan_operator.prom import PromError
from kvcore import catalogue
from kvcore.history.series import SOURCE_LAYOUTS
from kvplan_operator.observe.sources import observe_histories, plan_queries, registry
from kvplan_operator.spec import InvalidSpec, parse_spec
from op_history_world import MATRIX, T, RecordedProm  # type: ignore[import-not-found]
from op_sources_world import (GROUPS, NOW, STOCK, cls, spec)  # noqa: F401 - fixtures are found by name


def test_vllm_source_is_one_union_query_with_a_branch_per_deployment():
    [q] = plan_queries(parse_spec(STOCK), "serving", 3600)
    assert q.source == "vllm" and q.key_label == "kvplan_key"
    assert q.keys == {"group/interactive": ("interactive",), "group/batch": ("batch",)}
    assert q.promql == (
        'label_replace(sum by (le) (increase({__name__=~"vllm:request_generation_tokens_bucket|'
        'vllm_request_generation_tokens_bucket", namespace="serving", pod=~"vllm-llama70b-interactive-[a-z0-9]+-'
        '[a-z0-9]+"}[3600s])), "kvplan_key", "group/interactive", "", "") or label_replace(sum by (le) (increase('
        '{__name__=~"vllm:request_generation_tokens_bucket|vllm_request_generation_tokens_bucket", '
        'namespace="serving", pod=~"vllm\\\\.llama70b\\\\.batch-[a-z0-9]+-[a-z0-9]+"}[3600s])), "kvplan_key", '
        '"group/batch", "", "")')


def test_vllm_source_group_selector_and_legacy_class_selector():
    groups = copy.deepcopy(GROUPS)
    groups[0]["metricsSelector"] = 'job="vllm", model_name="llama-70b"'
    raw = spec([cls("chat", {"group": "interactive"}, arrivalRate=1.0),
                cls("code", {"group": "interactive"}, arrivalRate=1.0),
                cls("old", {"selector": 'model_name="llama-70b-old"'})], groups=groups)
    [q] = plan_queries(parse_spec(raw), "serving", 600)
    assert q.keys == {"group/interactive": ("chat", "code"), "class/old": ("old",)}
    assert q.promql.count("label_replace") == 2 and "[600s]" in q.promql
    assert 'job="vllm", model_name="llama-70b"}' in q.promql and 'model_name="llama-70b-old"}' in q.promql


@pytest.mark.parametrize(
    ("source", "settings", "expect"),
    [
        pytest.param("kvplan", None, 'sum by (le, kvplan_class) (increase({__name__=~"kvplan_request_output_tokens_'
                     'bucket", namespace="serving", pod=~"(vllm-llama70b-interactive|vllm\\\\.llama70b\\\\.batch)-'
                     '[a-z0-9]+-[a-z0-9]+"}[3600s]))', id="kvplan-pods-of-this-kvplan"),
        pytest.param("llm-d", None, 'sum by (le, fairness_id) (increase({__name__=~"llm_d_epp_request_output_tokens'
                     '_bucket", namespace="serving"}[3600s]))', id="llm-d-fairness-id"),
        pytest.param("llm-d", {"classLabel": "target_model_name", "metric": "llm_d_router_epp_output_tokens",
                               "selector": 'job="epp"'},
                     'sum by (le, target_model_name) (increase({__name__=~"llm_d_router_epp_output_tokens_bucket", '
                     'job="epp"}[3600s]))', id="llm-d-newer-name-and-label"),
        pytest.param("envoy-ai-gateway", None, 'sum by (le, kvplan_class) (increase({__name__=~"gen_ai_client_token'
                     '_usage_bucket", gen_ai_token_type="output"}[3600s]))', id="envoy-output-tokens"),
        pytest.param("envoy-ai-gateway", {"selector": 'gateway="main"', "classLabel": "tenant_id"},
                     'sum by (le, tenant_id) (increase({__name__=~"gen_ai_client_token_usage_bucket", '
                     'gen_ai_token_type="output", gateway="main"}[3600s]))', id="envoy-token-type-always-kept"),
        pytest.param("custom", {"metric": "router_output_tokens", "classLabel": "route", "selector": 'env="prod"'},
                     'sum by (le, route) (increase({__name__=~"router_output_tokens_bucket", env="prod"}[3600s]))',
                     id="custom"),
    ],
)
def test_labelled_sources_query(source, settings, expect):
    sources = [{"name": source, **settings}] if settings else []
    raw = spec([cls("chat", {"source": source}), cls("code", {"source": source, "classValue": "tenant-b"})],
               sources)
    [q] = plan_queries(parse_spec(raw), "serving", 3600)
    assert q.promql == expect
    assert q.keys == {"chat": ("chat",), "tenant-b": ("code",)}


def test_one_range_query_per_source_and_rates_from_the_same_answer():
    raw = spec([cls("interactive", {"group": "interactive"}), cls("chat", {"source": "kvplan"}),
                cls("tenant", {"source": "llm-d", "classValue": "team-a"}),
                cls("code", {"source": "kvplan"}, arrivalRateQuery="sum(rate(x[5m]))")])
    prom = RecordedProm(values=("chat", "code", "team-a", "someone-else"))
    obs = observe_histories(prom, parse_spec(raw), "serving", now=NOW)
    ranges = [c for c in prom.calls if c[0] == "range"]
    assert len(ranges) == 3  # vllm, kvplan, llm-d: one each, four classes
    assert [c for c in prom.calls if c[0] == "query"] == [("query", "sum(rate(x[5m]))", NOW)]
    for name in ("interactive", "chat", "tenant"):
        assert obs[name].arrival_rate == pytest.approx(5 / 3600) and obs[name].rate_from == "source"
        assert obs[name].requests == 17 and obs[name].windows == 2
    assert obs["code"].arrival_rate == 0.7 and obs["code"].rate_from == "query"
    assert (obs["chat"].source, obs["tenant"].source, obs["interactive"].source) == ("kvplan", "llm-d", "vllm")
    _, _, start, end, step = ranges[0]
    assert (start, end, step) == (NOW - 7200, NOW, 3600)


def test_a_source_with_no_series_names_metric_and_selector():
    raw = spec([cls("chat", {"source": "kvplan"})])
    with pytest.raises(PromError) as info:
        observe_histories(RecordedProm(values=()), parse_spec(raw), "serving", now=NOW)
    assert info.value.reason == C.METRIC_ABSENT
    text = str(info.value)
    assert "kvplan_request_output_tokens_bucket" in text and 'namespace="serving"' in text


def test_a_class_value_with_no_series_is_named():
    raw = spec([cls("chat", {"source": "llm-d"}), cls("code", {"source": "llm-d"})])
    with pytest.raises(PromError) as info:
        observe_histories(RecordedProm(values=("chat", "x", "y")), parse_spec(raw), "serving", now=NOW)
    assert info.value.reason == C.METRIC_ABSENT
    assert 'class code (fairness_id="code")' in str(info.value) and "3 other value(s)" in str(info.value)
    assert "llm_d_epp_request_output_tokens_bucket" in str(info.value)


def test_stock_vllm_group_with_no_series_is_named():
    class HalfProm(RecordedProm):
        def query_range(self, promql, **kw):
            out = super().query_range(promql, **kw)
            out["result"] = [s for s in out["result"] if s["metric"]["kvplan_key"] == "group/interactive"]
            return out

    with pytest.raises(PromError) as info:
        observe_histories(HalfProm(), parse_spec(STOCK), "serving", now=NOW)
    assert info.value.reason == C.METRIC_ABSENT
    assert "group batch (Deployment vllm.llama70b.batch)" in str(info.value)
    assert "vllm:request_generation_tokens_bucket" in str(info.value)


def test_a_stopped_series_has_no_rate():
    old = copy.deepcopy(MATRIX)
    for s in old:
        s["values"] = s["values"][:2]  # nothing at `now`
    with pytest.raises(PromError) as info:
        observe_histories(RecordedProm(matrix=old), parse_spec(STOCK), "serving", now=NOW)
    assert info.value.reason == C.NO_RATE_DATA and "group interactive" in str(info.value)


@pytest.mark.parametrize(
    ("classes", "sources", "field", "needle"),
    [
        pytest.param([cls("a", {})], None, "spec.classes[0].history.group", "several groups", id="vllm-needs-group"),
        pytest.param([cls("a", {"group": "nope"})], None, "spec.classes[0].history.group", "no group named",
                     id="unknown-group"),
        pytest.param([cls("a", {"group": "batch", "selector": "x=\"y\""})], None, "spec.classes[0].history",
                     "not both", id="group-and-selector"),
        pytest.param([cls("a", {"group": "batch", "classValue": "a"})], None, "spec.classes[0].history.classValue",
                     "no class label", id="vllm-class-value"),
        pytest.param([cls("a", {"source": "kvplan", "selector": "x=\"y\""})], None,
                     "spec.classes[0].history.selector", "one query", id="per-class-selector-on-labelled"),
        pytest.param([cls("a", {"source": "custom"})], None, "spec.classes[0].history.source", "historySources",
                     id="custom-without-settings"),
        pytest.param([cls("a", {"source": "custom"})], [{"name": "custom", "metric": "m"}], "spec.historySources[0]",
                     "classLabel", id="custom-without-label"),
        pytest.param([cls("a", {"group": "batch"})], [{"name": "vllm", "classLabel": "x"}], "spec.historySources[0]",
                     "no class label", id="vllm-source-label"),
        pytest.param([cls("a", {"group": "batch"}), cls("b", {"group": "batch"})], None, "spec.classes[0]",
                     "same vllm series", id="shared-group-needs-rates"),
        pytest.param([cls("a", {"source": "kvplan", "classValue": "x"}), cls("b", {"source": "kvplan",
                     "classValue": "x"}, arrivalRate=1.0)], None, "spec.classes[0]", "same kvplan series",
                     id="shared-value-needs-rates"),
        pytest.param([cls("a", {"source": "kvplan", "selector": "{x}"})], None, "spec.classes[0].history.selector",
                     "braces", id="braces"),
    ],
)
def test_source_spec_errors_name_the_field(classes, sources, field, needle):
    with pytest.raises(InvalidSpec) as info:
        parse_spec(spec(classes, sources))
    assert any(path == field and needle in msg for path, msg in info.value.errors), info.value.errors


def test_single_group_needs_no_group_and_old_specs_still_parse():
    one = spec([cls("a", {})], groups=GROUPS[:1])
    [q] = plan_queries(parse_spec(one), "ns", 3600)
    assert q.keys == {"group/interactive": ("a",)}
    old = spec([cls("a", {"selector": 'model_name="a"', "minSamples": 10}, arrivalRate=2.0)])
    parsed = parse_spec(old)
    assert parsed.classes[0].history.source == "vllm" and parsed.classes[0].history.min_samples == 10
    both = spec([cls("a", {"group": "batch"}, arrivalRate=1.0, arrivalRateQuery="x")])
    with pytest.raises(InvalidSpec, match="at most one of arrivalRate or arrivalRateQuery"):
        parse_spec(both)


def test_every_catalogue_source_is_registered_with_a_known_layout():
    sources = registry()
    assert tuple(sources) == catalogue.HISTORY_SOURCES
    assert all(s.layout in SOURCE_LAYOUTS for name, s in sources.items() if name != "custom")
