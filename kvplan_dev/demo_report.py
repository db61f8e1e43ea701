"""What ``kvplan-dev demo`` prints: views of a Deployment's planned fields, before -> after changes, text diffs of the
router document, the plan as a table and the whole text report. Pure functions over API objects and the report
dict; :mod:`kvplan_dev.demo` does the I/O."""

from __future__ import annotations

import difflib
import json
from typing import Any, Mapping, Sequence


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


def _running_cap(group: dict[str, Any]) -> str:
    """The running-request cap kvplan writes for a group: ``--max-num-active-seqs`` (marked ``active``) where set,
    else ``--max-num-seqs``."""
    active = group.get("maxNumActiveSeqs")
    return f"{active} active" if active is not None else str(group.get("maxNumSeqs"))


def plan_lines(body: Mapping[str, Any]) -> list[str]:
    """The plan as a table: ``body["status"]["plan"]`` per group, and per class from its ``classes``, which the
    caller fills from the plan's detail ConfigMaps (status has only counts)."""
    status = body.get("status") or {}
    plan = status.get("plan") or {}
    lines = [f"plan: status={plan.get('status')} method={plan.get('method')} iterations={plan.get('iterations')} "
             f"solve={plan.get('solveSeconds')} s decision={plan.get('decision')}"]
    objective = status.get("objective") or {}
    if objective:
        lines.append("objective (cost units/s): " + ", ".join(f"{k}={v}" for k, v in objective.items()))
    lines.append(f"  {'group':<12} {'TP':>3} {'PP':>3} {'replicas':>8} {'GPU/rep':>7} {'KV tokens/rep':>13} "
                 f"{'util':>6} {'running cap':>12}  replicas by; KV capacity source")
    for name, g in (plan.get("groups") or {}).items():
        lines.append(f"  {name:<12} {g.get('tp')!s:>3} {g.get('pp')!s:>3} {g.get('replicas')!s:>8} "
                     f"{g.get('gpusPerReplica')!s:>7} {g.get('kvCapacityTokens')!s:>13} {g.get('utilisation')!s:>6} "
                     f"{_running_cap(g)!s:>12}  {g.get('replicasManagedBy')}; {capacity_text(g.get('capacity'))}")
    lines.append(f"  {'class':<11} {'reserve':>7} {'eps':>8} {'admitted':>8} {'samples':>8} {'rate/s':>8} "
                 f"{'source':<8} routing / radius rule")
    for name, c in (plan.get("classes") or {}).items():
        radius = c.get("radius") or {}
        routing = ", ".join(f"{g}={w}" for g, w in (c.get("routing") or {}).items())
        lines.append(f"  {name:<11} {c.get('reserveTokens')!s:>7} {radius.get('eps')!s:>8} {c.get('admitted')!s:>8} "
                     f"{c.get('samples')!s:>8} {c.get('arrivalRate')!s:>8} {c.get('source')!s:<8} "
                     f"{routing}; {radius.get('rule')}: {radius.get('reason')}")
    return lines


def capacity_text(cap: Mapping[str, Any] | None) -> str:
    """One group's ``status.plan.groups.<g>.capacity`` in a line: where M(z) came from and both numbers."""
    if not cap:
        return "(not reported)"
    layout = f"tp={cap.get('tp')} pp={cap.get('pp')}"
    usage = f", usage {cap.get('kvCacheUsage')}" if cap.get("kvCacheUsage") is not None else ""
    text = (f"{cap.get('source')}: vLLM {cap.get('engineKvCapacityTokens')} vs profile "
            f"{cap.get('profileKvCapacityTokens')} tokens at {layout}{usage}")
    return text + (f" ({cap.get('note')})" if cap.get("note") else "")


def text_report(report: Mapping[str, Any], namespace: str) -> str:
    out: list[str] = []
    h = report.get("history", {})
    out.append(f"kvplan demo: kube-apiserver {report.get('control_plane', {}).get('apiserver_version')}, "
               f"etcd {report.get('control_plane', {}).get('etcd_version')}, Prometheus with {h.get('hours')} h "
               f"of history from {h.get('trace')} ({h.get('requests')} requests)")
    out.append(f"classes {h.get('split')}: " + ", ".join(
        f"{n} {c['requests']} requests" for n, c in h.get("classes", {}).items()))
    k = report.get("kvplan", {})
    out.append("")
    out.append(f"KVPlan {namespace}/{k.get('name')}: Ready={k.get('ready')} ({k.get('reason')}) after "
               f"{k.get('seconds_to_ready')} s; {k.get('message', '')}".rstrip())
    out += k.get("plan_lines", [])
    for name, d in report.get("deployments", {}).items():
        out.append("")
        out.append(f"Deployment {namespace}/{name}: {len(d['changes'])} change(s)")
        out += [f"  {line}" for line in d["changes"]] or ["  (unchanged)"]
    router = report.get("router")
    if router:
        out.append("")
        out.append(f"Router ConfigMap {namespace}/{router['name']} [{router['key']}]:")
        out += [f"  {line}" for line in router["diff"]] or ["  (unchanged)"]
    out.append("")
    verdict = "OK" if report.get("ok") else f"FAILED: {report.get('error')}"
    out.append(f"stopped: {', '.join(report.get('stopped', [])) or '(nothing running)'}; "
               f"total {report.get('seconds')} s; {verdict}")
    return "\n".join(out)
