"""A container's environment as the kubelet resolves it (pure, given a reader of ConfigMaps and Secrets).

``env[].value``; ``valueFrom.fieldRef`` (``metadata.name``, ``metadata.namespace``, ``metadata.uid``,
``metadata.labels['k']``, ``metadata.annotations['k']``, ``spec.nodeName``, ``spec.serviceAccountName``,
``status.podIP``, ``status.hostIP``); ``configMapKeyRef`` and ``secretKeyRef`` (a missing object or key that is
not ``optional`` is :class:`EnvNotReady`, the kubelet's ``CreateContainerConfigError``); ``envFrom`` ConfigMaps and
Secrets, with their ``prefix``. ``$(VAR)`` references to earlier variables are expanded, as the kubelet does.
"""

from __future__ import annotations

import base64
import re
from typing import Any, Callable, Mapping

Read = Callable[[str, str, str], "Mapping[str, Any] | None"]
"""(kind ``configmap``/``secret``, namespace, name) -> the object, or None when it does not exist."""
_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


class EnvNotReady(RuntimeError):
    """A referenced ConfigMap, Secret or key is missing; the message names it."""


def _field(pod: Mapping[str, Any], path: str, pod_ip: str) -> str:
    meta, spec = pod["metadata"], pod["spec"]
    simple = {"metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
              "metadata.uid": meta.get("uid"), "spec.nodeName": spec.get("nodeName"),
              "spec.serviceAccountName": spec.get("serviceAccountName"), "status.podIP": pod_ip,
              "status.hostIP": "127.0.0.1"}
    if path in simple:
        return str(simple[path] or "")
    match = _SUBSCRIPT.match(path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise EnvNotReady(f"fieldRef {path!r}: not a field the twin resolves")


def _data(obj: Mapping[str, Any], kind: str) -> dict[str, str]:
    if kind == "secret":
        return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
    return dict(obj.get("data") or {})


def _key(read: Read, kind: str, namespace: str, ref: Mapping[str, Any]) -> str | None:
    obj = read(kind, namespace, str(ref.get("name", "")))
    data = _data(obj, kind) if obj is not None else {}
    if str(ref.get("key")) in data:
        return data[str(ref["key"])]
    if ref.get("optional"):
        return None
    what = f'{kind} "{ref.get("name")}"' + ("" if obj is None else f' key "{ref.get("key")}"')
    raise EnvNotReady(f"{what} not found")


def container_env(container: Mapping[str, Any], pod: Mapping[str, Any], pod_ip: str, read: Read) -> dict[str, str]:
    """Name -> value of the container's environment."""
    namespace = str(pod["metadata"]["namespace"])
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        kind = "configmap" if "configMapRef" in source else "secret"
        ref = source.get("configMapRef") or source.get("secretRef") or {}
        obj = read(kind, namespace, str(ref.get("name", "")))
        if obj is None and not ref.get("optional"):
            raise EnvNotReady(f'{kind} "{ref.get("name")}" not found')
        prefix = str(source.get("prefix", ""))
        env.update({prefix + k: v for k, v in (_data(obj, kind) if obj else {}).items()})
    for item in container.get("env") or []:
        name = str(item["name"])
        source = item.get("valueFrom")
        if source is None:
            env[name] = _REF.sub(lambda m: env.get(m.group(1), m.group(0)), str(item.get("value", "")))
        elif "fieldRef" in source:
            env[name] = _field(pod, str(source["fieldRef"]["fieldPath"]), pod_ip)
        elif "configMapKeyRef" in source or "secretKeyRef" in source:
            kind = "configmap" if "configMapKeyRef" in source else "secret"
            value = _key(read, kind, namespace, source.get("configMapKeyRef") or source.get("secretKeyRef"))
            if value is not None:
                env[name] = value
    return env


__all__ = ["EnvNotReady", "container_env"]
