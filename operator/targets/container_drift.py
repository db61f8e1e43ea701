"""What differs between the vLLM container a workload runs and the one kvplan's patch wants. Pure.

One comparison for every target that patches a vLLM container (the Deployment's pod template, an
LLMInferenceService's ``spec.template``, a LeaderWorkerSet's leader and worker templates): the ``command`` and
``args`` the patch sends, the GPU resource of ``resources.limits``/``requests``, and the env entries the patch
deletes or points at a ConfigMap key. Each difference is named by its field under the caller's ``prefix``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def container_drift(current: Mapping[str, Any], wanted: Mapping[str, Any], prefix: str, *,
                    per_kind: bool = True) -> list[str]:
    """Fields of ``current`` (the container as observed; empty when missing) that differ from ``wanted`` (its
    patch), each as ``{prefix}containers[<name>].<field>``.

    ``per_kind``: a resource difference is named ``resources.limits``/``resources.requests``; False names it once,
    ``resources`` (as the LeaderWorkerSet target lists it in ``kvplan.io/owned-fields``)."""
    out: list[str] = []
    where = f"{prefix}containers[{wanted['name']}]"
    for key in ("command", "args"):
        if key in wanted and list(current.get(key) or []) != wanted[key]:
            out.append(f"{where}.{key}")
    res = current.get("resources") or {}
    kinds = [kind for kind in ("limits", "requests")
             if any(str((res.get(kind) or {}).get(r)) != v for r, v in wanted["resources"][kind].items())]
    if per_kind:
        out += [f"{where}.resources.{kind}" for kind in kinds]
    elif kinds:
        out.append(f"{where}.resources")
    env = {e.get("name"): e for e in current.get("env") or []}
    for e in wanted.get("env") or []:
        if e.get("$patch") == "delete":
            if e["name"] in env:
                out.append(f"{where}.env[{e['name']}]")
        elif "valueFrom" in e and (env.get(e["name"], {}).get("valueFrom") != e["valueFrom"]
                                   or "value" in env.get(e["name"], {})):
            out.append(f"{where}.env[{e['name']}]")
    return out
