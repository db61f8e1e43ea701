"""``kvplan-dev twin``: the whole loop on this machine, once (dev/test tooling).

1. **twin**: :class:`.twin.Twin` with the example's node pools (two on-demand A100-80GB nodes and one spot node,
   8 GPUs each, labelled as GKE labels them);
2. **install**: the chart's CRDs and RBAC (``helm template``, as the demo does), ``examples/vllm-deployments.yaml``
   (stock vLLM: TP=8, the hand-written router ConfigMap), until every Deployment is available;
3. **before**: a segment of the bundled Azure 2023 conversation trace replayed against the stock fleet, routed by
   the hand-written router ConfigMap's weights (in the replayer: no gateway runs here), with each request's class
   (prompt length, :data:`kvplan_dev.demo_series.CLASS_SPLIT`) in ``x-gateway-inference-objective``;
4. **kvplan**: the operator under the chart's ServiceAccount, then ``examples/kvplan-70b-stock.yaml`` (vLLM's own
   series) with the twin's changes only: the local Prometheus, ``lookback``/``windows``/``interval`` and
   ``minSamples`` scaled to minutes of history (:class:`ScenarioConfig`). The operator plans from what Prometheus
   scraped, re-lays-out within its budget, and the pods roll;
5. **after**: the same segment again, routed by the weights the operator wrote;
6. **report**: one JSON object with ``before``, ``after``, ``examples``, ``calibration``, ``cycles``.

Each phase also holds, per pod, the preemptions vLLM counted (``vllm:num_preemptions_total``) and the tokens it
generated, against what the replayer received. ``calibration`` is the operator's own ``status.calibration``
(predicted against realised per class); ``revisions`` each Deployment's rollout revision once settled (1: never
rolled). A rollout that cannot finish (a Deployment past its progress deadline, a
Pod the scheduler finds no room for once nothing else can move: :mod:`.rollout_state`) ends the run with
``rollout`` and ``error`` saying which, and no ``after``.
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import yaml

from kvplan_dev.demo_series import class_of
from kvplan_dev.openmetrics import read_trace
from kvplan_dev.twin.nodes import NodePool
from kvplan_dev.twin.replay import ReplayRequest, WeightedRoutes, replay, summarize
from kvplan_dev.twin.rollout_state import stuck_reason
from kvplan_dev.twin.twin import Twin, TwinConfig

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO / "kvcore" / "data" / "traces" / "azure2023_conv.csv"
EXAMPLE = REPO / "examples" / "kvplan-70b-stock.yaml"
DEPLOYMENTS = REPO / "examples" / "vllm-deployments.yaml"
HEADER = "x-gateway-inference-objective"
GKE_POOL = "cloud.google.com/gke-nodepool"
POOLS = [NodePool("a100-80-ondemand", "A100-80GB", count=2, labels=((GKE_POOL, "a100-80-ondemand"),)),
         NodePool("a100-80-spot", "A100-80GB", count=1, labels=((GKE_POOL, "a100-80-spot"),
                                                               ("cloud.google.com/gke-spot", "true")))]
"""The example's pools: ``interactive`` 16 GPUs on demand, ``batch`` 8 on spot (without the spot taint, so the stock
batch Deployment, which does not tolerate it, can run before kvplan writes the pool's tolerations)."""
STOCK_CLASS = {"chat": "interactive", "code": "interactive", "batch": "batch"}
"""Trace class (prompt length) -> the stock example's class (its groups' histories)."""
Progress = Callable[[str], None]


@dataclass
class ScenarioConfig:
    """The scenario's size (seconds are trace seconds unless named otherwise)."""

    phase_s: float = 90.0
    start_s: float = 0.0
    rate_scale: float = 0.2
    """Share of the segment's requests kept (seeded thinning): the trace's 5.5 requests/s is more than two cores
    stream to."""
    max_model_len: int = 8192
    lookback: str = "5m"
    windows: int = 1
    interval: str = "60s"
    min_samples: int = 5
    ttft_slo_s: float = 2.0
    tpot_slo_s: float = 0.2
    guard_s: float = 1200.0
    """Only stops a hung run (waits are for conditions)."""
    seed: int = 0
    twin: TwinConfig = field(default_factory=lambda: TwinConfig(pools=list(POOLS)))


def segment(cfg: ScenarioConfig) -> list[ReplayRequest]:
    """The replayed requests: trace rows in ``[start_s, start_s + phase_s)``, thinned by ``rate_scale``, prompts
    clipped so prompt + output fits ``max_model_len``."""
    rng = random.Random(cfg.seed)
    out = []
    for row in read_trace(TRACE):
        if not cfg.start_s <= row.arrival_s < cfg.start_s + cfg.phase_s or rng.random() >= cfg.rate_scale:
            continue
        output = max(1, min(row.output_tokens, cfg.max_model_len // 2))
        prompt = max(1, min(row.input_tokens, cfg.max_model_len - output - 1))
        klass = class_of(row.input_tokens)
        out.append(ReplayRequest(row.arrival_s - cfg.start_s, klass, prompt, output, headers={HEADER: klass}))
    return out


def example_plan(cfg: ScenarioConfig, prometheus_url: str) -> dict[str, Any]:
    """The stock example with the twin's Prometheus and its minutes-long history."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    spec = doc["spec"]
    spec["prometheus"].update({"url": prometheus_url, "lookback": cfg.lookback, "windows": cfg.windows})
    spec["replan"]["interval"] = cfg.interval
    for c in spec["classes"]:
        c.setdefault("history", {})["minSamples"] = cfg.min_samples
    return doc  # type: ignore[no-any-return]


class _World:
    """Reads of the twin the scenario needs (kubectl JSON, Prometheus queries)."""

    def __init__(self, twin: Twin, namespace: str) -> None:
        assert twin.cluster is not None and twin.prometheus is not None
        self.cluster, self.prom_url, self.ns = twin.cluster, twin.prometheus.url, namespace

    def get(self, *args: str) -> Any:
        return json.loads(self.cluster.kubectl("-n", self.ns, "get", *args, "-o", "json").stdout)

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.prom_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.loads(resp.read())["data"]["result"]  # type: ignore[no-any-return]

    def settled(self) -> bool:
        """Every Deployment rolled out: observed, all replicas updated and ready, none left over."""
        for dep in self.get("deployments")["items"]:
            st, want = dep.get("status", {}), dep["spec"].get("replicas", 1)
            if not (st.get("observedGeneration") == dep["metadata"]["generation"]
                    and st.get("updatedReplicas") == want == st.get("readyReplicas") == st.get("replicas")):
                return False
        return True

    def stuck(self) -> str:
        """Why the rollout cannot finish ('' while it can): a Deployment past its progress deadline, or the
        rollout's fixed point with a Pod the scheduler has no room for (:mod:`.rollout_state`; e.g. new pods that
        need GPUs the old ones hold)."""
        deployments = self.get("deployments")["items"]
        for dep in deployments:
            for c in dep.get("status", {}).get("conditions", []):
                if c["type"] == "Progressing" and c["status"] == "False":
                    return f"Deployment {dep['metadata']['name']}: {c.get('reason')}: {c.get('message')}"
        return stuck_reason(deployments, self.get("replicasets")["items"], self.get("pods")["items"],
                            self.get("nodes")["items"])

    def routes(self, router: str, key: str, class_map: dict[str, str], seed: int) -> WeightedRoutes:
        """The router ConfigMap's weights (kvplan.v1: class -> group weights; group -> Service) over each Service's
        ready Pods' IPs. A terminating Pod is left out, as the EndpointSlice controller marks its endpoint not
        ready: a rollout counts as settled while an old Pod is still stopping, and the agent then stops its
        server mid-request."""
        doc = json.loads(self.get("configmap", router)["data"][key])
        pods = self.get("pods")["items"]
        services = {s["metadata"]["name"]: s["spec"]["selector"] for s in self.get("services")["items"]}

        def urls(service: str) -> list[str]:
            sel = services.get(service, {})
            return sorted(f"http://{p['status']['podIP']}:8000" for p in pods
                          if all(p["metadata"].get("labels", {}).get(k) == v for k, v in sel.items())
                          and not p["metadata"].get("deletionTimestamp")  # as an EndpointSlice: not ready
                          and any(c["type"] == "Ready" and c["status"] == "True"
                                  for c in p.get("status", {}).get("conditions", [])))

        table = {}
        for trace_class, plan_class in class_map.items():
            entry = doc["classes"].get(plan_class) or doc["classes"].get(trace_class) or {}
            table[trace_class] = [(urls(doc["groups"][g]["service"]), float(w))
                                  for g, w in (entry.get("weights") or {}).items() if g in doc["groups"]]
        return WeightedRoutes(table, seed=seed)

    def engine_counts(self) -> dict[str, dict[str, float]]:
        """Per pod: vLLM's own preemption and generated-token counters, as scraped."""
        out: dict[str, dict[str, float]] = {}
        for name, metric in (("preemptions", "vllm:num_preemptions_total"),
                             ("generation_tokens", "vllm:generation_tokens_total")):
            for r in self.query(f'sum by (pod) ({metric}{{namespace="{self.ns}"}})'):
                out.setdefault(r["metric"]["pod"], {})[name] = float(r["value"][1])
        return out


class _Background:
    """Traffic while the operator plans and the pods roll, as in production: the segments after the measured one,
    replayed one after the other (routes re-read each time) until :meth:`stop`."""

    def __init__(self, world: _World, cfg: ScenarioConfig, class_map: dict[str, str]) -> None:
        self.world, self.cfg, self.class_map = world, cfg, class_map
        self.stopping = threading.Event()
        self.sent = 0
        self.failed = 0
        self.thread = threading.Thread(target=self._run, name="twin-background-load", daemon=True)

    def _run(self) -> None:
        k = 1
        while not self.stopping.is_set():
            seg = segment(replace(self.cfg, start_s=self.cfg.start_s + k * self.cfg.phase_s, seed=self.cfg.seed + k))
            try:
                routes = self.world.routes("llama-70b-router", "routing.json", self.class_map, self.cfg.seed + k)
                timings = replay(seg, routes, "llama-70b", guard_s=self.cfg.phase_s * 3)
            except Exception:  # noqa: BLE001 - a rollout may leave no ready pod for a moment; try the next segment
                time.sleep(2.0)
                continue
            self.sent += len(timings)
            self.failed += sum(1 for t in timings if t.error)
            k += 1

    def stop(self) -> dict[str, int]:
        self.stopping.set()
        self.thread.join(timeout=self.cfg.phase_s * 4)
        return {"sent": self.sent, "failed": self.failed}


def _plan_groups(status: dict[str, Any]) -> dict[str, Any]:
    return {g: {k: v.get(k) for k in ("tp", "pp", "replicas")}
            for g, v in ((status.get("plan") or {}).get("groups") or {}).items()}


def _wait(what: str, check: Callable[[], Any], guard_s: float, progress: Progress) -> Any:
    deadline = time.monotonic() + guard_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(1.0)
    raise TimeoutError(f"twin: {what}: not reached within the {guard_s:.0f} s guard")


def _phase(world: _World, requests: list[ReplayRequest], routes: WeightedRoutes, cfg: ScenarioConfig,
           gpus: int) -> dict[str, Any]:
    counts_before = world.engine_counts()
    began = time.monotonic()
    timings = replay(requests, routes, "llama-70b", guard_s=cfg.guard_s)
    took = time.monotonic() - began
    time.sleep(cfg.twin.scrape_s * 2.5)  # two scrapes after the last token
    counts_after = world.engine_counts()
    engine = {pod: {k: v - counts_before.get(pod, {}).get(k, 0.0) for k, v in c.items()}
              for pod, c in counts_after.items()}
    received = sum(t.tokens for t in timings)
    summary = summarize(timings, ttft_slo_s=cfg.ttft_slo_s, tpot_slo_s=cfg.tpot_slo_s, duration_s=took, gpus=gpus)
    return {**summary, "seconds": round(took, 1), "tokens_received": received,
            "vllm": {"preemptions": sum(c.get("preemptions", 0.0) for c in engine.values()),
                     "generation_tokens": sum(c.get("generation_tokens", 0.0) for c in engine.values()),
                     "per_pod": engine}}


def run_scenario(python: Path, cfg: ScenarioConfig | None = None, progress: Progress = print) -> dict[str, Any]:
    """The scenario (module docstring); the report."""
    from kvplan_dev import demo
    from kvplan_dev.tools import locate_tools

    cfg = cfg or ScenarioConfig()
    tools = locate_tools()
    report: dict[str, Any] = {"config": {k: v for k, v in asdict(cfg).items() if k != "twin"}, "before": {},
                              "after": {}, "examples": {}, "calibration": {}, "cycles": {}}
    requests = segment(cfg)
    gpus = sum(p.count * p.gpus for p in cfg.twin.pools)
    with Twin(python, cfg.twin, tools=tools) as twin:
        assert twin.cluster is not None and twin.prometheus is not None
        progress(f"twin up: {twin.info()['nodes']} (Prometheus {twin.prometheus.url})")
        workdir = twin.workdir
        demo._install(twin.cluster, tools, workdir)
        world = _World(twin, demo.NAMESPACE)
        _wait("ServiceAccount demo/default", lambda: twin.cluster.kubectl(  # type: ignore[union-attr]
            "-n", demo.NAMESPACE, "get", "sa", "default", check=False).returncode == 0, cfg.guard_s, progress)
        twin.cluster.kubectl("-n", demo.NAMESPACE, "create", "secret", "generic", "hf-token",
                             "--from-literal=token=unused")
        twin.cluster.kubectl("-n", demo.NAMESPACE, "apply", "-f", str(DEPLOYMENTS))
        _wait("the stock Deployments available", world.settled, cfg.guard_s, progress)
        progress(f"before: replaying {len(requests)} requests ({cfg.phase_s:g} trace s) on the stock fleet ...")
        report["before"] = _phase(world, requests, world.routes("llama-70b-router", "routing.json",
                                                                 STOCK_CLASS, cfg.seed), cfg, gpus)
        (workdir / "operator").mkdir(exist_ok=True)
        sa = twin.cluster.service_account_kubeconfig(demo.OPERATOR_NAMESPACE, demo.RELEASE,
                                                     path=workdir / "operator" / "kubeconfig")
        operator = demo._start_operator(sa, workdir / "operator")
        try:
            plan = example_plan(cfg, twin.prometheus.url)
            load = _Background(world, cfg, STOCK_CLASS)
            load.thread.start()
            applied = time.monotonic()
            twin.cluster.kubectl("-n", demo.NAMESPACE, "apply", "-f", "-", input_text=json.dumps(plan))
            progress("kvplan: waiting for Ready from the scraped series ...")
            body = demo._wait_ready(twin.cluster, operator, plan["metadata"]["name"], cfg.guard_s)
            ready = demo.condition(body, "Ready")
            report["examples"][EXAMPLE.name] = {"ready": ready.get("status") == "True", "reason": ready.get("reason"),
                                                "seconds": round(time.monotonic() - applied, 1)}
            name = plan["metadata"]["name"]
            report["plan"] = _plan_groups(world.get("kvplan", name).get("status", {}))
            outcome = _wait("the rollout settled or stuck", lambda: "settled" if world.settled() else world.stuck(),
                            cfg.guard_s, progress)
            report["background"] = load.stop()
            report["rollout"] = outcome
            report["revisions"] = {d["metadata"]["name"]: int((d["metadata"].get("annotations") or {}).get(
                "deployment.kubernetes.io/revision", 0)) for d in world.get("deployments")["items"]}
            if outcome == "settled":
                progress(f"after: plan {report['plan']}; replaying the same segment ...")
                report["after"] = _phase(world, requests, world.routes("llama-70b-router", "routing.json",
                                                                        STOCK_CLASS, cfg.seed), cfg, gpus)
            else:
                report["error"] = f"the rollout did not finish: {outcome}"
                progress(report["error"])
            status = world.get("kvplan", name).get("status", {})
            report["cycles"] = {"plan_id": (status.get("plan") or {}).get("id"),
                                "solve_seconds": (status.get("plan") or {}).get("solveSeconds"),
                                "layout_changes": len(status.get("layoutChanges") or [])}
            report["calibration"] = status.get("calibration") or {}
        finally:
            if "load" in locals():
                load.stop()
            operator.stop()
    return report


__all__ = ["ScenarioConfig", "example_plan", "run_scenario", "segment"]
