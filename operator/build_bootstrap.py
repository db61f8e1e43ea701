"""Phase 3 of the classification file's bootstrap (pure): :class:`~kvplan_operator.decide.bootstrap.Bootstrap` ->
the writes, sent by the ordinary apply (state ConfigMap first, then the Deployments).

- the state ConfigMap ``<kvplan>-kvplan``: created as the plan would create it, else merge-patched with only the
  bootstrap's files (``data["reservations-<group>.json"]``, every other key kept) and, when a mount is counted, the
  disruption budget's record; refused (``OwnedByOther``) when another KVPlan owns it;
- per Deployment to mount: a strategic-merge patch adding only the plugin's volume, mount and env
  (:func:`kvplan_operator.targets.plugin_mount.plugin_patch`) and kvplan's owner annotation (with the mount's
  fields added to ``kvplan.io/owned-fields``); no layout, replicas, flags or ``kvplan.io/layout`` (the Deployment
  is not adopted: its first plan does that). Refused, nothing applied, for the reasons the Deployment target refuses
  a group: ``DeploymentMissing``, ``OwnedByOther``, ``OwnedByController``, ``ContainerNotFound``,
  ``UnsupportedContainerLayout`` (kvplan's volume name or mount path taken).
"""

from __future__ import annotations

from typing import Any

from . import conditions as C
from .build import TEMPORARY, Built
from .decide.bootstrap import Bootstrap
from .desired import ANN_LAYOUT_CHANGES, ANN_OWNED, ANN_OWNER, Desired, Stage, Write
from .observe import Observation
from .run import Failure, RunContext
from .targets import BuildInput, TargetRefused, all_targets, owner_conflict
from .targets.deployment import find_container
from .targets.ownership import own_conflict
from .targets.plugin_mount import ENV_FILE, VOLUME, file_key, mount_conflict, plugin_drift, plugin_patch
from .targets.state_configmap import build_state_configmap, configmap_drift, encode_changes
from .targets.workload_owner import controller_ref, refusal

#: The ``plan_id`` of the bootstrap's writes in ``status.applying`` (there is no plan).
BOOTSTRAP_ID = "classification-file"


def build_bootstrap(run: RunContext, obs: Observation, boot: Bootstrap) -> Built | Failure:
    """The bootstrap's writes (module docstring), or the refusal that stops it with nothing applied."""
    desired = Desired(plan_id=BOOTSTRAP_ID, groups={}, classes={}, rates={}, manage_replicas={},
                      layout_changes=boot.changes, relayout_generation=obs.relayout_generation,
                      reservation_files=dict(boot.files))
    inp = BuildInput(run=run, spec=obs.spec, desired=desired, observed=obs.objects, owners_alive=obs.owners_alive)
    try:
        writes = [*_state(inp, boot), *(_deployment(inp, g) for g in boot.mount)]
    except TargetRefused as exc:
        return Failure("build", exc.reason, f"{exc}; nothing applied", temporary=exc.reason in TEMPORARY)
    return Built(desired, tuple(w for w in writes if w is not None), all_targets(), ())


def _state(inp: BuildInput, boot: Bootstrap) -> list[Write]:
    if not boot.files and not boot.recorded:
        return []
    run = inp.run
    name = run.state_configmap
    current = inp.observed.get("state-configmap", {}).get(name)
    conflict = own_conflict("state", name, current, owner=run.owner, namespace=run.namespace,
                            owners_alive=inp.owners_alive)
    if conflict:
        raise TargetRefused(C.OWNED_BY_OTHER, conflict)
    if current is None:
        body = build_state_configmap(name=name, namespace=run.namespace, owner_ref=run.owner_reference,
                                     desired=inp.desired, owner=run.owner)
        return [Write(Stage.STATE, "state-configmap", "ConfigMap", name, "create", body)]
    annotations = {ANN_OWNER: run.owner}
    if boot.recorded:
        annotations[ANN_LAYOUT_CHANGES] = encode_changes(boot.changes)
    patch = {"metadata": {"annotations": annotations},
             "data": {file_key(g): doc for g, doc in sorted(boot.files.items())}}
    drift = configmap_drift(current, patch)
    return [Write(Stage.STATE, "state-configmap", "ConfigMap", name, "patch", patch, tuple(drift))] if drift else []


def _deployment(inp: BuildInput, group: str) -> Write | None:
    g = next(x for x in inp.spec.groups if x.name == group)
    body = inp.observed.get("deployment", {}).get(g.deployment)
    if body is None:
        raise TargetRefused(C.DEPLOYMENT_MISSING, f"Deployment {g.deployment} not found in namespace "
                            f"{inp.run.namespace}")
    conflict = owner_conflict("Deployment", g.deployment, body, inp)
    if conflict:
        raise TargetRefused(C.OWNED_BY_OTHER, conflict)
    ref = controller_ref(body)
    if ref is not None:
        raise TargetRefused(C.OWNED_BY_CONTROLLER, refusal(g.deployment, ref, body))
    container = find_container(body, g.container)
    if container is None:
        raise TargetRefused(C.CONTAINER_NOT_FOUND, f"Deployment {g.deployment}: vLLM container not found (set "
                            "groups[].container)")
    clash = mount_conflict(body, container)
    if clash:
        raise TargetRefused(C.UNSUPPORTED_CONTAINER_LAYOUT, f"Deployment {g.deployment}: {clash}; kvplan's "
                            "classification file needs it")
    state = inp.run.state_configmap
    drift = plugin_drift(body, container, on=True, state_configmap=state, group=g.name)
    if not drift:
        return None
    volumes, mounts, env = plugin_patch(body, container, on=True, state_configmap=state, group=g.name)
    name = container["name"]
    ann = (body.get("metadata") or {}).get("annotations") or {}
    owned = [f for f in str(ann.get(ANN_OWNED) or "").split(",") if f]
    owned += [f for f in (f"containers[{name}].env[{ENV_FILE}]", f"containers[{name}].volumeMounts[kvplan]",
                          f"volumes[{VOLUME}]") if f not in owned]
    patch: dict[str, Any] = {
        "metadata": {"annotations": {ANN_OWNER: inp.run.owner, ANN_OWNED: ",".join(owned)}},
        "spec": {"template": {"spec": {"volumes": volumes,
                                       "containers": [{"name": name, "volumeMounts": mounts, "env": env}]}}}}
    return Write(Stage.LAYOUT, "deployment", "Deployment", g.deployment, "patch", patch, tuple(drift))
