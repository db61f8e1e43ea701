"""A Pod's volumes as the kubelet makes them, in a directory of the twin's (dev/test tooling).

- ``configMap``: the ConfigMap's keys (``items`` picks and renames them; ``optional`` allows it to be missing) in
  the kubelet's atomic-writer layout (:func:`kvplan_dev.mounted_configmap.write_configmap_volume`: ``..data``
  swapped with one rename). :meth:`PodVolumes.sync` re-reads the ConfigMaps and swaps in what changed, as the
  kubelet's periodic sync does (the agent calls it every ``configmap_delay_s``: the kubelet's delay is its sync
  period plus the cache TTL, about a minute by default; the twin's is shorter);
- ``emptyDir``: an empty directory; ``secret``, ``projected`` (ServiceAccount tokens), ``downwardAPI``: an empty
  directory too (nothing the vLLM container reads); any other source (a PVC, a hostPath) is refused.

A missing ConfigMap that is not optional is :class:`VolumeNotReady`: the Pod stays ``ContainerCreating``, as with
the kubelet's ``FailedMount``.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any, Callable, Mapping

from kvplan_dev.mounted_configmap import write_configmap_volume

ReadConfigMap = Callable[[str, str], "Mapping[str, Any] | None"]
"""(namespace, name) -> the ConfigMap object (a dict), or None when it does not exist."""
_EMPTY = ("emptyDir", "secret", "projected", "downwardAPI")


class VolumeNotReady(RuntimeError):
    """A volume cannot be mounted yet; the message names it (the container's waiting message)."""


def _payload(cm: Mapping[str, Any], items: list[Mapping[str, Any]] | None) -> dict[str, str | bytes]:
    data: dict[str, str | bytes] = dict(cm.get("data") or {})
    data.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
    if not items:
        return data
    return {str(item["path"]): data[str(item["key"])] for item in items if str(item["key"]) in data}


class PodVolumes:
    """The volumes of one Pod under ``root``; ``mounts(container)`` maps its mount paths to the twin's dirs."""

    def __init__(self, pod: Mapping[str, Any], root: Path, read_configmap: ReadConfigMap) -> None:
        self.namespace = str(pod["metadata"]["namespace"])
        self.volumes = {str(v["name"]): v for v in pod["spec"].get("volumes") or []}
        self.root = root
        self.read_configmap = read_configmap
        self._written: dict[str, dict[str, str | bytes]] = {}

    def path(self, volume: str) -> Path:
        return self.root / volume

    def sync(self) -> list[str]:
        """Mount (or refresh) every volume; the names of the ConfigMap volumes whose payload changed. Raises
        :class:`VolumeNotReady` for a missing required ConfigMap and for a source the twin cannot mount."""
        changed: list[str] = []
        for name, volume in self.volumes.items():
            if "configMap" in volume:
                source = volume["configMap"]
                cm = self.read_configmap(self.namespace, str(source.get("name", "")))
                if cm is None and not source.get("optional"):
                    raise VolumeNotReady(f'MountVolume.SetUp failed for volume "{name}": configmap '
                                         f'"{source.get("name")}" not found')
                payload = _payload(cm or {}, source.get("items"))
                if self._written.get(name) != payload:
                    write_configmap_volume(self.path(name), payload)
                    self._written[name] = payload
                    changed.append(name)
            elif any(kind in volume for kind in _EMPTY):
                self.path(name).mkdir(parents=True, exist_ok=True)
            else:
                kinds = sorted(k for k in volume if k != "name")
                raise VolumeNotReady(f'volume "{name}": the twin mounts configMap, emptyDir, secret, projected and '
                                     f"downwardAPI volumes, not {kinds}")
        return changed

    def mounts(self, container: Mapping[str, Any]) -> dict[str, str]:
        """The container's ``volumeMounts`` as mount path -> the twin's directory (``subPath`` followed)."""
        out: dict[str, str] = {}
        for mount in container.get("volumeMounts") or []:
            name = str(mount["name"])
            if name not in self.volumes:
                continue
            target = self.path(name) / str(mount["subPath"]) if mount.get("subPath") else self.path(name)
            out[str(mount["mountPath"])] = str(target)
        return out


__all__ = ["PodVolumes", "ReadConfigMap", "VolumeNotReady"]
