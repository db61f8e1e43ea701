"""kvplan_dev.fleet (the fleet the operator is benchmarked and tested at) and the counted histogram series it writes:
the KVPlan parses and names the instance's groups and classes; every class's series are the kvplan plugin's, with
its bucket layout and the labels a Kubernetes scrape adds; counts are cumulative, the +Inf bucket is the count, the
rate they imply is the instance's; the same arguments give the same series; OpenMetrics lines as promtool reads
them. Pure, no binaries."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest

from kvcore.history.series import KVPLAN_OUTPUT_TOKENS, kvplan_buckets
from kvplan_dev.fleet import MAX_MODEL_LEN, Fleet
from kvplan_dev.openmetrics import CountedHistogramSeries, ScalarSeries, Window, write_openmetrics
from kvplan_operator.observe.sources import plan_queries
from kvplan_operator.spec import parse_spec

WINDOW = Window(end_unix_s=1.7e9, duration_s=6 * 3600, step_s=600)


@pytest.mark.slow
def test_the_kvplan_parses_and_is_the_instance():
    fleet = Fleet(40, 12, namespace="f")
    spec = parse_spec(fleet.spec("http://prometheus:9090"))
    inst = fleet.instance
    assert len(spec.classes) == 40 and len(spec.groups) == 12
    for g, k in zip(spec.groups, inst.groups):
        assert (g.model, g.node_pool.gpu_type, g.node_pool.gpu_count) == (k.model, k.gpu_type, k.gpus)
        assert max(lay.tp * lay.pp for lay in g.layouts) <= g.node_pool.gpus_per_node
    for c, k in zip(spec.classes, inst.classes):
        assert (c.name, c.max_output_tokens, c.history.source) == (k.name, int(k.lmax), "kvplan")
        assert c.costs is not None and c.costs.preemption == k.cp and c.prefix_tokens <= c.input_tokens
    assert len(parse_spec(fleet.spec("http://p:9090", classes=5)).classes) == 5
    names = {d["metadata"]["name"] for d in fleet.deployments()}
    assert names == {g.deployment for g in spec.groups}
    (query,) = plan_queries(spec, "f", 3600.0)
    assert query.source == "kvplan" and len(query.keys) == 40  # one query for every class


@pytest.mark.slow
def test_series_have_the_plugins_shape_and_the_instances_rates():
    fleet = Fleet(30, 8, namespace="f", pods_per_class=2)
    series = fleet.series(WINDOW)
    hist = [s for s in series if isinstance(s, CountedHistogramSeries)]
    assert len(hist) == 30 * 2 and {s.metric for s in hist} == {KVPLAN_OUTPUT_TOKENS}
    bounds = [float(b) for b in kvplan_buckets(MAX_MODEL_LEN)]
    scrapes = len(WINDOW.scrape_times())
    for s in hist:
        assert list(s.buckets) == bounds and set(s.labels) == {"namespace", "pod", "job", "container", "instance",
                                                               "kvplan_class", "model_name"}
        assert re.fullmatch(r"vllm-g\d+-[a-z0-9]+-[a-z0-9]+", s.labels["pod"])
        counts = np.array(s.counts)
        assert counts.shape == (scrapes, len(bounds) + 1) and (np.diff(counts, axis=1) >= 0).all()
        assert (np.diff(counts, axis=0) >= 0).all() and (np.diff(np.array(s.sums)) >= 0).all()
    for c in fleet.instance.classes:
        mine = [s for s in hist if s.labels["kvplan_class"] == c.name]
        assert len({s.labels["pod"] for s in mine}) == 2
        last_hour = sum(s.counts[-1][-1] - s.counts[-7][-1] for s in mine)  # 6 scrapes of 10 min
        assert last_hour / 3600 == pytest.approx(c.arrival_rate, rel=0.1, abs=0.05)
    infos = [s for s in series if isinstance(s, ScalarSeries) and s.metric == "vllm:cache_config_info"]
    assert len(infos) == 8
    assert all(int(s.labels["num_gpu_blocks"]) * 16 == int(s.labels["kv_cache_size_tokens"]) > 0 for s in infos)
    again = Fleet(30, 8, namespace="f", pods_per_class=2).series(WINDOW)
    assert [s.counts for s in again if isinstance(s, CountedHistogramSeries)] == [s.counts for s in hist]
    assert len([s for s in fleet.series(WINDOW, classes=3) if isinstance(s, CountedHistogramSeries)]) == 6


def test_counted_histogram_lines():
    window = Window(end_unix_s=1000.0, duration_s=120.0, step_s=60.0)
    s = CountedHistogramSeries({"kvplan_class": "a"}, (10.0, 100.0), [[0, 0, 0], [1, 3, 3], [2, 5, 6]],
                               [0.0, 80.0, 400.5], metric="m")
    out = io.StringIO()
    write_openmetrics(out, [s], window)
    text = out.getvalue().splitlines()
    assert text[:2] == ["# HELP m Backfilled by kvplan_dev (see kvplan_dev.openmetrics).", "# TYPE m histogram"]
    assert text[2:7] == ['m_bucket{kvplan_class="a",le="10.0"} 0 880.000', 'm_bucket{kvplan_class="a",le="100.0"} 0 880.000',
                         'm_bucket{kvplan_class="a",le="+Inf"} 0 880.000', 'm_count{kvplan_class="a"} 0 880.000',
                         'm_sum{kvplan_class="a"} 0.0 880.000']
    assert 'm_bucket{kvplan_class="a",le="+Inf"} 6 1000.000' in text and 'm_sum{kvplan_class="a"} 400.5 1000.000' in text
    assert text[-1] == "# EOF"
    with pytest.raises(ValueError, match="counts"):
        CountedHistogramSeries({}, (10.0,), [[1]], [0.0])
    with pytest.raises(ValueError, match="scrapes"):
        write_openmetrics(io.StringIO(), [CountedHistogramSeries({}, (10.0,), [[0, 1]], [0.0])], window)
