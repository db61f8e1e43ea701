"""Part of phase 2, decide (pure): the classification file's bootstrap, while the history it labels is awaited.

A class whose history comes from kvplan's stat logger (``history.source: kvplan``) is counted under its own label
only where the serving pod mounts its group's classification file (the prompt-length rules, the ``classify``
rules, the fleet default: :func:`kvplan_operator.targets.class_rules.classification_document`); without it every
request is the default class. The plan writes and mounts that file, but there is no plan without that history: so
when observe fails only for want of it (:class:`kvplan_operator.observe.HistoryAwaited`) and the mode is
``Apply``, :func:`decide_bootstrap` says what to write so that the history can start:

- per Deployment group (LeaderWorkerSet and LLMInferenceService groups get no file, as with a plan), the file
  reserving nothing, naming no plan, in the state ConfigMap, written when missing or stale (a change reaches the
  pods without a restart: the kubelet updates the mounted file in place);
- a file that names a plan (the last good plan's) is left as it is: that plan stays in force;
- the mount (volume, mount, env: :mod:`kvplan_operator.targets.plugin_mount`) on each Deployment that lacks it:
  a restart, recorded in the disruption budget like a knob change of a managed Deployment (key
  ``knobs:<group>=None/None/None/classification-file,...``; the continuation of the newest attempt of the hour
  re-stamps it), and held, every mount of it, when ``replan.maxLayoutChangesPerHour`` restarts were attempted in
  the last hour (``KnobsHeld``). Nothing else of the Deployment changes: its layout, replicas and flags are the
  first plan's to write.

Idempotent: with every file current and mounted, nothing is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kvcore import ReservationsError, parse_reservations

from ..desired import LayoutChange
from ..observe import HistoryAwaited, Observation
from ..observe.sources.observe import FILE_LABELLED
from ..run import RunContext
from ..targets.class_rules import classification_document
from ..targets.deployment import find_container
from ..targets.plugin_mount import file_key, plugin_drift
from ..targets.workload import served_by_deployment
from ..targets.workload_owner import controller_ref, owner_target
from .knobs import Knobs
from .policy import recent_changes, resumes


@dataclass(frozen=True)
class Bootstrap:
    """What the bootstrap writes (see the module docstring)."""

    #: group -> its classification file, for each group whose file is missing or stale (and not held).
    files: Mapping[str, str] = field(default_factory=dict)
    #: groups whose Deployment gets the mount (a restart each).
    mount: tuple[str, ...] = ()
    #: groups whose Deployment mounts its file already.
    mounted: tuple[str, ...] = ()
    #: groups whose file names a plan (the last good plan's): left as it is.
    kept: tuple[str, ...] = ()
    #: groups whose mount the disruption budget holds.
    held: tuple[str, ...] = ()
    #: the disruption budget to persist (the state ConfigMap's record) and whether this adds or re-stamps one.
    changes: tuple[LayoutChange, ...] = ()
    recorded: bool = False
    #: one line on the budget (empty when nothing restarts).
    budget: str = ""
    #: the classes whose history is awaited.
    awaited: tuple[str, ...] = ()

    @property
    def writes(self) -> bool:
        return bool(self.files or self.mount)


def _plan_of(doc: str | None) -> tuple[bool, str | None]:
    """(readable, the plan it names) of a state ConfigMap file."""
    if doc is None:
        return False, None
    try:
        return True, parse_reservations(doc).plan
    except ReservationsError:
        return False, None


def decide_bootstrap(run: RunContext, awaited: HistoryAwaited) -> Bootstrap | None:
    """The bootstrap for ``awaited`` (module docstring); None when it does not apply: mode ``DryRun``, a class
    awaited whose source the file does not label, no Deployment group, or no observation to start from."""
    obs: Observation | None = awaited.observation
    if obs is None or obs.spec.mode != "Apply":
        return None
    sources = {c.name: c.history.source for c in obs.spec.classes}
    if not awaited.classes or any(sources.get(c) not in FILE_LABELLED for c in awaited.classes):
        return None
    state = obs.objects.get("state-configmap", {}).get(run.state_configmap)
    data: Mapping[str, str] = (state or {}).get("data") or {}
    files: dict[str, str] = {}
    mount: list[str] = []
    mounted: list[str] = []
    kept: list[str] = []
    for g in obs.spec.groups:
        body = obs.groups[g.name].body
        ref = controller_ref(body)
        if not served_by_deployment(g, body) or (ref is not None and owner_target(ref, frozenset(obs.objects))):
            continue  # the owner's target writes this group (and gives it no file)
        container = find_container(body or {}, g.container) or {}
        on = body is not None and not plugin_drift(body, container, on=True, state_configmap=run.state_configmap,
                                                    group=g.name)
        current = data.get(file_key(g.name))
        readable, plan = _plan_of(current)
        if readable and plan is not None:
            if not on:  # a plan's file no pod mounts: the first plan rewrites it
                files[g.name] = _document(run, obs)
                mount.append(g.name)
            else:
                kept.append(g.name)
            continue
        want = _document(run, obs)
        if current != want:
            files[g.name] = want
        (mounted if on else mount).append(g.name)
    if not (mount or mounted or kept):
        return None  # no Deployment group: nothing can carry the file
    return _budget(run, obs, Bootstrap(files, tuple(mount), tuple(mounted), tuple(kept),
                                       awaited=tuple(awaited.classes)))


def _document(run: RunContext, obs: Observation) -> str:
    return classification_document(obs.spec, owner=run.owner, plan=None, reserve={}, routed=(), priorities={})


def budget_key(groups: tuple[str, ...]) -> str:
    """The budget record of mounting ``groups``' files: a knob change of each (:meth:`Knobs.budget_key`)."""
    return "knobs:" + ",".join(f"{g}={Knobs(labels=True).budget_key()}" for g in sorted(groups))


def _budget(run: RunContext, obs: Observation, boot: Bootstrap) -> Bootstrap:
    keep = set(recent_changes([c.t for c in obs.layout_changes], run.now))
    recent = tuple(c for c in obs.layout_changes if c.t in keep)
    if not boot.mount:
        return Bootstrap(boot.files, (), boot.mounted, boot.kept, changes=obs.layout_changes, awaited=boot.awaited)
    key = budget_key(boot.mount)
    limit = obs.spec.replan.max_layout_changes_per_hour
    names = ", ".join(boot.mount)
    if resumes([c.layouts for c in recent], key):
        changes, budget = (*recent[:-1], LayoutChange(round(run.now, 3), key)), (
            f"resuming the classification file's mount on {names} attempted within the hour")
    elif len(recent) < limit:
        changes, budget = (*recent, LayoutChange(round(run.now, 3), key)), (
            f"classification file of {names} mounted: a restart ({len(recent) + 1} of maxLayoutChangesPerHour "
            f"{limit} in the last hour)")
    else:
        files = {g: doc for g, doc in boot.files.items() if g not in boot.mount}
        return Bootstrap(files, (), boot.mounted, boot.kept, held=boot.mount, changes=obs.layout_changes,
                         budget=f"classification file mount of {names} held: {len(recent)} restart(s) in the last "
                         f"hour (maxLayoutChangesPerHour {limit})", awaited=boot.awaited)
    return Bootstrap(boot.files, boot.mount, boot.mounted, boot.kept, changes=tuple(changes), recorded=True,
                     budget=budget, awaited=boot.awaited)
