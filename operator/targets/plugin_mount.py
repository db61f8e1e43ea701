"""kvplan's vLLM plugin in a serving pod: the reservation file mounted from the state ConfigMap. Pure.

When a group turns the plugin on (``spec.groups[].plugin.enabled``), its Deployment gets, beside
``--scheduler-cls`` (:mod:`.vllm_flags`):

- a pod volume :data:`VOLUME` from the KVPlan's state ConfigMap, projecting only its key :data:`FILE_KEY`
  (``items``, not ``subPath``: a ``subPath`` mount never sees the kubelet's updates, so a reservation change
  would need a restart);
- in the vLLM container, that volume mounted read-only at :data:`MOUNT_PATH`, and the env var :data:`ENV_FILE`
  naming the file (the plugin's default path too, set explicitly so the pod says where it reads).

Turning it off removes exactly these (strategic-merge ``$patch: delete`` by ``name`` for the volume and env, by
``mountPath`` for the mount), and only when they are there. The names match ``kvplan_vllm.source``; the operator
never imports ``kvplan_vllm``, so ``tests/unit/test_op_engine_knobs.py`` holds them equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The pod volume kvplan adds.
VOLUME = "kvplan-reservations"
#: Where the vLLM container sees the state ConfigMap's reservation file (the plugin's default directory).
MOUNT_PATH = "/etc/kvplan"
#: The state ConfigMap's key holding the ``kvplan.reservations.v1`` document, and the file name in the mount.
FILE_KEY = "reservations.json"
#: The env var the plugin reads the file's path from (``kvplan_vllm.source.ENV_FILE``).
ENV_FILE = "KVPLAN_RESERVATIONS_FILE"
FILE_PATH = f"{MOUNT_PATH}/{FILE_KEY}"
#: The plugin's scheduler classes for ``--scheduler-cls`` (``kvplan_vllm.scheduler``).
SCHEDULER_MODULE = "kvplan_vllm.scheduler"
SYNC_SCHEDULER = f"{SCHEDULER_MODULE}.ReservationScheduler"
ASYNC_SCHEDULER = f"{SCHEDULER_MODULE}.AsyncReservationScheduler"


def is_plugin_scheduler(value: str | None) -> bool:
    """Whether a ``--scheduler-cls`` value is one of kvplan's (so kvplan may replace or remove it)."""
    return value in (SYNC_SCHEDULER, ASYNC_SCHEDULER)


def volume(state_configmap: str) -> dict[str, Any]:
    return {"name": VOLUME, "configMap": {"name": state_configmap, "items": [{"key": FILE_KEY, "path": FILE_KEY}]}}


def mount() -> dict[str, Any]:
    return {"name": VOLUME, "mountPath": MOUNT_PATH, "readOnly": True}


def env() -> dict[str, Any]:
    return {"name": ENV_FILE, "value": FILE_PATH}


def _pod(deployment: Mapping[str, Any]) -> Mapping[str, Any]:
    return deployment.get("spec", {}).get("template", {}).get("spec", {}) or {}


def present(deployment: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, bool]:
    """Which of kvplan's plugin pieces the pod has now: ``volume``, ``mount`` (kvplan's mount path or volume),
    ``env``."""
    return {"volume": any(v.get("name") == VOLUME for v in _pod(deployment).get("volumes") or []),
            "mount": any(m.get("mountPath") == MOUNT_PATH or m.get("name") == VOLUME
                         for m in container.get("volumeMounts") or []),
            "env": any(e.get("name") == ENV_FILE for e in container.get("env") or [])}


def mount_conflict(deployment: Mapping[str, Any], container: Mapping[str, Any]) -> str | None:
    """A message when the pod already uses kvplan's volume name or mount path for something else."""
    for v in _pod(deployment).get("volumes") or []:
        if v.get("name") == VOLUME and v.get("configMap", {}).get("items") != volume("")["configMap"]["items"]:
            return f"the pod has its own volume named {VOLUME}"
    for m in container.get("volumeMounts") or []:
        if m.get("mountPath") == MOUNT_PATH and m.get("name") != VOLUME:
            return f"the container mounts volume {m.get('name')} at {MOUNT_PATH}"
    return None


def plugin_patch(deployment: Mapping[str, Any], container: Mapping[str, Any], *, on: bool,
                 state_configmap: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(pod volumes, container volumeMounts, container env) strategic-merge entries that add the plugin's pieces
    (``on``) or delete those present (off)."""
    if on:
        return [volume(state_configmap)], [mount()], [env()]
    have = present(deployment, container)
    return ([{"name": VOLUME, "$patch": "delete"}] if have["volume"] else [],
            [{"mountPath": MOUNT_PATH, "$patch": "delete"}] if have["mount"] else [],
            [{"name": ENV_FILE, "$patch": "delete"}] if have["env"] else [])


def plugin_drift(deployment: Mapping[str, Any], container: Mapping[str, Any], *, on: bool,
                 state_configmap: str) -> list[str]:
    """The plugin pieces that differ from what ``on`` wants (empty: nothing to send)."""
    name = container.get("name")
    if not on:
        return [f"{k} of the plugin (removed)" for k, v in present(deployment, container).items() if v]
    out = []
    want = volume(state_configmap)
    if not any(v.get("name") == VOLUME and {k: (v.get("configMap") or {}).get(k) for k in ("name", "items")}
               == want["configMap"] for v in _pod(deployment).get("volumes") or []):  # defaultMode: the apiserver's
        out.append(f"volumes[{VOLUME}]")
    if not any({k: m.get(k) for k in ("name", "mountPath", "readOnly")} == mount()
               for m in container.get("volumeMounts") or []):
        out.append(f"containers[{name}].volumeMounts[{MOUNT_PATH}]")
    if not any(e == env() for e in container.get("env") or []):
        out.append(f"containers[{name}].env[{ENV_FILE}]")
    return out
