"""The demo's backfill (kvplan_dev/demo_series.py) has the shape real exporters produce, checked against the
example Deployments themselves: stock vLLM series per pod with ``model_name`` = the Deployment's
``--served-model-name`` and 1-2-5 buckets to its ``--max-model-len``, one pod per replica named as a ReplicaSet
names them (so the operator's default pod selector finds them), the plugin's per-class series with
``kvplan_class`` and fine buckets, cache_config_info labelled like vLLM 0.33's CacheConfig, no fabricated
``model_name="<model>-<class>"`` series; every request of the trace counted once per play; and the OpenMetrics
text of gauges and counters that promtool reads."""

from __future__ import annotations

import io
import re
from collections import Counter, namedtuple

import yaml

from kvcore.history.series import kvplan_buckets, vllm_buckets
from kvplan_dev import demo, demo_series
from kvplan_dev.demo_report import parse_args
from kvplan_dev.openmetrics import HistogramSeries, ScalarSeries, Window, read_trace, write_openmetrics
from kvplan_operator.observe.sources.vllm import POD_SUFFIX

Row = namedtuple("Row", "arrival_s input_tokens output_tokens")


def deployments() -> dict[str, dict]:
    docs = yaml.safe_load_all(demo.EXAMPLE_DEPLOYMENTS.read_text())
    return {d["metadata"]["name"]: d for d in docs if d and d.get("kind") == "Deployment"}


def flags(dep: dict) -> dict[str, str | None]:
    return dict(parse_args(dep["spec"]["template"]["spec"]["containers"][0]["args"]))


def test_the_fleet_is_the_example_fleet() -> None:
    deps = deployments()
    assert set(demo_series.PODS) == set(deps) == set(demo_series.ROUTING.values())
    for name, dep in deps.items():
        f = flags(dep)
        assert f["--served-model-name"] == demo_series.MODEL
        assert int(f["--max-model-len"] or 0) == demo_series.MAX_MODEL_LEN
        assert int(f["--tensor-parallel-size"] or 0) == demo_series.LAYOUT[0]
        pods = demo_series.PODS[name]
        assert len(pods) == dep["spec"]["replicas"]
        assert all(re.fullmatch(re.escape(name) + POD_SUFFIX, p) for p in pods)


def test_series_have_the_exporters_shape() -> None:
    rows = [Row(0.0, 10, 5), Row(1.0, 1500, 300), Row(2.0, 5000, 40), Row(3.0, 20, 7000)]
    window = Window(end_unix_s=1.7e9, duration_s=2 * 3600, step_s=60)
    series, per_class = demo_series.fleet_series(rows, window)
    assert per_class == {"chat": 2, "code": 1, "batch": 1}
    hist = [s for s in series if isinstance(s, HistogramSeries)]
    stock = [s for s in hist if s.metric == "vllm:request_generation_tokens"]
    plugin = [s for s in hist if s.metric == "kvplan_request_output_tokens"]
    assert len(stock) == 3 and all(s.labels["model_name"] == demo_series.MODEL for s in hist)
    assert all(set(s.labels) == {"model_name", "engine", "namespace", "pod", "job", "instance", "container"}
               for s in stock)
    assert all(list(s.buckets) == [float(b) for b in vllm_buckets(8192)] for s in stock)
    assert all(list(s.buckets) == [float(b) for b in kvplan_buckets(8192)] for s in plugin)
    assert {(s.labels["pod"].rsplit("-", 2)[0], s.labels["kvplan_class"]) for s in plugin} == {
        ("vllm-llama70b-interactive", "chat"), ("vllm-llama70b-interactive", "code"), ("vllm-llama70b-batch", "batch")}
    # every request once per hour of history, spread round-robin over the Deployment's pods
    assert sum(len(s.output_tokens) for s in stock) == sum(len(s.output_tokens) for s in plugin) == 2 * len(rows)
    assert sorted(len(s.output_tokens) for s in stock) == [2, 3, 3]
    infos = [s for s in series if isinstance(s, ScalarSeries) and s.metric == "vllm:cache_config_info"]
    assert len(infos) == 3 and all(s.value == 1.0 and "model_name" not in s.labels for s in infos)
    assert all(int(s.labels["num_gpu_blocks"]) * int(s.labels["block_size"]) == int(s.labels["kv_cache_size_tokens"])
               for s in infos)
    names = Counter(s.metric for s in series)
    assert names["vllm:num_preemptions"] == names["vllm:kv_cache_usage_perc"] == 3
    assert not any(re.match(r"llama-70b-", s.labels.get("model_name", "")) for s in hist)


def test_the_bundled_trace_fits_one_hour() -> None:
    rows = read_trace(demo.TRACE)
    series, per_class = demo_series.fleet_series(rows, Window(end_unix_s=1.7e9, duration_s=6 * 3600, step_s=60))
    assert sum(per_class.values()) == len(rows) == 19366
    kept = sum(len(s.output_tokens) for s in series if isinstance(s, HistogramSeries)
               and s.metric == "vllm:request_generation_tokens")
    assert kept == 6 * len(rows)


def test_gauges_and_counters_in_openmetrics() -> None:
    window = Window(end_unix_s=1000.0, duration_s=120.0, step_s=60.0)
    out = io.StringIO()
    write_openmetrics(out, [ScalarSeries("vllm:cache_config_info", {"block_size": "16"}),
                            ScalarSeries("vllm:num_preemptions", {"pod": "p"}, kind="counter", value=0, rate_per_s=0.5)],
                      window)
    text = out.getvalue().splitlines()
    assert "# TYPE vllm:cache_config_info gauge" in text and "# TYPE vllm:num_preemptions counter" in text
    assert 'vllm:cache_config_info{block_size="16"} 1 880.000' in text
    assert [line for line in text if line.startswith("vllm:num_preemptions_total")] == [
        'vllm:num_preemptions_total{pod="p"} 0 880.000', 'vllm:num_preemptions_total{pod="p"} 30 940.000',
        'vllm:num_preemptions_total{pod="p"} 60 1000.000']
    assert text[-1] == "# EOF"
