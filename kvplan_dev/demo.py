"""``kvplan-dev demo``: the main job on the embedded default, end to end, on this machine, in minutes.

Phases (each one prints a line to stderr; ``--json`` puts the one result object on stdout):

1. **history**: the bundled Azure 2023 conversation trace (``kvcore/data/azure2023_conv.csv``) is split into the
   example KVPlan's classes by prompt length, which is what a router knows at admission time (:data:`CLASS_SPLIT`:
   chat < 1000 tokens <= code < 2000 tokens <= batch). Each class becomes one vLLM-style histogram series,
   ``vllm:request_generation_tokens{model_name="llama-70b-<class>"}`` with 1-2-5 buckets up to 8192, spread over
   the last 6 hours and backfilled into a local Prometheus with promtool.
2. **control plane**: etcd + kube-apiserver on loopback (:class:`kvplan_dev.cluster.LocalCluster`).
3. **install**: the chart's CRDs, then the chart's ServiceAccount and RBAC rendered with ``helm template``
   (watching namespace ``demo`` only), exactly as ``helm install`` would create them.
4. **operator**: ``kvplan-operator --namespace demo --peering kvplan-operator`` (the chart's default args) as a
   subprocess whose kubeconfig carries a TokenRequest token of the chart's ServiceAccount, so every call it makes
   is authorised by the chart's RBAC.
5. **apply**: ``examples/vllm-deployments.yaml``, then ``examples/kvplan-70b.yaml`` with ``spec.prometheus.url``
   pointed at the local Prometheus (the only change made to the example).
6. **wait** until the KVPlan is ``Ready=True`` (or a terminal reason, or the timeout).
7. **report**: the plan, and per Deployment and for the router ConfigMap what changed, before -> after.
8. **stop** everything started here, by PID, even on failure or Ctrl-C.

The control plane has no scheduler or kubelet, so no vLLM pod runs: the demo shows decisions and patches.
It needs the repository checkout (charts/ and examples/ are not package data).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import yaml

REPO = Path(__file__).resolve().parent.parent
TRACE = REPO / "kvcore" / "data" / "azure2023_conv.csv"
CHART = REPO / "charts" / "kvplan-operator"
EXAMPLE_PLAN = REPO / "examples" / "kvplan-70b.yaml"
EXAMPLE_DEPLOYMENTS = REPO / "examples" / "vllm-deployments.yaml"

NAMESPACE = "demo"
"""Where the example objects go; the only namespace the operator watches."""
OPERATOR_NAMESPACE = "kvplan-system"
"""Where the chart's ServiceAccount lives (the release namespace)."""
RELEASE = "kvplan-operator"
"""Helm release name; with the chart's naming this makes every object ``kvplan-operator``."""
MODEL = "llama-70b"
"""Model prefix of the per-class ``model_name`` labels; must match the example's history selectors."""
HISTORY_HOURS = 6.0
"""Hours of backfilled history; matches the example's ``spec.prometheus.lookback: 6h``."""
MAX_MODEL_LEN = 8192
"""Largest finite histogram bucket (vLLM's 1-2-5 buckets up to max_model_len); the example uses 8192."""
RBAC_KINDS = frozenset({"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                        "KopfPeering", "ClusterKopfPeering"})
"""What the demo takes from the rendered chart: identity, RBAC and the kopf peering object (the operator itself
runs as a subprocess, not a pod)."""
TERMINAL_REASONS = frozenset({
    "InvalidSpec", "Infeasible", "PlannerError", "LayoutExceedsNode", "ContainerNotFound",
})
"""Ready=False reasons that no amount of waiting fixes; the demo stops waiting on them."""

CLASS_SPLIT: tuple[tuple[str, int, int | None], ...] = (
    ("chat", 0, 1000),
    ("code", 1000, 2000),
    ("batch", 2000, None),
)
"""(class, lowest prompt length, first prompt length not included), tokens. Documented in examples/kvplan-70b.yaml."""


def log(message: str) -> None:
    """Progress goes to stderr so ``--json`` keeps stdout to one object."""
    print(f"[demo] {message}", file=sys.stderr, flush=True)


# --- pure parts ---------------------------------------------------------------------------------------------------
def class_of(input_tokens: int) -> str:
    """The example class of a request with this prompt length (see :data:`CLASS_SPLIT`)."""
    for name, low, high in CLASS_SPLIT:
        if input_tokens >= low and (high is None or input_tokens < high):
            return name
    raise ValueError(f"input_tokens: {input_tokens} is negative")


def split_rows(rows: Sequence[Any]) -> dict[str, list[Any]]:
    """Trace rows (with ``input_tokens``) per class, in trace order; every class present, possibly empty."""
    out: dict[str, list[Any]] = {name: [] for name, _, _ in CLASS_SPLIT}
    for row in rows:
        out[class_of(int(row.input_tokens))].append(row)
    return out


def parse_args(args: Sequence[str]) -> list[tuple[str, str | None]]:
    """CLI args as (flag, value) pairs; both ``--flag value`` and ``--flag=value``; bare words get flag ''."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        arg = str(args[i])
        if arg.startswith("--") and "=" in arg:
            flag, value = arg.split("=", 1)
            out.append((flag, value))
        elif arg.startswith("--") and i + 1 < len(args) and not str(args[i + 1]).startswith("--"):
            out.append((arg, str(args[i + 1])))
            i += 1
        elif arg.startswith("--"):
            out.append((arg, None))
        else:
            out.append(("", arg))
        i += 1
    return out


def _container(deployment: Mapping[str, Any], name: str | None) -> Mapping[str, Any]:
    containers: list[Mapping[str, Any]] = (
        deployment.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or [{}])
    for container in containers:
        if container.get("name") == name:
            return container
    return containers[0]


def _env_text(item: Mapping[str, Any], configmaps: Mapping[str, Mapping[str, str]]) -> str:
    if "value" in item:
        return repr(item["value"])
    ref = item.get("valueFrom", {}).get("configMapKeyRef")
    if ref:
        value = configmaps.get(ref.get("name", ""), {}).get(ref.get("key", ""))
        shown = f" = {value}" if value is not None else ""
        return f"ConfigMap {ref.get('name')}[{ref.get('key')}]{shown}"
    ref = item.get("valueFrom", {}).get("secretKeyRef")
    if ref:
        return f"Secret {ref.get('name')}[{ref.get('key')}]"
    return json.dumps(item.get("valueFrom", {}), sort_keys=True)


def deployment_view(deployment: Mapping[str, Any], container: str | None = "vllm",
                    configmaps: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, Any]:
    """The fields the operator may change, as plain comparable values."""
    pod = deployment.get("spec", {}).get("template", {}).get("spec", {})
    c = _container(deployment, container)
    resources = c.get("resources") or {}
    annotations = deployment.get("metadata", {}).get("annotations") or {}
    return {
        "replicas": deployment.get("spec", {}).get("replicas"),
        "args": [f"{flag}={value}" if flag and value is not None else (flag or str(value))
                 for flag, value in parse_args(c.get("args") or [])],
        "gpuLimit": (resources.get("limits") or {}).get("nvidia.com/gpu"),
        "gpuRequest": (resources.get("requests") or {}).get("nvidia.com/gpu"),
        "nodeSelector": dict(sorted((pod.get("nodeSelector") or {}).items())),
        "tolerations": sorted(json.dumps(t, sort_keys=True) for t in pod.get("tolerations") or []),
        "env": {e["name"]: _env_text(e, configmaps or {}) for e in c.get("env") or []},
        "annotations": {k: v for k, v in sorted(annotations.items()) if k.startswith("kvplan.io/")},
    }


def _dict_changes(label: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    for key in sorted(set(before) | set(after)):
        if key not in before:
            lines.append(f"{label}: + {key} = {after[key]}")
        elif key not in after:
            lines.append(f"{label}: - {key} (was {before[key]})")
        elif before[key] != after[key]:
            lines.append(f"{label}: {key}: {before[key]} -> {after[key]}")
    return lines


def view_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Readable one-line changes between two :func:`deployment_view` results; empty when nothing changed."""
    lines: list[str] = []
    if before.get("replicas") != after.get("replicas"):
        lines.append(f"replicas: {before.get('replicas')} -> {after.get('replicas')}")
    flags_before = {a.split("=", 1)[0]: a for a in before.get("args", [])}
    flags_after = {a.split("=", 1)[0]: a for a in after.get("args", [])}
    for flag in list(flags_before) + [f for f in flags_after if f not in flags_before]:
        old, new = flags_before.get(flag), flags_after.get(flag)
        if old != new:
            lines.append(f"args: {old or '(absent)'} -> {new or '(removed)'}")
    for key, label in (("gpuLimit", "limits[nvidia.com/gpu]"), ("gpuRequest", "requests[nvidia.com/gpu]")):
        if before.get(key) != after.get(key):
            lines.append(f"{label}: {before.get(key)} -> {after.get(key)}")
    lines += _dict_changes("nodeSelector", before.get("nodeSelector", {}), after.get("nodeSelector", {}))
    for tol in sorted(set(after.get("tolerations", [])) - set(before.get("tolerations", []))):
        lines.append(f"tolerations: + {tol}")
    for tol in sorted(set(before.get("tolerations", [])) - set(after.get("tolerations", []))):
        lines.append(f"tolerations: - {tol}")
    lines += _dict_changes("env", before.get("env", {}), after.get("env", {}))
    lines += _dict_changes("annotations", before.get("annotations", {}), after.get("annotations", {}))
    return lines


def pretty_document(text: str | None) -> list[str]:
    """A ConfigMap value as lines: pretty JSON when it parses, else as written; ``(absent)`` for None."""
    if text is None:
        return ["(absent)"]
    try:
        return json.dumps(json.loads(text), indent=2, sort_keys=True).splitlines()
    except ValueError:
        return text.splitlines()


def text_diff(before: str | None, after: str | None, name: str) -> list[str]:
    """Unified diff (3 lines of context) of two ConfigMap values, readable JSON on both sides."""
    return list(difflib.unified_diff(pretty_document(before), pretty_document(after),
                                     fromfile=f"{name} (before)", tofile=f"{name} (after)", lineterm="", n=3))


def rbac_documents(rendered: str) -> list[dict[str, Any]]:
    """The ServiceAccount, RBAC and peering objects of a ``helm template`` output."""
    return [doc for doc in yaml.safe_load_all(rendered) if isinstance(doc, dict) and doc.get("kind") in RBAC_KINDS]


def forbidden_lines(text: str) -> list[str]:
    """Log lines that report an authorisation failure (the chart's RBAC missing something the operator uses)."""
    return [line for line in text.splitlines() if "403" in line or "Forbidden" in line or "forbidden" in line]


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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's options, for ``kvplan-dev demo``'s sub-parser."""
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--timeout", type=float, default=Settings.timeout_s,
                        help="seconds to wait for the KVPlan to become Ready (default %(default)s)")
    parser.add_argument("--keep-logs", type=Path, default=None, metavar="DIR",
                        help="copy the operator/apiserver/Prometheus logs here before cleaning up")
    parser.add_argument("--standalone", action="store_true",
                        help="the chart with peering.enabled=false: kvplan-operator --standalone")


def _settings(args: argparse.Namespace) -> Settings:
    keep = getattr(args, "keep_logs", None)
    return Settings(json=bool(getattr(args, "json", False)),
                    timeout_s=float(getattr(args, "timeout", None) or Settings.timeout_s),
                    keep_logs=Path(keep) if keep else None, standalone=bool(getattr(args, "standalone", False)))


def _kubectl_json(cluster: Any, *args: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(cluster.kubectl(*args, "-o", "json").stdout)
    return data


def _configmaps(cluster: Any) -> dict[str, dict[str, str]]:
    items = _kubectl_json(cluster, "-n", NAMESPACE, "get", "configmaps").get("items", [])
    return {item["metadata"]["name"]: dict(item.get("data") or {}) for item in items}


def _deployments(cluster: Any) -> dict[str, dict[str, Any]]:
    items = _kubectl_json(cluster, "-n", NAMESPACE, "get", "deployments").get("items", [])
    return {item["metadata"]["name"]: item for item in items}


def _backfill(prometheus: Any, report: dict[str, Any]) -> None:
    from kvplan_dev.openmetrics import Window, read_trace
    from kvplan_dev.prom import series_from_trace

    rows = read_trace(TRACE)
    per_class = split_rows(rows)
    span = max(r.arrival_s for r in rows) - min(r.arrival_s for r in rows)
    window = Window(end_unix_s=time.time() - 60.0, duration_s=HISTORY_HOURS * 3600.0)
    compression = span / (window.duration_s * 0.999)  # one time axis for every class
    series = [series_from_trace(part, labels={"model_name": f"{MODEL}-{name}"}, window=window,
                                compression=compression, max_model_len=MAX_MODEL_LEN)
              for name, part in per_class.items() if part]
    stats = prometheus.backfill(series, window)
    report["history"] = {
        "trace": str(TRACE.relative_to(REPO)), "requests": len(rows), "hours": HISTORY_HOURS,
        "split": "by prompt length: " + ", ".join(
            f"{name} [{low}, {high if high is not None else 'inf'})" for name, low, high in CLASS_SPLIT),
        "classes": {name: {"requests": len(part), "kept": s.kept,
                           "series": f'vllm:request_generation_tokens{{model_name="{MODEL}-{name}"}}'}
                    for (name, part), s in zip(((n, p) for n, p in per_class.items() if p), stats)},
    }


def wait_established(cluster: Any, crds: Sequence[str], timeout_s: float = 60.0) -> None:
    """Poll until every CRD reports ``Established=True``. (``kubectl wait`` right after an apply can fail with
    "accessor error" while the CRD has no status.conditions yet, so it is not used.)"""
    deadline = time.monotonic() + timeout_s
    pending = list(crds)
    while pending:
        body = _kubectl_json(cluster, "get", "crd", pending[0])
        if condition(body, "Established").get("status") == "True":
            pending.pop(0)
            continue
        if time.monotonic() > deadline:
            raise RuntimeError(f"CRD {pending[0]} not Established after {timeout_s:.0f} s: {body.get('status')}")
        time.sleep(0.2)


def _install(cluster: Any, tools: Any, workdir: Path, *, standalone: bool = False) -> None:
    for namespace in (NAMESPACE, OPERATOR_NAMESPACE):
        cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("apply", "--server-side", "-f", str(CHART / "crds"))
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


def _start_operator(kubeconfig: Path, workdir: Path, *, standalone: bool = False) -> Any:
    from kvplan_dev.process import ManagedProcess, free_port

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


def _plan_lines(body: Mapping[str, Any]) -> list[str]:
    status = body.get("status") or {}
    plan = status.get("plan") or {}
    lines = [f"plan: status={plan.get('status')} method={plan.get('method')} iterations={plan.get('iterations')} "
             f"solve={plan.get('solveSeconds')} s decision={plan.get('decision')}"]
    objective = status.get("objective") or {}
    if objective:
        lines.append("objective (cost units/s): " + ", ".join(f"{k}={v}" for k, v in objective.items()))
    lines.append(f"  {'group':<12} {'TP':>3} {'PP':>3} {'replicas':>8} {'GPU/rep':>7} {'KV tokens/rep':>13} "
                 f"{'util':>6} {'max-num-seqs':>12}  replicas by")
    for name, g in (plan.get("groups") or {}).items():
        lines.append(f"  {name:<12} {g.get('tp')!s:>3} {g.get('pp')!s:>3} {g.get('replicas')!s:>8} "
                     f"{g.get('gpusPerReplica')!s:>7} {g.get('kvCapacityTokens')!s:>13} {g.get('utilisation')!s:>6} "
                     f"{g.get('maxNumSeqs')!s:>12}  {g.get('replicasManagedBy')}")
    lines.append(f"  {'class':<8} {'reserve':>7} {'eps':>8} {'admitted':>8} {'samples':>8}  routing / radius rule")
    for name, c in (plan.get("classes") or {}).items():
        radius = c.get("radius") or {}
        routing = ", ".join(f"{g}={w}" for g, w in (c.get("routing") or {}).items())
        lines.append(f"  {name:<8} {c.get('reserveTokens')!s:>7} {radius.get('eps')!s:>8} {c.get('admitted')!s:>8} "
                     f"{c.get('samples')!s:>8}  {routing}; {radius.get('rule')}: {radius.get('reason')}")
    return lines


def _text_report(report: Mapping[str, Any]) -> str:
    out: list[str] = []
    h = report.get("history", {})
    out.append(f"kvplan demo: kube-apiserver {report.get('control_plane', {}).get('apiserver_version')}, "
               f"etcd {report.get('control_plane', {}).get('etcd_version')}, Prometheus with {h.get('hours')} h "
               f"of history from {h.get('trace')} ({h.get('requests')} requests)")
    out.append(f"classes {h.get('split')}: " + ", ".join(
        f"{n} {c['requests']} requests" for n, c in h.get("classes", {}).items()))
    k = report.get("kvplan", {})
    out.append("")
    out.append(f"KVPlan {NAMESPACE}/{k.get('name')}: Ready={k.get('ready')} ({k.get('reason')}) after "
               f"{k.get('seconds_to_ready')} s; {k.get('message', '')}".rstrip())
    out += k.get("plan_lines", [])
    for name, d in report.get("deployments", {}).items():
        out.append("")
        out.append(f"Deployment {NAMESPACE}/{name}: {len(d['changes'])} change(s)")
        out += [f"  {line}" for line in d["changes"]] or ["  (unchanged)"]
    router = report.get("router")
    if router:
        out.append("")
        out.append(f"Router ConfigMap {NAMESPACE}/{router['name']} [{router['key']}]:")
        out += [f"  {line}" for line in router["diff"]] or ["  (unchanged)"]
    out.append("")
    verdict = "OK" if report.get("ok") else f"FAILED: {report.get('error')}"
    out.append(f"stopped: {', '.join(report.get('stopped', [])) or '(nothing running)'}; "
               f"total {report.get('seconds')} s; {verdict}")
    return "\n".join(out)


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
            log("4/8 operator: kvplan-operator under the chart's ServiceAccount token ...")
            log_dirs[2].mkdir(parents=True, exist_ok=True)
            sa_kubeconfig = cluster.service_account_kubeconfig(OPERATOR_NAMESPACE, RELEASE,
                                                               path=log_dirs[2] / "kubeconfig")
            operator = _start_operator(sa_kubeconfig, log_dirs[2], standalone=settings.standalone)
            stack.enter_context(_stopping(report, "kvplan-operator", operator))
            log("5/8 apply: examples/vllm-deployments.yaml and examples/kvplan-70b.yaml ...")
            cluster.kubectl("-n", NAMESPACE, "apply", "-f", str(EXAMPLE_DEPLOYMENTS))
            plan_doc = yaml.safe_load(EXAMPLE_PLAN.read_text())
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
            report["kvplan"] = {
                "name": name, "ready": ready.get("status", "Unknown"), "reason": ready.get("reason"),
                "message": ready.get("message", ""), "seconds_to_ready": round(time.monotonic() - applied_at, 1),
                "conditions": status.get("conditions", []), "plan": status.get("plan"),
                "objective": status.get("objective"), "diff": status.get("diff"), "plan_lines": _plan_lines(body),
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
    settings = _settings(args)
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
        print(_text_report(report))
        if report.get("operator_log_tail"):
            print("\noperator log (last 40 lines):\n" + report["operator_log_tail"])
    return 0 if report.get("ok") else 1


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kvplan_dev.demo [--json]`` (the same as ``kvplan-dev demo``)."""
    parser = argparse.ArgumentParser(prog="kvplan-dev demo", description=__doc__.splitlines()[0] if __doc__ else None)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
