"""kvplan's vLLM plugin in a serving pod: the reservation file mounted from the state ConfigMap. Pure.

When a group turns the plugin on (``spec.groups[].plugin.enabled``), its Deployment gets, beside
``--scheduler-cls`` (:mod:`.vllm_flags`):

- a pod volume :data:`VOLUME` from the KVPlan's state ConfigMap, projecting only the group's own key
  ``reservations-<group>.json`` (:func:`file_key`: the reservations kvplan's rule keeps for this group,
  :mod:`kvplan_operator.decide.gate`; ``items``, not ``subPath``: a ``subPath`` mount never sees the kubelet's updates, so
  a reservation change would need a restart);
- in the vLLM container, that volume mounted read-only at :data:`MOUNT_PATH`, and the env var :data:`ENV_FILE`
  naming the group's file there.

Turning it off removes exactly these (strategic-merge ``$patch: delete`` by ``name`` for the volume and env, by
``mountPath`` for the mount), and only when they are there. The names match ``kvplan_vllm.source``; the operator
never imports ``kvplan_vllm``, so ``tests/unit/operator/test_op_engine_knobs.py`` holds them equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The pod volume kvplan adds.
VOLUME = "kvplan-reservations"
#: Where the vLLM container sees the state ConfigMap's reservation file (the plugin's default directory).
MOUNT_PATH = "/etc/kvplan"
#: The plugin's default file name (``kvplan_vllm.source.DEFAULT_FILE``); kvplan writes one file per group instead
#: (:func:`file_key`) and names it in :data:`ENV_FILE`. A state ConfigMap key of this name is only kept while a
#: Deployment still projects it.
FILE_KEY = "reservations.json"
#: The env var the plugin reads the file's path from (``kvplan_vllm.source.ENV_FILE``).
ENV_FILE = "KVPLAN_RESERVATIONS_FILE"
FILE_PATH = f"{MOUNT_PATH}/{FILE_KEY}"
#: Keys of the state ConfigMap that hold reservation files (``reservations.json``, ``reservations-<group>.json``).
FILE_KEY_PREFIX = "reservations"
#: The plugin's scheduler classes for ``--scheduler-cls`` (``kvplan_vllm.scheduler``).
SCHEDULER_MODULE = "kvplan_vllm.scheduler"
SYNC_SCHEDULER = f"{SCHEDULER_MODULE}.ReservationScheduler"
ASYNC_SCHEDULER = f"{SCHEDULER_MODULE}.AsyncReservationScheduler"


def is_plugin_scheduler(value: str | None) -> bool:
    """Whether a ``--scheduler-cls`` value is one of kvplan's (so kvplan may replace or remove it)."""
    return value in (SYNC_SCHEDULER, ASYNC_SCHEDULER)


def file_key(group: str) -> str:
    """The state ConfigMap's key holding ``group``'s ``kvplan.reservations.v1`` document, and its file name in the
    mount (a group name is a DNS label, so the key is a valid ConfigMap key)."""
    return f"{FILE_KEY_PREFIX}-{group}.json"


def is_file_key(key: str) -> bool:
    """Whether a state ConfigMap key holds a reservation file (kvplan's to write and remove)."""
    return key == FILE_KEY or (key.startswith(FILE_KEY_PREFIX + "-") and key.endswith(".json"))


def volume(state_configmap: str, group: str) -> dict[str, Any]:
    key = file_key(group)
    return {"name": VOLUME, "configMap": {"name": state_configmap, "items": [{"key": key, "path": key}]}}


def mount() -> dict[str, Any]:
    return {"name": VOLUME, "mountPath": MOUNT_PATH, "readOnly": True}


def env(group: str) -> dict[str, Any]:
    return {"name": ENV_FILE, "value": f"{MOUNT_PATH}/{file_key(group)}"}


def projected_keys(deployment: Mapping[str, Any]) -> set[str]:
    """The state ConfigMap keys kvplan's volume of this pod projects (a key still projected must not be removed:
    a pod started meanwhile could not mount the volume)."""
    out: set[str] = set()
    for v in _pod(deployment).get("volumes") or []:
        if v.get("name") == VOLUME and "$patch" not in v:
            out |= {str(i.get("key")) for i in (v.get("configMap") or {}).get("items") or [] if i.get("key")}
    return out


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
    """A message when the pod already uses kvplan's volume name or mount path for something else (kvplan's own
    volume projects one reservation file)."""
    for v in _pod(deployment).get("volumes") or []:
        items = (v.get("configMap") or {}).get("items") or []
        ours = len(items) == 1 and is_file_key(str(items[0].get("key"))) and items[0].get("key") == items[0].get("path")
        if v.get("name") == VOLUME and not ours:
            return f"the pod has its own volume named {VOLUME}"
    for m in container.get("volumeMounts") or []:
        if m.get("mountPath") == MOUNT_PATH and m.get("name") != VOLUME:
            return f"the container mounts volume {m.get('name')} at {MOUNT_PATH}"
    return None


def plugin_patch(deployment: Mapping[str, Any], container: Mapping[str, Any], *, on: bool,
                 state_configmap: str, group: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                            list[dict[str, Any]]]:
    """(pod volumes, container volumeMounts, container env) strategic-merge entries that add the plugin's pieces
    for ``group`` (``on``) or delete those present (off)."""
    if on:
        return [volume(state_configmap, group)], [mount()], [env(group)]
    have = present(deployment, container)
    return ([{"name": VOLUME, "$patch": "delete"}] if have["volume"] else [],
            [{"mountPath": MOUNT_PATH, "$patch": "delete"}] if have["mount"] else [],
            [{"name": ENV_FILE, "$patch": "delete"}] if have["env"] else [])


def plugin_drift(deployment: Mapping[str, Any], container: Mapping[str, Any], *, on: bool,
                 state_configmap: str, group: str) -> list[str]:
    """The plugin pieces that differ from what ``on`` wants (empty: nothing to send)."""
    name = container.get("name")
    if not on:
        return [f"{k} of the plugin (removed)" for k, v in present(deployment, container).items() if v]
    out = []
    want = volume(state_configmap, group)
    if not any(v.get("name") == VOLUME and {k: (v.get("configMap") or {}).get(k) for k in ("name", "items")}
               == want["configMap"] for v in _pod(deployment).get("volumes") or []):  # defaultMode: the apiserver's
        out.append(f"volumes[{VOLUME}]")
    if not any({k: m.get(k) for k in ("name", "mountPath", "readOnly")} == mount()
               for m in container.get("volumeMounts") or []):
        out.append(f"containers[{name}].volumeMounts[{MOUNT_PATH}]")
    if not any(e == env(group) for e in container.get("env") or []):
        out.append(f"containers[{name}].env[{ENV_FILE}]")
    return out
