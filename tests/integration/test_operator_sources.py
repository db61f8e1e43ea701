"""History sources, capacity from the engine and Prometheus auth, end to end on the real apiserver and the real
Prometheus (Debian's 2.42), backfilled with the series the real exporters produce (kvplan_dev.demo_series: stock
vLLM per pod, the kvplan plugin's per-class histograms, vLLM's cache_config_info):

- examples/kvplan-70b-stock.yaml becomes Ready on a Prometheus holding stock vLLM series only, its two classes
  read per Deployment with their rates from the same query; once a Deployment controller has observed the
  Deployments, M(z) of the running layout is vLLM's own number and the others are scaled from it;
- examples/kvplan-70b.yaml becomes Ready reading the plugin's per-class series through TLS (CA bundle from a
  Secret) and basic auth (from a Secret);
- the re-plan cycle makes one Prometheus query per source plus one each for capacity, plan calibration and step
  times, counted at the client: 4 with one source, 5 with two;
- a source whose metric is absent is Degraded with MetricAbsent naming the metric and the selector, and the last
  good plan stays in force; a class label with 1,100 values on the real Prometheus is TooManySeries.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator

import pytest
import yaml

from kvcore.planner import plan
from kvcore.profiles import roofline
from kvplan_dev import pytest_fixtures
from kvplan_dev.certs import TestCA
from kvplan_dev.demo_series import BLOCK_SIZE, engine_blocks, fleet_series
from kvplan_dev.openmetrics import HistogramSeries, Window, read_trace
from kvplan_dev.prom import LocalPrometheus
from kvplan_operator import conditions as C
from kvplan_operator.kube import Kube
from kvplan_operator.prom import PromClient, PromConnection, PromError
from kvplan_operator.reconcile import Deps, reconcile
from kvplan_operator.observe.sources import observe_histories
from kvplan_operator.spec import parse_spec
from operator_world import REPO, cond, detail

pytestmark = pytest.mark.integration

USER, PASSWORD = "kvplan-reader", "pw-7f3a"
TRACE_RATE = {"interactive": (9039 + 7567) / 3501.7, "batch": 2760 / 3501.7, "chat": 9039 / 3501.7,
              "code": 7567 / 3501.7}


def _backfilled(server: LocalPrometheus, namespace: str, *, plugin: bool) -> LocalPrometheus:
    """``server`` started with 6 h of the example fleet's series in ``namespace`` (stock only unless ``plugin``)."""
    window = Window(end_unix_s=time.time() - 60, duration_s=6 * 3600, step_s=60)
    rows = read_trace(REPO / "kvcore" / "data" / "traces" / "azure2023_conv.csv")
    series, _ = fleet_series(rows, window, namespace=namespace, plugin=plugin)
    try:
        server.backfill(series, window)
        server.start()
    except Exception as exc:  # loud, never a skip
        server.stop()
        pytest_fixtures.STARTED.extend(server.history)
        pytest.fail(f"backfilled Prometheus did not start: {exc}")
    return server


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def servers() -> Iterator[list[LocalPrometheus]]:
    """Prometheus servers a test starts (stopped and recorded afterwards)."""
    started: list[LocalPrometheus] = []
    try:
        yield started
    finally:
        for server in started:
            server.stop()
            pytest_fixtures.STARTED.extend(server.history)


class Counting:
    """The operator's Prometheus factory, keeping every client so the test can count the requests it sent."""

    def __init__(self) -> None:
        self.clients: list[PromClient] = []

    def __call__(self, conn: PromConnection) -> PromClient:
        client = PromClient.connect(conn)
        self.clients.append(client)
        return client

    def sent(self) -> int:
        return sum(c.requests_sent for c in self.clients)


def _example(name: str, url: str, **prometheus: object) -> dict:
    doc = yaml.safe_load((REPO / "examples" / name).read_text())
    doc["spec"]["prometheus"] = doc["spec"]["prometheus"] | {"url": url} | prometheus
    return doc


def _apply(cluster, namespace: str, doc: dict) -> None:
    import json

    cluster.kubectl("-n", namespace, "apply", "-f", str(REPO / "examples" / "vllm-deployments.yaml"))
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input_text=json.dumps(doc))


def _reconcile(kube: Kube, namespace: str, counting: Counting):
    deps = Deps(kube=kube, prom_factory=counting, planner=plan, backoff_base_s=1.0)
    before = counting.sent()
    out = reconcile(kube.get_kvplan(namespace, "llama-70b"), deps)
    return out, counting.sent() - before, kube.get_kvplan(namespace, "llama-70b")


def _observed_by_a_controller(kube_api, namespace: str) -> None:
    """What a Deployment controller does first: status.observedGeneration = generation, every replica updated."""
    from kubernetes import client

    apps = client.AppsV1Api(kube_api)
    for name in ("vllm-llama70b-interactive", "vllm-llama70b-batch"):
        d = apps.read_namespaced_deployment(name, namespace)
        n = d.spec.replicas
        apps.patch_namespaced_deployment_status(name, namespace, {"status": {
            "observedGeneration": d.metadata.generation, "replicas": n, "updatedReplicas": n}})


def test_stock_example_is_ready_on_stock_vllm_metrics_alone(crd, cluster, kube_api, namespace, servers):
    stock_prom = LocalPrometheus()
    servers.append(stock_prom)
    _backfilled(stock_prom, namespace, plugin=False)  # no kvplan_* series at all
    kube = Kube(kube_api)
    _apply(cluster, namespace, _example("kvplan-70b-stock.yaml", stock_prom.url))
    _observed_by_a_controller(kube_api, namespace)
    counting = Counting()
    out, sent, body = _reconcile(kube, namespace, counting)
    assert out.ok, (out, body.get("status"))
    assert sent == 4  # one history source (vllm), the capacity query, plan calibration's and the step times'
    assert cond(body, C.READY)["status"] == "True"
    st = body["status"]["plan"]
    classes = detail(kube, namespace, "llama-70b")["classes"]
    assert set(classes) == {"interactive", "batch"} and st["classCounts"]["total"] == 2
    for name, c in classes.items():
        assert (c["source"], c["arrivalRateFrom"]) == ("vllm", "source")
        assert c["arrivalRate"] == pytest.approx(TRACE_RATE[name], rel=0.06)
    engine = engine_blocks() * BLOCK_SIZE
    scale = engine / roofline("A100-80GB", "llama-70b", 8, 1).kv_capacity_tokens
    for g in st["groups"].values():
        cap = g["capacity"]
        assert (cap["source"], cap["tp"], cap["engineKvCapacityTokens"]) == ("engine", 8, engine)
        assert cap["scale"] == pytest.approx(scale, abs=1e-4) and cap["kvCacheUsage"] in (0.62, 0.41)
        expect = engine if (g["tp"], g["pp"]) == (8, 1) else \
            int(roofline("A100-80GB", "llama-70b", g["tp"], g["pp"]).kv_capacity_tokens * scale)
        assert g["kvCapacityTokens"] == expect  # the planner planned with vLLM's number, scaled to its layout
    assert cap["preemptionsPerSecond"] is not None


def test_plugin_example_over_tls_and_basic_auth_then_a_missing_metric(crd, cluster, kube_api, namespace, servers,
                                                                     pki):
    from kubernetes import client

    secure_prom = LocalPrometheus(tls=pki.server("prom"), basic_auth={USER: PASSWORD})
    servers.append(secure_prom)
    _backfilled(secure_prom, namespace, plugin=True)

    core = client.CoreV1Api(kube_api)
    core.create_namespaced_secret(namespace, client.V1Secret(metadata=client.V1ObjectMeta(name="prom-basic"),
                                                             string_data={"username": USER, "password": PASSWORD}))
    core.create_namespaced_secret(namespace, client.V1Secret(metadata=client.V1ObjectMeta(name="prom-ca"),
                                                             string_data={"ca.crt": pki.pem}))
    doc = _example("kvplan-70b.yaml", secure_prom.url, basicAuth={"secretRef": {"name": "prom-basic"}},
                   tls={"caSecretRef": {"name": "prom-ca"}})
    _apply(cluster, namespace, doc)
    kube = Kube(kube_api)
    counting = Counting()
    out, sent, body = _reconcile(kube, namespace, counting)
    assert out.ok, (out, body.get("status"))
    assert sent == 4  # the kvplan source, capacity, calibration and step times, for three classes
    for name, c in detail(kube, namespace, "llama-70b")["classes"].items():
        assert (c["source"], c["arrivalRateFrom"]) == ("kvplan", "source")
        assert c["arrivalRate"] == pytest.approx(TRACE_RATE[name], rel=0.06)
    # Two sources: batch read from its Deployment's stock histogram instead.
    spec = copy.deepcopy(body["spec"])
    spec["classes"][2]["history"] = {"group": "batch", "minSamples": 100}
    kube_obj = client.CustomObjectsApi(kube_api)
    kube_obj.patch_namespaced_custom_object("kvplan.io", "v1alpha1", namespace, "kvplans", "llama-70b",
                                            {"spec": {"classes": spec["classes"]}})
    out, sent, body = _reconcile(kube, namespace, counting)
    assert out.ok, (out, body.get("status"))
    assert sent == 5  # kvplan + vllm + capacity + calibration + step times
    assert detail(kube, namespace, "llama-70b")["classes"]["batch"]["source"] == "vllm"
    good = copy.deepcopy(body["status"])
    good_detail = detail(kube, namespace, "llama-70b")
    # A source whose metric is absent: Degraded naming metric and selector, the last good plan stays.
    spec["classes"][0]["history"] = {"source": "llm-d", "minSamples": 200}
    kube_obj.patch_namespaced_custom_object("kvplan.io", "v1alpha1", namespace, "kvplans", "llama-70b",
                                            {"spec": {"classes": spec["classes"]}})
    out, sent, body = _reconcile(kube, namespace, counting)
    assert out.reason == C.METRIC_ABSENT and sent == 1  # llm-d (chat is the first class) had nothing: stop there
    degraded = cond(body, C.DEGRADED)
    assert degraded["status"] == "True" and degraded["reason"] == C.METRIC_ABSENT
    assert "llm_d_epp_request_output_tokens_bucket" in degraded["message"]
    assert f'namespace="{namespace}"' in degraded["message"]
    assert cond(body, C.READY)["status"] == "True"
    st = body["status"]  # the last good plan (read with batch from the stock histogram) is still the one in force
    assert st["plan"] == good["plan"] and detail(kube, namespace, "llama-70b") == good_detail
    assert st["lastPlanTime"] == good["lastPlanTime"] and good_detail["classes"]["chat"]["source"] == "kvplan"
    text = str(body["status"])
    assert PASSWORD not in text and "BEGIN CERTIFICATE" not in text


def test_class_label_with_over_a_thousand_values_on_the_real_prometheus(prometheus):
    end = time.time() - 30
    window = Window(end_unix_s=end, duration_s=600, step_s=15)
    series = [HistogramSeries(labels={"request_id": f"req-{i}"}, output_tokens=[10 + i], arrival_s=[60.0],
                              buckets=(16.0, 256.0), metric="router_output_tokens") for i in range(1100)]
    prometheus.backfill(series, window)
    raw = {"groups": [{"name": "a", "deployment": "a", "model": "llama-8b", "nodePool": {"gpuCount": 1},
                       "layouts": [{"tp": 1}]}],
           "classes": [{"name": "chat", "inputTokens": 10, "maxOutputTokens": 512, "costs": {"preemption": 2,
                        "waste": 1}, "history": {"source": "custom", "classValue": "req-1"}}],
           "historySources": [{"name": "custom", "metric": "router_output_tokens", "classLabel": "request_id",
                               "selector": ""}],
           "prometheus": {"url": prometheus.url, "lookback": "10m", "windows": 2}}
    client_ = PromClient(prometheus.url, timeout_s=10)
    with pytest.raises(PromError) as info:
        observe_histories(client_, parse_spec(raw), "ns", now=end)
    assert info.value.reason == C.TOO_MANY_SERIES and "request_id" in str(info.value)
    assert client_.requests_sent == 1
