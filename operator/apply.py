"""Phase 3b: send the built patches, only where the cluster differs from them.

Every write is a patch limited to owned fields: a strategic merge patch on Deployments (containers and env merge
by name; ``args`` and ``tolerations`` are replaced whole, built from the current values so the user's other
entries survive), JSON merge patches on ConfigMaps (``data[key]`` only) and HTTPRoutes (``spec.rules`` rebuilt
from the current rules with only weights changed). A patch whose owned values already match is not sent, so a
re-run after a crash or restart converges without extra writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .builders import GPU_RESOURCE


class KubeWriter(Protocol):
    def patch_deployment(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None: ...

    def get_configmap(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def create_configmap(self, namespace: str, body: Mapping[str, Any]) -> None: ...

    def patch_configmap(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None: ...

    def get_httproute(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def patch_httproute(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None: ...


@dataclass(frozen=True)
class Desired:
    """Everything one plan wants written (built by the pure builders)."""

    deployments: Mapping[str, tuple[Mapping[str, Any], Mapping[str, Any]]]  # name -> (current body, patch)
    state_configmap: Mapping[str, Any]
    router_configmap: tuple[str, Mapping[str, Any]] | None = None  # (name, merge patch)
    httproute: tuple[str, Mapping[str, Any]] | None = None  # (name, merge patch), already diffed


@dataclass
class ApplyResult:
    changed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def _container(body: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for c in body.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []) or []:
        if c.get("name") == name:
            return dict(c)
    return {}


def deployment_drift(current: Mapping[str, Any], patch: Mapping[str, Any]) -> list[str]:
    """Owned fields of ``current`` that differ from ``patch`` (empty: nothing to send)."""
    out: list[str] = []
    ann = current.get("metadata", {}).get("annotations") or {}
    for k, v in patch.get("metadata", {}).get("annotations", {}).items():
        if ann.get(k) != v:
            out.append(f"metadata.annotations[{k}]")
    spec, cur_spec = patch.get("spec", {}), current.get("spec", {})
    if "replicas" in spec and cur_spec.get("replicas") != spec["replicas"]:
        out.append("spec.replicas")
    pod, cur_pod = spec["template"]["spec"], cur_spec.get("template", {}).get("spec", {})
    sel = cur_pod.get("nodeSelector") or {}
    if any(sel.get(k) != v for k, v in pod["nodeSelector"].items()):
        out.append("nodeSelector")
    if (cur_pod.get("tolerations") or []) != pod["tolerations"]:
        out.append("tolerations")
    for c in pod["containers"]:
        cur = _container(current, c["name"])
        if list(cur.get("args") or []) != c["args"]:
            out.append(f"containers[{c['name']}].args")
        res = cur.get("resources") or {}
        for kind in ("limits", "requests"):
            if str((res.get(kind) or {}).get(GPU_RESOURCE)) != c["resources"][kind][GPU_RESOURCE]:
                out.append(f"containers[{c['name']}].resources.{kind}")
        env = {e.get("name"): e for e in cur.get("env") or []}
        for e in c["env"]:
            if e.get("$patch") == "delete":
                if e["name"] in env:
                    out.append(f"containers[{c['name']}].env[{e['name']}]")
            elif env.get(e["name"], {}).get("valueFrom") != e["valueFrom"] or "value" in env.get(e["name"], {}):
                out.append(f"containers[{c['name']}].env[{e['name']}]")
    return out


def configmap_drift(current: Mapping[str, Any] | None, patch: Mapping[str, Any]) -> bool:
    if current is None:
        return True
    data = current.get("data") or {}
    if any(data.get(k) != v for k, v in (patch.get("data") or {}).items()):
        return True
    ann = current.get("metadata", {}).get("annotations") or {}
    return any(ann.get(k) != v for k, v in patch.get("metadata", {}).get("annotations", {}).items())


def apply_desired(kube: KubeWriter, namespace: str, desired: Desired) -> ApplyResult:
    """Write what differs. The state ConfigMap goes first: the Deployments' env references it."""
    result = ApplyResult()
    sc = desired.state_configmap
    name = sc["metadata"]["name"]
    current = kube.get_configmap(namespace, name)
    if current is None:
        kube.create_configmap(namespace, sc)
        result.changed.append(f"ConfigMap/{name}")
    elif configmap_drift(current, sc):
        kube.patch_configmap(namespace, name, {"data": sc["data"], "metadata": {"annotations": sc["metadata"]["annotations"]}})
        result.changed.append(f"ConfigMap/{name}")
    for dep_name, (body, patch) in desired.deployments.items():
        drift = deployment_drift(body, patch)
        if drift:
            kube.patch_deployment(namespace, dep_name, patch)
            result.changed.append(f"Deployment/{dep_name}: " + ", ".join(drift))
    if desired.router_configmap is not None:
        rname, rpatch = desired.router_configmap
        current = kube.get_configmap(namespace, rname)
        if current is None:
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": rname, "namespace": namespace,
                    "annotations": rpatch["metadata"]["annotations"]}, "data": rpatch["data"]}
            kube.create_configmap(namespace, body)
            result.changed.append(f"ConfigMap/{rname}")
        elif configmap_drift(current, rpatch):
            kube.patch_configmap(namespace, rname, rpatch)
            result.changed.append(f"ConfigMap/{rname}")
    if desired.httproute is not None:
        hname, hpatch = desired.httproute
        kube.patch_httproute(namespace, hname, hpatch)
        result.changed.append(f"HTTPRoute/{hname}")
    return result
