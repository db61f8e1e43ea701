"""``kvplan-dev demo``: the main job on the embedded default, end to end, on this machine, in minutes.

Phases (each one prints a line to stderr; ``--json`` puts the one result object on stdout):

1. **history**: the bundled Azure 2023 conversation trace (``kvcore/data/traces/azure2023_conv.csv``) is played once
   an hour over the last 6 hours through the example fleet as it runs before kvplan, and every pod's series are
   backfilled into a local Prometheus with promtool in exactly the shape real exporters produce
   (:mod:`kvplan_dev.demo_series`): stock vLLM's ``vllm:request_generation_tokens{model_name="llama-70b"}`` and
   engine series per pod, and kvplan's plugin's per-class ``kvplan_request_output_tokens{kvplan_class}``, the
   class being the prompt length (:data:`CLASS_SPLIT`: chat < 1000 tokens <= code < 2000 tokens <= batch).
2. **control plane**: etcd + kube-apiserver on loopback (:class:`kvplan_dev.cluster.LocalCluster`).
3. **install**: the chart's CRDs, then the chart's ServiceAccount and RBAC rendered with ``helm template``
   (watching namespace ``demo`` only), exactly as ``helm install`` would create them.
4. **operator**: ``kvplan-operator --namespace demo --peering kvplan-operator`` (the chart's default args) as a
   subprocess whose kubeconfig carries a TokenRequest token of the chart's ServiceAccount, so every call it makes
   is authorised by the chart's RBAC.
5. **apply**: ``examples/vllm-deployments.yaml``, then ``examples/kvplan-70b.yaml`` (per-class histories from kvplan's
   plugin; ``--example stock`` applies ``examples/kvplan-70b-stock.yaml``, stock vLLM metrics alone) with
   ``spec.prometheus.url`` pointed at the local Prometheus (the only change made to the example).
6. **wait** until the KVPlan is ``Ready=True`` (or a terminal reason, or the timeout).
7. **report**: the plan, and per Deployment and for the router ConfigMap what changed, before -> after.
8. **stop** everything started here, by PID, even on failure or Ctrl-C.

The control plane has no scheduler or kubelet, so no vLLM pod runs: the demo shows decisions and patches.
It needs the repository checkout (charts/ and examples/ are not package data).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import yaml

from kvcore.cli.args import OneLineParser, float_arg
from kvcore.cli.args import report as report_error
from kvcore import InputError
from kvplan_dev.demo_report import deployment_view, plan_lines, text_diff, text_report, view_changes
from kvplan_dev.demo_series import CLASS_SPLIT, HOURS, MAX_MODEL_LEN, MODEL, class_of

__all__ = ["CLASS_SPLIT", "MAX_MODEL_LEN", "MODEL", "class_of", "main", "run", "split_rows"]

REPO = Path(__file__).resolve().parent.parent
TRACE = REPO / "kvcore" / "data" / "traces" / "azure2023_conv.csv"
CHART = REPO / "charts" / "kvplan-operator"
EXAMPLE_PLAN = REPO / "examples" / "kvplan-70b.yaml"
EXAMPLES = {"plugin": EXAMPLE_PLAN, "stock": REPO / "examples" / "kvplan-70b-stock.yaml"}
"""``--example``: plugin (per-class histories from kvplan's vLLM plugin) or stock (stock vLLM metrics alone)."""
EXAMPLE_DEPLOYMENTS = REPO / "examples" / "vllm-deployments.yaml"

NAMESPACE = "demo"
"""Where the example objects go; the only namespace the operator watches."""
OPERATOR_NAMESPACE = "kvplan-system"
"""Where the chart's ServiceAccount lives (the release namespace)."""
RELEASE = "kvplan-operator"
"""Helm release name; with the chart's naming this makes every object ``kvplan-operator``."""
HISTORY_HOURS = float(HOURS)
"""Hours of backfilled history; matches the examples' ``spec.prometheus.lookback: 6h``."""
SCRAPE_S = 60.0
"""Scrape interval of the backfilled series, seconds (a minute keeps the backfill to ~200k samples)."""
RBAC_KINDS = frozenset({"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                        "KopfPeering", "ClusterKopfPeering"})
"""What the demo takes from the rendered chart: identity, RBAC and the kopf peering object (the operator itself
runs as a subprocess, not a pod)."""
TERMINAL_REASONS = frozenset({
    "InvalidSpec", "Infeasible", "PlannerError", "LayoutExceedsNode", "ContainerNotFound",
})
"""Ready=False reasons that no amount of waiting fixes; the demo stops waiting on them."""

def log(message: str) -> None:
    """Progress goes to stderr so ``--json`` keeps stdout to one object."""
    print(f"[demo] {message}", file=sys.stderr, flush=True)


# --- pure parts ---------------------------------------------------------------------------------------------------
def split_rows(rows: Sequence[Any]) -> dict[str, list[Any]]:
    """Trace rows (with ``input_tokens``) per class, in trace order; every class present, possibly empty."""
    out: dict[str, list[Any]] = {name: [] for name, _, _ in CLASS_SPLIT}
    for row in rows:
        out[class_of(int(row.input_tokens))].append(row)
    return out


def rbac_documents(rendered: str) -> list[dict[str, Any]]:
    """The ServiceAccount, RBAC and peering objects of a ``helm template`` output."""
    return [doc for doc in yaml.safe_load_all(rendered) if isinstance(doc, dict) and doc.get("kind") in RBAC_KINDS]


#: A status 403 as a number of its own: not the milliseconds of a log timestamp (``16:53:44,403``) nor part of a
#: decimal (``0.403 s``).
_STATUS_403 = re.compile(r"(?<![\d.,:])403(?![\d.,])")


def forbidden_lines(text: str) -> list[str]:
    """Log lines that report an authorisation failure (the chart's RBAC missing something the operator uses)."""
    return [line for line in text.splitlines() if _STATUS_403.search(line) or "forbidden" in line.lower()]


def log_tail_text(path: Path) -> str:
    """A whole log file ('' when missing)."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def condition(body: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    """The condition of type ``kind`` in ``status.conditions``, or an empty mapping."""
    for cond in (body.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return {}


# --- the run ------------------------------------------------------------------------------------------------------
@dataclass
class Settings:
    """What ``run`` was asked for."""

    json: bool = False
    timeout_s: float = 240.0
    """Seconds to wait for Ready after the KVPlan is applied (a plan takes seconds; the first reconcile waits for
    kopf's start-up and the first Prometheus queries)."""
    keep_logs: Path | None = None
    standalone: bool = False
    """Run as the chart does with ``peering.enabled=false``: ``--standalone``, no peering object or its RBAC."""
    example: str = "plugin"
    """Which example KVPlan to apply (:data:`EXAMPLES`)."""
    operator_image: str | None = None
    """Run the operator from this container image (podman, :mod:`kvplan_dev.container`) instead of the venv's
    ``kvplan-operator``; ``make release`` passes the image it pushed, by digest."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's options, for ``kvplan-dev demo``'s sub-parser."""
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--timeout", type=float_arg(low=0.0, high=86400.0, low_open=True, unit=" s"),
                        default=Settings.timeout_s,
                        help="seconds to wait for the KVPlan to become Ready (default %(default)s)")
    parser.add_argument("--keep-logs", type=Path, default=None, metavar="DIR",
                        help="copy the operator/apiserver/Prometheus logs here before cleaning up")
    parser.add_argument("--standalone", action="store_true",
                        help="the chart with peering.enabled=false: kvplan-operator --standalone")
    parser.add_argument("--example", choices=sorted(EXAMPLES), default=Settings.example,
                        help="plugin: examples/kvplan-70b.yaml (per-class series of kvplan's vLLM plugin); stock: "
                             "examples/kvplan-70b-stock.yaml (stock vLLM metrics alone) (default %(default)s)")
    parser.add_argument("--operator-image", default=None, metavar="REF",
                        help="run the operator from this image with podman (e.g. the one `make release` pushed)")


def _settings(args: argparse.Namespace) -> Settings:
    keep = getattr(args, "keep_logs", None)
    if keep is not None and Path(keep).exists() and not Path(keep).is_dir():
        raise InputError("--keep-logs", f"{keep} exists and is not a directory")
    return Settings(json=bool(getattr(args, "json", False)),
                    timeout_s=float(getattr(args, "timeout", None) or Settings.timeout_s),
                    keep_logs=Path(keep) if keep else None, standalone=bool(getattr(args, "standalone", False)),
                    example=str(getattr(args, "example", None) or Settings.example),
                    operator_image=getattr(args, "operator_image", None))


def _kubectl_json(cluster: Any, *args: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(cluster.kubectl(*args, "-o", "json").stdout)
    return data


def _configmaps(cluster: Any) -> dict[str, dict[str, str]]:
    items = _kubectl_json(cluster, "-n", NAMESPACE, "get", "configmaps").get("items", [])
    return {item["metadata"]["name"]: dict(item.get("data") or {}) for item in items}


def _plan_with_classes(cluster: Any, name: str, plan: Mapping[str, Any] | None) -> dict[str, Any]:
    """``status.plan`` with its per-class part, ``classes``, read from the plan's detail ConfigMaps (the operator
    keeps it there, not in status: docs/operator.md, "Status and conditions")."""
    from kvplan_operator.targets.plandetail import decode

    items = _kubectl_json(cluster, "-n", NAMESPACE, "get", "configmaps").get("items", [])
    detail = decode(name, {item["metadata"]["name"]: item for item in items})
    return {**(plan or {}), "classes": dict(detail.published())}


def _deployments(cluster: Any) -> dict[str, dict[str, Any]]:
    items = _kubectl_json(cluster, "-n", NAMESPACE, "get", "deployments").get("items", [])
    return {item["metadata"]["name"]: item for item in items}


def _backfill(prometheus: Any, report: dict[str, Any]) -> None:
    from kvplan_dev.demo_series import PODS, engine_blocks, fleet_series
    from kvplan_dev.openmetrics import Window, read_trace

    rows = read_trace(TRACE)
    window = Window(end_unix_s=time.time() - 60.0, duration_s=HISTORY_HOURS * 3600.0, step_s=SCRAPE_S)
    series, per_class = fleet_series(rows, window)
    stats = prometheus.backfill(series, window)
    report["history"] = {
        "trace": str(TRACE.relative_to(REPO)), "requests": len(rows), "hours": HISTORY_HOURS,
        "plays": int(HISTORY_HOURS), "samples": sum(s.samples for s in stats),
        "split": "by prompt length: " + ", ".join(
            f"{name} [{low}, {high if high is not None else 'inf'})" for name, low, high in CLASS_SPLIT),
        "classes": {name: {"requests": n, "series": f'kvplan_request_output_tokens{{kvplan_class="{name}"}}'}
                    for name, n in per_class.items()},
        "deployments": {dep: {"pods": list(pods), "series": f'vllm:request_generation_tokens{{model_name="{MODEL}", '
                              f'pod=~"{dep}-..."}}', "num_gpu_blocks": engine_blocks()}
                        for dep, pods in PODS.items()},
    }


def wait_established(cluster: Any, crds: Sequence[str], timeout_s: float = 120.0) -> None:
    """Until every CRD is Established and served: :meth:`kvplan_dev.cluster.LocalCluster.wait_established`."""
    cluster.wait_established(crds, timeout_s=timeout_s)


def _install(cluster: Any, tools: Any, workdir: Path, *, standalone: bool = False) -> None:
    for namespace in (NAMESPACE, OPERATOR_NAMESPACE):
        cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("apply", "--server-side", "-f", str(REPO / "crds"))
    wait_established(cluster, ("kvplans.kvplan.io", "kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"))
    done = subprocess.run(
        [str(tools.helm), "template", RELEASE, str(CHART), "--namespace", OPERATOR_NAMESPACE,
         "--set", f"watchNamespaces={{{NAMESPACE}}}", "--set", f"peering.enabled={str(not standalone).lower()}"],
        capture_output=True, text=True, timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"helm template: exited {done.returncode}: {done.stderr.strip()}")
    rbac = rbac_documents(done.stdout)
    path = workdir / "chart-rbac.yaml"
    path.write_text(yaml.safe_dump_all(rbac, sort_keys=False))
    cluster.kubectl("apply", "-f", str(path))
    log("chart objects applied: " + ", ".join(f"{d['kind']}/{d['metadata']['name']}" for d in rbac))


def _start_operator(kubeconfig: Path, workdir: Path, *, standalone: bool = False, image: str | None = None) -> Any:
    from kvplan_dev.process import ManagedProcess, free_port

    if image is not None:
        from kvplan_dev.container import operator_in_container

        args = [f"--namespace={NAMESPACE}", "--standalone" if standalone else f"--peering={RELEASE}",
                f"--liveness=http://127.0.0.1:{free_port()}/healthz", f"--metrics-port={free_port()}"]
        return operator_in_container(image, kubeconfig, workdir, args)
    binary = Path(sys.executable).parent / "kvplan-operator"
    if not binary.exists():
        raise RuntimeError(f"{binary}: not installed; run `make venv`")
    # The chart's defaults for the operator-wide settings; the Prometheus URL is in the KVPlan.
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONSAFEPATH": "1",
           "KVPLAN_TIMER_TICK_S": "10", "KVPLAN_BACKOFF_BASE_S": "10", "MPLCONFIGDIR": str(workdir / "mpl")}
    env.pop("KUBERNETES_SERVICE_HOST", None)  # never mistake this for an in-cluster pod
    argv = [str(binary), f"--namespace={NAMESPACE}", "--standalone" if standalone else f"--peering={RELEASE}",
            f"--liveness=http://127.0.0.1:{free_port()}/healthz", f"--metrics-port={free_port()}"]
    return ManagedProcess("kvplan-operator", argv, workdir / "operator.log", env=env)


def _wait_ready(cluster: Any, operator: Any, name: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    last_reason = ""
    while True:
        body = _kubectl_json(cluster, "-n", NAMESPACE, "get", "kvplan", name)
        ready = condition(body, "Ready")
        if ready.get("status") == "True":
            return body
        reason = str(ready.get("reason", ""))
        if reason != last_reason and reason:
            log(f"KVPlan {name}: Ready={ready.get('status')} {reason}: {ready.get('message', '')}")
            last_reason = reason
        if reason in TERMINAL_REASONS:
            return body
        if operator.poll() is not None:
            raise RuntimeError(f"kvplan-operator exited with {operator.poll()}:\n{operator.log_tail(40)}")
        if time.monotonic() > deadline:
            return body
        time.sleep(1.0)


def _pids(obj: Any) -> list[int]:
    """PIDs still running of a LocalCluster (``pids``), LocalPrometheus (``pid``) or ManagedProcess (``record``)."""
    if hasattr(obj, "pids"):
        return [int(p) for p in obj.pids]
    if hasattr(obj, "record"):
        return [int(obj.record.pid)] if obj.poll() is None else []
    pid = getattr(obj, "pid", None)
    return [int(pid)] if pid else []


@contextlib.contextmanager
def _stopping(report: dict[str, Any], name: str, obj: Any) -> Iterator[Any]:
    """Stop ``obj`` (exactly the PIDs it started) on the way out, and record what was stopped."""
    try:
        yield obj
    finally:
        pids = _pids(obj)
        report.setdefault("started_pids", []).extend(pids)
        obj.stop()
        report.setdefault("stopped", []).append(f"{name} (pid {', '.join(map(str, pids))})" if pids else name)


def _copy_logs(dirs: Sequence[Path], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for folder in dirs:
        for path in folder.rglob("*.log"):
            shutil.copy2(path, dest / f"{folder.name}-{path.name}")


def _demo(settings: Settings, report: dict[str, Any]) -> None:
    from kvplan_dev.cluster import LocalCluster
    from kvplan_dev.prom import LocalPrometheus
    from kvplan_dev.tools import locate_tools

    tools = locate_tools()
    workdir = Path(tempfile.mkdtemp(prefix="kvplan-demo-"))
    log_dirs = [workdir / "cluster", workdir / "prometheus", workdir / "operator"]
    try:
        with contextlib.ExitStack() as stack:
            log("1/8 history: backfilling Prometheus from the bundled trace ...")
            prometheus = LocalPrometheus(tools, workdir=log_dirs[1])
            stack.enter_context(_stopping(report, "prometheus", prometheus))
            _backfill(prometheus, report)
            prometheus.start()
            log(f"    Prometheus {prometheus.version} at {prometheus.url}")
            log("2/8 control plane: etcd + kube-apiserver ...")
            cluster = LocalCluster(tools, workdir=log_dirs[0])
            stack.enter_context(_stopping(report, "etcd + kube-apiserver", cluster))
            cluster.start()
            report["control_plane"] = {**cluster.info(), "prometheus_url": prometheus.url,
                                       "prometheus_version": prometheus.version}
            log(f"    kube-apiserver {cluster.apiserver_version} at {cluster.server}")
            log("3/8 install: CRDs and the chart's RBAC (helm template) ...")
            _install(cluster, tools, workdir, standalone=settings.standalone)
            log("4/8 operator: kvplan-operator under the chart's ServiceAccount token"
                + (f", in a container of {settings.operator_image}" if settings.operator_image else "") + " ...")
            log_dirs[2].mkdir(parents=True, exist_ok=True)
            sa_kubeconfig = cluster.service_account_kubeconfig(OPERATOR_NAMESPACE, RELEASE,
                                                               path=log_dirs[2] / "kubeconfig")
            operator = _start_operator(sa_kubeconfig, log_dirs[2], standalone=settings.standalone,
                                       image=settings.operator_image)
            stack.enter_context(_stopping(report, "kvplan-operator", operator))
            example = EXAMPLES[settings.example]
            log(f"5/8 apply: examples/vllm-deployments.yaml and examples/{example.name} ...")
            cluster.kubectl("-n", NAMESPACE, "apply", "-f", str(EXAMPLE_DEPLOYMENTS))
            plan_doc = yaml.safe_load(example.read_text())
            plan_doc["spec"]["prometheus"]["url"] = prometheus.url
            name = plan_doc["metadata"]["name"]
            router = (plan_doc["spec"].get("router") or {}).get("configMap") or {}
            before_maps = _configmaps(cluster)
            before = {n: deployment_view(d, configmaps=before_maps) for n, d in _deployments(cluster).items()}
            applied_at = time.monotonic()
            cluster.kubectl("-n", NAMESPACE, "apply", "-f", "-", input_text=json.dumps(plan_doc))
            log(f"6/8 wait: KVPlan {name} Ready (up to {settings.timeout_s:.0f} s) ...")
            body = _wait_ready(cluster, operator, name, settings.timeout_s)
            ready = condition(body, "Ready")
            log("7/8 report ...")
            after_maps = _configmaps(cluster)
            after_deps = _deployments(cluster)
            status = body.get("status") or {}
            plan = _plan_with_classes(cluster, name, status.get("plan"))
            report["kvplan"] = {
                "name": name, "ready": ready.get("status", "Unknown"), "reason": ready.get("reason"),
                "message": ready.get("message", ""), "seconds_to_ready": round(time.monotonic() - applied_at, 1),
                "conditions": status.get("conditions", []), "plan": plan,
                "objective": status.get("objective"), "diff": status.get("diff"),
                "plan_lines": plan_lines({"status": {**status, "plan": plan}}),
            }
            report["deployments"] = {}
            for dep_name, view in before.items():
                after = deployment_view(after_deps.get(dep_name, {}), configmaps=after_maps)
                report["deployments"][dep_name] = {"before": view, "after": after,
                                                   "changes": view_changes(view, after)}
            if router:
                key = router.get("key", "routing.json")
                old = before_maps.get(router["name"], {}).get(key)
                new = after_maps.get(router["name"], {}).get(key)
                report["router"] = {"name": router["name"], "key": key, "before": old, "after": new,
                                    "diff": text_diff(old, new, f"{router['name']}[{key}]")}
            report["ok"] = ready.get("status") == "True"
            if not report["ok"]:
                report["error"] = f"KVPlan not Ready: {ready.get('reason')}: {ready.get('message')}"
                report["operator_log_tail"] = operator.log_tail(40)
            log("8/8 stop: operator, apiserver, etcd, Prometheus ...")
        report["operator_forbidden"] = forbidden_lines(log_tail_text(log_dirs[2] / "operator.log"))
    finally:
        if settings.keep_logs is not None:
            _copy_logs([d for d in log_dirs if d.exists()], settings.keep_logs)
        shutil.rmtree(workdir, ignore_errors=True)


def run(args: argparse.Namespace) -> int:
    """Run the demo; 0 when the KVPlan became Ready and everything started was stopped, else 1."""
    try:
        settings = _settings(args)
    except InputError as exc:
        return report_error("kvplan-dev demo", str(exc))
    started = time.monotonic()
    report: dict[str, Any] = {"ok": False, "stopped": []}
    try:
        _demo(settings, report)
    except KeyboardInterrupt:
        report["error"] = "interrupted"
    except Exception as exc:  # noqa: BLE001 - the demo reports any failure in its one result
        report["error"] = f"{type(exc).__name__}: {exc}"
    report["seconds"] = round(time.monotonic() - started, 1)
    report.get("kvplan", {}).pop("plan_lines", None) if settings.json else None
    if settings.json:
        print(json.dumps(report, indent=2, sort_keys=False, default=str))
    else:
        print(text_report(report, NAMESPACE))
        if report.get("operator_log_tail"):
            print("\noperator log (last 40 lines):\n" + report["operator_log_tail"])
    return 0 if report.get("ok") else 1


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kvplan_dev.demo [--json]`` (the same as ``kvplan-dev demo``)."""
    parser = OneLineParser(prog="kvplan-dev demo", description=__doc__.splitlines()[0] if __doc__ else None)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
