"""What earlier releases wrote for the class reservations and no process read, and how it is taken away. Pure.

Earlier releases set a container env ``KVPLAN_RESERVE_<CLASS>`` on every serving Deployment, a ``configMapKeyRef``
into the state ConfigMap's key of the same name. Neither vLLM nor kvplan's plugin reads it (the plugin reads its
reservation file; env is frozen at container start anyway), so kvplan writes neither any more:

- the env is deleted from a Deployment wherever it is found (one rollout, the first time);
- a state ConfigMap key of that form is removed once no Deployment of the spec refers to it: a pod of the old
  template started meanwhile would otherwise fail on a missing key (``CreateContainerConfigError``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PREFIX = "KVPLAN_RESERVE_"


def legacy_env(container: Mapping[str, Any]) -> list[str]:
    """The names of ``container``'s env entries of the old form, sorted."""
    return sorted(str(e["name"]) for e in container.get("env") or [] if str(e.get("name", "")).startswith(PREFIX))


def legacy_refs(deployment: Mapping[str, Any] | None, state_configmap: str) -> set[str]:
    """The keys of ``state_configmap`` of the old form that ``deployment``'s containers still refer to."""
    pod = ((deployment or {}).get("spec") or {}).get("template", {}).get("spec") or {}
    out: set[str] = set()
    for c in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]:
        for e in c.get("env") or []:
            ref = ((e.get("valueFrom") or {}).get("configMapKeyRef")) or {}
            if ref.get("name") == state_configmap and str(ref.get("key", "")).startswith(PREFIX):
                out.add(str(ref["key"]))
    return out
