"""A group's model shape from a ConfigMap (``groups[].modelConfigRef``, issue 22): read in observe, every cycle.

A Hugging Face ``config.json`` is usually a file, not something a user pastes into a KVPlan; ``kubectl create
configmap qwen3-32b --from-file=config.json`` puts it where the KVPlan can name it. Observe reads the ConfigMap of
each group that names one and hands the spec on with the parsed object as that group's ``modelConfig``, so decide
plans it exactly as an inline one (kvcore validates the shape, and its errors name
``spec.groups[i].modelConfigRef[<name>/<key>].<field>``: :func:`kvplan_operator.decide.translate.cr_path`).

- a missing ConfigMap, or a missing key: ``ModelConfigMissing`` (nothing applied, Degraded, retried with backoff:
  the fix is outside the KVPlan, and the next cycle reads it again);
- a value that is not a JSON object: ``InvalidSpec`` naming the field, the ConfigMap and the key (retried too);
- a failed read: :class:`~kvplan_operator.kube.KubeError`, which observe reports as ``ReadFailed``.
"""

from __future__ import annotations

import json

from .. import conditions as C
from ..kube import KubeApi
from ..run import Failure
from ..spec import KVPlanSpec


def read_model_configs(kube: KubeApi, namespace: str, spec: KVPlanSpec) -> KVPlanSpec | Failure:
    """``spec`` with every ``modelConfigRef`` read into its group's ``modelConfig`` (``spec`` itself when no group
    names one), or the Failure that stops the cycle. Raises ``KubeError`` on a failed read."""
    if all(g.model_config_ref is None for g in spec.groups):
        return spec
    groups = list(spec.groups)
    for i, g in enumerate(groups):
        ref = g.model_config_ref
        if ref is None:
            continue
        path = ref.cr_path(i)
        cm = kube.get_configmap(namespace, ref.name)
        data = (cm or {}).get("data") or {}
        if cm is None or ref.key not in data:
            missing = f"ConfigMap {ref.name} not found" if cm is None else \
                f"ConfigMap {ref.name} has no key {ref.key!r} (keys: {', '.join(sorted(data)[:8]) or 'none'})"
            return Failure("observe", C.MODEL_CONFIG_MISSING, f"{path}: {missing}; nothing applied", temporary=True,
                           degraded=True)
        try:
            doc = json.loads(data[ref.key])
        except (ValueError, RecursionError):
            doc = None
        if not isinstance(doc, dict):
            return Failure("observe", C.INVALID_SPEC, f"{path}: not a JSON object (a Hugging Face config.json); "
                           "nothing applied", temporary=True, degraded=True)
        groups[i] = g.model_copy(update={"hf_config": doc})
    return spec.model_copy(update={"groups": tuple(groups)})
