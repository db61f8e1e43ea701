"""The operator's re-plan cycle at fleet scale (``python benchmarks/replan.py --fleet``).

A KVPlan of 256 classes x 64 groups (:mod:`kvplan_dev.fleet`: kvcore's seeded fleet as a KVPlan, 64 Deployments)
against the local control plane (kube-apiserver + etcd, ``kvplan_dev.cluster``) and Debian's Prometheus 2.42
backfilled with 6 h of the series the kvplan plugin and vLLM export for that fleet: per pod and class
``kvplan_request_output_tokens{kvplan_class, model_name}`` (87 buckets + ``+Inf``, every class on two pods), per
pod ``cache_config_info``, ``kv_cache_usage_perc`` and ``num_preemptions_total``, every series with the labels a
Kubernetes scrape adds, one sample per ``--scrape`` seconds. In the same run and on the same Prometheus, a KVPlan
with the first 16 of those classes (its own namespace, Deployments and series; same 64 groups) for the ratios.

One cycle = ``reconcile()``, timed per phase (``Outcome.phases``): observe (Kubernetes reads, the plan's detail,
the Prometheus requests (timed at the client, the answers' JSON parse included) and the histories (the answers
checked and binned into per-class histories), decide (the planner), build, apply (the intent status write and the patches: state and
router ConfigMaps, 64 Deployments), record (the plan's detail ConfigMaps and the status patch). Prometheus queries
are counted at the client. Cycles: ``cold`` (first reconcile: every object written), ``warm`` (the same data:
nothing but the record), ``slid`` (the lookback slid back ``k`` x 10 min: other counts in every window, as on
fresh data). Sizes after the cycles: the status and the whole KVPlan object (JSON bytes), every ConfigMap's data,
the largest Deployment, ``kubectl get -o yaml`` / ``describe`` lines, and the status the operator wrote before
issue 16 (per class maps and the dense kvcore plan in status), computed from the same plan.

``--knobs Auto`` (default, as a KVPlan gets by default): every group's engine knobs from kvcore's knob rule, whose
answers the operator reuses (a KnobCache, as handlers.py keeps one) while a group's situation holds; ``--knobs
Formula``: kvplan 0.1's --max-num-seqs formula only (``spec.groups[].engine.knobs``).

Targets: <= 10 s per cycle at 256 x 64; the same number of Prometheus queries at 16 and 256 classes; status well
under 256 KiB; every ConfigMap under 1 MiB.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
STATUS_LIMIT = 256 * 1024
CONFIGMAP_LIMIT = 1024 * 1024
CYCLE_LIMIT_S = 10.0


def _old_status_bytes(status: dict[str, Any], doc: dict[str, Any], plan: Any) -> int:
    """What status would weigh as written before issue 16: ``plan.classes`` with dense maps over every group and
    ``lastGoodPlan`` (the dense kvcore plan as a JSON string) in it."""
    groups = list(status["plan"]["groups"])
    classes = {c: {**v, "routing": {g: v["routing"].get(g, 0.0) for g in groups},
                   "prefixCacheFraction": {g: v["prefixCacheFraction"].get(g, 0.0) for g in groups}}
               for c, v in doc["classes"].items()}
    old = {**status, "plan": {**status["plan"], "classes": classes, "notes": doc["notes"]},
           "lastGoodPlan": plan.model_copy(update={"diff": None}).model_dump_json(), "diff": doc["diff"]}
    return len(json.dumps(old))


def run(*, classes: int, groups: int, small: int, cycles: int, scrape_s: float, knobs: str = "Auto",
        rule_work: int | None = None) -> dict[str, Any]:
    from kubernetes import client, config

    from kvcore import knobs_for_plan
    from kvcore import plan as kv_plan
    from kvplan_dev.cluster import LocalCluster
    from kvplan_dev.fleet import Fleet
    from kvplan_dev.openmetrics import CountedHistogramSeries, Window
    from kvplan_dev.prom import LocalPrometheus
    from kvplan_dev.tools import PROMETHEUS, PROMTOOL, Tools, apiserver_path, etcd_path, helm_path, kubectl_path
    from kvplan_operator.knob_cache import KnobCache
    from kvplan_operator.kube import Kube
    from kvplan_operator.targets.plandetail import read_detail
    from kvplan_operator.prom import PromClient, PromConnection
    from kvplan_operator.reconcile import Deps, reconcile

    fleets = {"fleet": (Fleet(classes, groups, namespace="fleet"), classes),
              f"fleet{small}": (Fleet(classes, groups, namespace=f"fleet{small}"), small)}
    tools = Tools(apiserver_path(), etcd_path(), kubectl_path(), helm_path(), PROMETHEUS, PROMTOOL)
    out: dict[str, Any] = {"classes": classes, "groups": groups, "small": small, "scrape_s": scrape_s,
                           "knobs": knobs, "runs": {}}
    with LocalCluster(tools) as cluster, LocalPrometheus(tools) as prom:
        cluster.kubectl("apply", "-f", str(REPO / "crds" / "kvplans.kvplan.io.yaml"))
        cluster.wait_established(["kvplans.kvplan.io"])
        end = time.time() - 120
        window = Window(end_unix_s=end, duration_s=6 * 3600, step_s=scrape_s)
        t0 = time.perf_counter()
        series = [s for fleet, n in fleets.values() for s in fleet.series(window, classes=n)]
        prom.backfill(series, window)
        out["backfill_s"] = time.perf_counter() - t0
        out["series"] = sum(len(s.buckets) + 3 if isinstance(s, CountedHistogramSeries) else 1 for s in series)
        out["apiserver"], out["prometheus"] = cluster.apiserver_version, prom.version
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        kube = Kube(api)
        for ns, (fleet, n) in fleets.items():
            client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
            for body in fleet.deployments():
                client.AppsV1Api(api).create_namespaced_deployment(ns, body)
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                "kvplan.io", "v1beta1", ns, "kvplans", {"apiVersion": "kvplan.io/v1beta1", "kind": "KVPlan",
                                                         "metadata": {"name": "fleet"},
                                                         "spec": fleet.spec(prom.url, classes=n, knobs=knobs)})
        for ns, (fleet, n) in fleets.items():
            plans: list[Any] = []
            warm: list[bool] = []
            clients: list[PromClient] = []

            knob_s: list[float] = [0.0]

            def planner(instance: Any, *, previous: Any = None) -> Any:
                warm.append(previous is not None)
                plans.append(kv_plan(instance, previous=previous))
                return plans[-1]

            def knob_rule(plan_: Any, instance: Any, **kw: Any) -> Any:
                t = time.perf_counter()
                try:
                    return knobs_for_plan(plan_, instance, **kw)
                finally:
                    knob_s[0] += time.perf_counter() - t

            class Timed(PromClient):
                """The operator's client, timing its requests (the answer's JSON parse included)."""

                seconds = 0.0

                def _get(self, path: str, params: Any, what: str) -> Any:
                    t = time.perf_counter()
                    try:
                        return super()._get(path, params, what)
                    finally:
                        self.seconds += time.perf_counter() - t

            def factory(conn: PromConnection) -> PromClient:
                clients.append(Timed.connect(conn))
                return clients[-1]

            cache = KnobCache()  # as the operator keeps one (handlers.py): the knob rule's answers are reused
            rows = []
            kinds = ["cold"] + ["warm"] * cycles + ["slid"] * cycles
            for k, kind in enumerate(kinds):
                now = end + 30 - (600.0 * (k - cycles) if kind == "slid" else 0.0)
                knob_s[0] = 0.0
                deps = Deps(kube=kube, prom_factory=factory, planner=planner, clock=lambda now=now: now,
                            knobs=knob_rule, knob_cache=cache,
                            **({} if rule_work is None else {"rule_work": rule_work}))
                before = sum(c.requests_sent for c in clients)
                http_before = sum(getattr(c, "seconds", 0.0) for c in clients)
                body = kube.get_kvplan(ns, "fleet")
                t = time.perf_counter()
                result = reconcile(body, deps)
                wall = time.perf_counter() - t
                if not result.ok:
                    raise SystemExit(f"{ns}: {kind} reconcile failed: {result.reason}: {result.message}")
                after = kube.get_kvplan(ns, "fleet")
                st = after["status"]
                total, bound = st["objective"]["total"], st["plan"].get("lowerBound")
                phases = dict(result.phases)
                phases["requests"] = sum(getattr(c, "seconds", 0.0) for c in clients) - http_before
                phases["histories"] = phases.get("prometheus", 0.0) - phases["requests"]
                phases["knobs"] = knob_s[0]
                rows.append({"cycle": kind, "total_s": wall, "phases": phases, "warm_start": warm[-1],
                             "gap": (total - bound) / total if bound is not None else None,
                             "queries": sum(c.requests_sent for c in clients) - before, "writes": len(result.changed),
                             "status_bytes": len(json.dumps(after["status"])), "object_bytes": len(json.dumps(after)),
                             "method": after["status"]["plan"]["method"],
                             "rules": dict(after["status"]["plan"].get("rules") or {})})
            detail = read_detail(kube, ns, "fleet")
            assert detail.doc is not None, detail.problem
            cms = client.CoreV1Api(api).list_namespaced_config_map(ns).items
            sizes = {cm.metadata.name: sum(len(v.encode()) for v in (cm.data or {}).values()) for cm in cms}
            deps_json = [len(json.dumps(api.sanitize_for_serialization(d)))
                         for d in client.AppsV1Api(api).list_namespaced_deployment(ns).items]
            yaml_lines = cluster.kubectl("-n", ns, "get", "kvp", "fleet", "-o", "yaml").stdout.count("\n")
            describe_lines = cluster.kubectl("-n", ns, "describe", "kvp", "fleet").stdout.count("\n")
            status = kube.get_kvplan(ns, "fleet")["status"]
            out["runs"][ns] = {"classes": n, "rows": rows, "configmaps": sizes, "deployment_max_bytes": max(deps_json),
                               "yaml_lines": yaml_lines, "describe_lines": describe_lines,
                               "old_status_bytes": _old_status_bytes(status, dict(detail.doc), plans[-1]),
                               "detail_bytes": status["plan"]["detail"]["bytes"]}
        api.close()
    return out


def _gaps(rows: list[dict[str, Any]]) -> str:
    """The method and the worst certified gap (objective - lower bound) / objective of these cycles."""
    gaps = [r["gap"] for r in rows if r["gap"] is not None]
    method = "/".join(sorted({r["method"] for r in rows}))
    return f"{method}, {max(gaps):.1e}" if gaps else f"{method}, no bound"


def summarise(res: dict[str, Any]) -> tuple[list[str], bool]:
    """Markdown tables and the verdict."""
    lines = [f"Re-plan cycle at fleet scale: {res['groups']} groups, Prometheus {res['prometheus']} backfilled with "
             f"{res['series']:,} series over 6 h (one sample per {res['scrape_s']:g} s, {res['backfill_s']:.0f} s to "
             f"backfill), engine knobs {res['knobs']} (knob cache as in the operator), "
             f"apiserver {res['apiserver']}", "",
             "| classes | cycle | n | median s | max s | observe | of which Prometheus requests | and histories | "
             "decide | of which planner | and knob rule | build | apply | record | queries | objects written | "
             "status KiB | warm start | method, gap |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    ok = True
    medians: dict[tuple[int, str], float] = {}
    queries: dict[int, set[int]] = {}
    for run in res["runs"].values():
        for kind in ("cold", "warm", "slid"):
            rows = [r for r in run["rows"] if r["cycle"] == kind]
            if not rows:
                continue
            tot = [r["total_s"] for r in rows]
            med = {p: statistics.median(r["phases"].get(p, 0.0) for r in rows) for p in (
                "observe", "requests", "histories", "decide", "planner", "knobs", "build", "apply", "record")}
            medians[(run["classes"], kind)] = statistics.median(tot)
            queries.setdefault(run["classes"], set()).update(r["queries"] for r in rows)
            lines.append(f"| {run['classes']} | {kind} | {len(rows)} | {statistics.median(tot):.2f} | {max(tot):.2f} | "
                         + " | ".join(f"{med[p]:.2f}" for p in med)
                         + f" | {max(r['queries'] for r in rows)} | {max(r['writes'] for r in rows)} | "
                         f"{max(r['status_bytes'] for r in rows) / 1024:.1f} | "
                         f"{sum(r['warm_start'] for r in rows)}/{len(rows)} | {_gaps(rows)} |")
    big = max(res["runs"].values(), key=lambda r: r["classes"])
    worst = max(r["total_s"] for r in big["rows"])
    status_max = max(r["status_bytes"] for r in big["rows"])
    cm_max = max(big["configmaps"].values())
    same_queries = len({q for qs in queries.values() for q in qs}) == 1
    lines += ["", "| classes | status KiB (before issue 16: per class maps + lastGoodPlan) | KVPlan object KiB | "
              "plan detail KiB | largest ConfigMap KiB | largest Deployment KiB | `get -o yaml` lines | "
              "`describe` lines |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for run in res["runs"].values():
        st = max(r["status_bytes"] for r in run["rows"]) / 1024
        lines.append(f"| {run['classes']} | {st:.1f} ({run['old_status_bytes'] / 1024:.0f}, "
                     f"{run['old_status_bytes'] / 1024 / st:.0f}x) | "
                     f"{max(r['object_bytes'] for r in run['rows']) / 1024:.1f} | {run['detail_bytes'] / 1024:.0f} | "
                     f"{max(run['configmaps'].values()) / 1024:.0f} ({max(run['configmaps'], key=run['configmaps'].get)}) "
                     f"| {run['deployment_max_bytes'] / 1024:.0f} | {run['yaml_lines']} | {run['describe_lines']} |")
    ratio = [f"{kind} {medians[(big['classes'], kind)] / medians[(res['small'], kind)]:.1f}x"
             for kind in ("cold", "warm", "slid") if (res["small"], kind) in medians]
    lines.append("")
    for run in res["runs"].values():  # the engine-model rules' work budget (operator/decide/rules.py)
        rules = [(r["cycle"], r.get("rules") or {}) for r in run["rows"]]
        lines.append(f"{run['classes']} classes, engine-model rules per cycle (simulated requests, pairs run, pairs "
                     "pending): " + "; ".join(f"{kind} {rl.get('work', 0):,}, {len(rl.get('ran') or [])}, "
                                              f"{sum(len(v) for v in (rl.get('pending') or {}).values())}"
                                              for kind, rl in rules)
                     + (f" (budget {rules[0][1]['budget']:,})" if rules and "budget" in rules[0][1] else ""))
    lines.append(f"{big['classes']} vs {res['small']} classes, median cycle: " + ", ".join(ratio)
                 + f"; Prometheus queries per cycle: {sorted(queries[big['classes']])} vs "
                 f"{sorted(queries[res['small']])}")
    verdicts = [(worst <= CYCLE_LIMIT_S, f"worst cycle {worst:.2f} s vs {CYCLE_LIMIT_S:g} s"),
                (same_queries, "same Prometheus queries at both sizes"),
                (status_max < STATUS_LIMIT, f"status {status_max / 1024:.1f} KiB vs {STATUS_LIMIT // 1024} KiB"),
                (cm_max < CONFIGMAP_LIMIT, f"largest ConfigMap {cm_max / 1024:.0f} KiB vs 1 MiB")]
    for good, text in verdicts:
        ok = ok and good
        lines.append(f"{text}: {'PASS' if good else 'FAIL'}")
    return lines, ok
