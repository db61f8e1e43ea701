"""Part of phase 2, decide (pure): each group's engine knobs, and whether the disruption budget lets them restart
pods. docs/operator.md, "Engine knobs".

Per group (``spec.groups[].engine``, ``spec.groups[].plugin``):

- ``knobs: Auto`` (default): the running-request cap (``--max-num-active-seqs`` where vLLM has it, leaving
  ``--max-num-seqs`` and so the compile hash and CUDA graphs alone: :func:`admission_knob`; else ``--max-num-seqs``),
  ``--watermark`` and ``--scheduling-policy`` from kvcore's knob
  rule (:func:`kvcore.rules.knobs.knobs_for_plan`: the recent history replayed through the vLLM engine model), given the
  knobs the engines run now so that a re-plan on fresh data keeps them while they are inside the rule's knee (and
  reusing its answer while the group's situation holds; run within the cycle's work budget by
  :mod:`.engine_rules`, a group it leaves pending keeps the knobs it runs). The watermark exists from vLLM 0.33
  on: for an older vLLM (:func:`engine_version`: ``engine.vllmVersion``, else the Deployment's label
  ``kvplan.io/vllm-version``, else an official image's tag) the rule is run without it and the group's knob is
  refused (``KnobUnsupported``); for a version none of these tells, no version-gated knob is written at all
  (neither the watermark nor the plugin; ``EngineVersionUnknown``). ``knobs: Formula``: kvplan
  0.1's ``--max-num-seqs`` formula only (build.py), nothing else;
- ``plugin.enabled``: ``--scheduler-cls`` of kvplan's reservation gate, the variant matching vLLM's own
  async-scheduling decision for this container and planned layout (:func:`scheduler_class`,
  :mod:`kvplan_operator.targets.vllm_async`; refused when that cannot be told); only for vLLM 0.33.x (the plugin's
  pin), and never over a container's own ``--scheduler-cls``.

**Budget.** Any flag change rolls the Deployment. A group whose knobs differ from what its engines run restarts,
which counts exactly like a re-layout (:mod:`kvplan_operator.decide.policy`): free when this apply re-lays out anyway (one
attempt), or on a Deployment kvplan does not manage yet (first adoption); the continuation of the newest attempt of
the hour (same knobs) is not counted again; otherwise, a spec change included, allowed while fewer than
``replan.maxLayoutChangesPerHour`` restarts were attempted in the last hour (counted), else **held**: the group
keeps every knob it runs (none of them half-changed), and each held knob's planned and current value is reported.

**Priorities.** When a group runs ``--scheduling-policy priority``, every class gets a vLLM request priority:
1 + its rank by decreasing rho = c_p / c_w (the rule's own order; lower is served first and preempted last). vLLM
0.33 accepts a priority under ``fcfs`` too and ignores it, so one value per class works for every group; 0 (what
a request without one carries) is left to no class, so kvplan's plugin never mistakes it for one.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kvcore import Instance
from kvcore import WATERMARK_MIN_VERSION as WATERMARK_VERSION  # --watermark exists from vLLM 0.33 on

from .policy import resumes
from ..spec import Group, KVPlanSpec
from ..spec.engine import VLLM_VERSION, parse_version
from ..targets.deployment import find_container
from ..targets.plugin_mount import ASYNC_SCHEDULER, SYNC_SCHEDULER, is_plugin_scheduler, present
from ..targets.vllm_async import async_facts, decide_async
from ..targets.workload import served_by_deployment
from ..targets.vllm_flags import (ACTIVE_SEQS_FLAG, POLICY_FLAG, SCHEDULER_FLAG, SEQS_FLAG, WATERMARK_FLAG, literal,
                                  read_flags, running)

#: ``--max-num-active-seqs`` is in vLLM 0.33 (``vllm/config/scheduler.py``, ``SchedulerConfig.max_num_active_seqs``);
#: kvplan knows no earlier version to have it, so the knob rule's admission cap goes there only from 0.33 on.
ACTIVE_SEQS_VERSION = (0, 33, 0)
#: vLLM versions kvplan's plugin supports (``kvplan-vllm`` pins ``vllm>=0.33,<0.34``).
PLUGIN_VERSIONS = ((0, 33, 0), (0, 34, 0))


#: What the disruption budget's record names, in the scheduler's place, for a classification file without it.
LABELS_KEY = "classification-file"
#: A held classification file, as :class:`HeldKnob` names it.
LABELS_KNOB = "classification file"


@dataclass(frozen=True)
class Knobs:
    """A group's engine knobs; None: not set by kvplan (left as the container has it)."""

    max_num_seqs: int | None = None
    #: ``--max-num-active-seqs``: the admission cap without resizing the model runner (vLLM >= 0.33).
    max_num_active_seqs: int | None = None
    watermark: float | None = None
    scheduling_policy: str | None = None
    #: kvplan's scheduler class (the plugin on), else None (the plugin off).
    scheduler_cls: str | None = None
    #: The group's classification file mounted without kvplan's scheduler, for the stat logger's class labels
    #: (a history source ``kvplan`` in the spec). Mounting it restarts pods like any knob.
    labels: bool = False

    def admission(self) -> int | None:
        """The running-request cap vLLM applies: ``--max-num-active-seqs`` if set, else ``--max-num-seqs``."""
        return self.max_num_active_seqs if self.max_num_active_seqs is not None else self.max_num_seqs

    def budget_key(self) -> str:
        """The knobs as the disruption budget's record names them: admission cap, watermark, policy, class (the
        format of earlier operators, so an attempt they recorded is still recognised)."""
        f = self.flags()
        seqs = None if self.admission() is None else str(self.admission())
        sched = f[SCHEDULER_FLAG] if f[SCHEDULER_FLAG] is not None or not self.labels else LABELS_KEY
        return "/".join(str(v) for v in (seqs, f[WATERMARK_FLAG], f[POLICY_FLAG], sched))

    def flags(self) -> dict[str, str | None]:
        return {SEQS_FLAG: None if self.max_num_seqs is None else str(self.max_num_seqs),
                ACTIVE_SEQS_FLAG: None if self.max_num_active_seqs is None else str(self.max_num_active_seqs),
                WATERMARK_FLAG: None if self.watermark is None else f"{self.watermark:g}",
                POLICY_FLAG: self.scheduling_policy, SCHEDULER_FLAG: self.scheduler_cls}


@dataclass(frozen=True)
class HeldKnob:
    """A knob change the disruption budget held back: the flag, its planned and its current value."""

    knob: str
    planned: str
    current: str


@dataclass(frozen=True)
class GroupKnobs:
    """One group's knobs: what the plan wants (``planned``), what this apply writes (``target``: planned, or what
    runs when held), and why anything is not as planned."""

    group: str
    mode: str
    version: str
    #: where ``version`` came from: spec, image or default (:func:`engine_version`).
    version_from: str
    planned: Knobs
    target: Knobs
    running: Knobs
    held: tuple[HeldKnob, ...] = ()
    unsupported: tuple[str, ...] = ()
    rule: str | None = None
    failed: str | None = None
    #: the knob rule did not run for this group this cycle (work budget): it keeps the knobs it runs.
    pending: bool = False
    #: a version-gated knob was withheld because the group's vLLM version is unknown.
    version_unknown: bool = False


@dataclass(frozen=True)
class KnobDecision:
    """Every group's knobs, the class priorities, and the budget: the attempt to record (None: nothing counted)
    and one line on why."""

    groups: Mapping[str, GroupKnobs] = field(default_factory=dict)
    class_priority: Mapping[str, int] = field(default_factory=dict)
    record: str | None = None
    budget: str = ""
    #: True when this apply continues the newest attempt of the hour (its record is re-stamped, not added).
    resumed: bool = False

    def restarted(self) -> list[str]:
        """Groups whose knobs this apply changes."""
        return sorted(g for g, k in self.groups.items() if differs(k.target, k.running))


def running_knobs(body: Mapping[str, Any] | None, container: str | None) -> Knobs:
    """The knobs a Deployment's vLLM container runs (vLLM's defaults for absent flags; a value from a shell variable
    reads as None). The scheduler counts as kvplan's only with the reservation file mounted."""
    c = find_container(body or {}, container) or {}
    flags = read_flags(c)

    def number(flag: str) -> float | None:
        text = running(flags, flag)
        try:
            return float(text) if text is not None else None
        except ValueError:
            return None

    seqs = number(SEQS_FLAG)
    active = number(ACTIVE_SEQS_FLAG)
    sched = literal(flags[SCHEDULER_FLAG] or "")
    mounted = body is not None and all(present(body, c).values())
    policy = running(flags, POLICY_FLAG)
    return Knobs(max_num_seqs=int(seqs) if seqs is not None else None,
                 max_num_active_seqs=int(active) if active is not None else None, watermark=number(WATERMARK_FLAG),
                 scheduling_policy=policy if policy in ("fcfs", "priority") else None,
                 scheduler_cls=sched if is_plugin_scheduler(sched) and mounted else None,
                 labels=mounted and not is_plugin_scheduler(sched))


def differs(target: Knobs, now: Knobs) -> bool:
    """Whether writing ``target`` changes the flags ``now`` describes (a None target knob changes nothing)."""
    return any(t is not None and t != n for t, n in ((target.max_num_seqs, now.max_num_seqs),
                                                    (target.max_num_active_seqs, now.max_num_active_seqs),
                                                    (target.watermark, now.watermark),
                                                    (target.scheduling_policy, now.scheduling_policy))) \
        or target.scheduler_cls != now.scheduler_cls or target.labels != now.labels


def scheduler_class(group: Group, body: Mapping[str, Any] | None, pp: int) -> tuple[str | None, str]:
    """The plugin's class for the group and why: ``plugin.scheduler`` when Async/Sync, else the variant matching
    what vLLM 0.33 will run for the container at pipeline-parallel size ``pp``
    (:func:`kvplan_operator.targets.vllm_async.decide_async`); None when that cannot be told."""
    if group.plugin.scheduler != "Auto":
        return (ASYNC_SCHEDULER if group.plugin.scheduler == "Async" else SYNC_SCHEDULER), \
            f"plugin.scheduler {group.plugin.scheduler}"
    facts = async_facts(find_container(body or {}, group.container) or {}, pp)
    if facts is None:
        return None, "the container's vLLM argv cannot be told"
    choice = decide_async(facts)
    if choice.on is None:
        return None, choice.reason
    return (ASYNC_SCHEDULER if choice.on else SYNC_SCHEDULER), choice.reason


#: An official vLLM image and its version tag: ``[registry/]vllm/vllm-openai:v0.33.0`` (also ``vllm-openai-cpu``,
#: ``...-rocm``); any other image's tag says nothing about vLLM's version.
_OFFICIAL = re.compile(r"^(?:.*/)?vllm-openai(?:-[a-z0-9]+)?:v?([0-9]+\.[0-9]+(?:\.[0-9]+)*)(?:@.*)?$")
#: The label a user puts on the Deployment (or its pod template) to state the image's vLLM version.
VERSION_LABEL = "kvplan.io/vllm-version"
#: The version kvcore's knob rule is asked about for an engine whose version is unknown: below every gate, so the
#: rule uses no version-gated knob (``--watermark``).
UNKNOWN_RULE_VERSION = "0.0.0"


@dataclass(frozen=True)
class EngineVersion:
    """A group's vLLM version and where it came from: ``spec`` (``engine.vllmVersion``), ``label``
    (:data:`VERSION_LABEL`), ``image`` (the official image's tag) or ``unknown`` (``version`` None: no
    version-gated knob is written; ``problem`` says why it is unknown)."""

    version: tuple[int, int, int] | None
    text: str
    source: str
    problem: str = ""

    def describe(self) -> str:
        return {"spec": f"engine.vllmVersion {self.text}", "label": f"vLLM {self.text} (label {VERSION_LABEL})",
                "image": f"vLLM {self.text} (the image's tag)",
                "unknown": f"an unknown vLLM version ({self.problem})"}[self.source]

    def at_least(self, floor: tuple[int, int, int]) -> bool:
        """Whether the version is known and at least ``floor`` (an unknown version passes no gate)."""
        return self.version is not None and self.version >= floor

    def within(self, bounds: tuple[tuple[int, int, int], tuple[int, int, int]]) -> bool:
        """Whether the version is known and in ``[bounds[0], bounds[1])``."""
        return self.version is not None and bounds[0] <= self.version < bounds[1]

    def rule_text(self) -> str:
        """The version kvcore's rules are asked about (:data:`UNKNOWN_RULE_VERSION` when unknown)."""
        return UNKNOWN_RULE_VERSION if self.version is None else ".".join(str(p) for p in self.version)


def _label(body: Mapping[str, Any]) -> str | None:
    for meta in (body.get("metadata"), ((body.get("spec") or {}).get("template") or {}).get("metadata")):
        value = ((meta or {}).get("labels") or {}).get(VERSION_LABEL)
        if value is not None:
            return str(value)
    return None


def engine_version(g: Group, body: Mapping[str, Any] | None) -> EngineVersion:
    """``engine.vllmVersion``, else the Deployment's :data:`VERSION_LABEL` (its own labels, then its pod
    template's), else the tag of an official ``vllm/vllm-openai`` image of the group's container, else unknown."""
    if g.engine.vllm_version is not None:
        return EngineVersion(parse_version(g.engine.vllm_version), g.engine.vllm_version, "spec")
    label = _label(body or {})
    if label is not None:
        if re.fullmatch(VLLM_VERSION, label):
            return EngineVersion(parse_version(label), label, "label")
        return EngineVersion(None, "", "unknown", f"label {VERSION_LABEL}={label!r} is not a version like 0.33.0")
    image = str((find_container(body or {}, g.container) or {}).get("image") or "")
    m = _OFFICIAL.match(image)
    if m:
        return EngineVersion(parse_version(m.group(1)), m.group(1), "image")
    return EngineVersion(None, "", "unknown", f"image {image or '(none)'!r} is not an official vllm/vllm-openai:vX.Y.Z "
                         f"tag; state it with engine.vllmVersion or the label {VERSION_LABEL}")


def class_priorities(instance: Instance) -> dict[str, int]:
    """class -> 1 + rank by decreasing rho = c_p / c_w (ties in spec order): the knob rule's order."""
    rho = [c.costs()[0] / c.costs()[1] if c.costs()[1] > 0 else float("inf") for c in instance.classes]
    order = sorted(range(len(rho)), key=lambda i: -rho[i])
    return {instance.classes[i].name: rank + 1 for rank, i in enumerate(order)}


def runner_capacity(g: Group, body: Mapping[str, Any] | None) -> int | None:
    """The ``--max-num-seqs`` the group's engines run (the model runner's request slots): the container's literal
    value, else vLLM 0.33's per-GPU default (``EngineArgs.get_batch_defaults``, for the catalogue's GPU or the
    group's ``gpuSpec``); None when it is known only at run time."""
    raw = read_flags(find_container(body or {}, g.container) or {})[SEQS_FLAG]
    if raw is None:
        return int(g.node_pool.gpu().vllm_max_num_seqs)
    text = literal(raw)
    return int(text) if text is not None and text.isdigit() else None


def admission_knob(g: Group, body: Mapping[str, Any] | None, cap: int, ver: EngineVersion
                   ) -> tuple[int | None, int | None]:
    """(``--max-num-seqs``, ``--max-num-active-seqs``) carrying the knob rule's running-request cap ``cap``.

    Where vLLM has ``--max-num-active-seqs`` (:data:`ACTIVE_SEQS_VERSION`) and the runner's capacity is known, the
    cap goes there and ``--max-num-seqs`` is left as it runs: it is part of the compile hash and sizes the CUDA
    graphs, so changing it re-compiles and re-captures (docs/operator.md, "Engine knobs"). vLLM refuses an active
    cap above ``--max-num-seqs`` (``SchedulerConfig`` validation), and never runs more than that anyway, so the
    cap is written as ``min(cap, capacity)`` (not at all when that is the capacity and no active cap is set).
    Otherwise (an older or unknown version, a capacity known only at run
    time) ``--max-num-seqs`` carries it, as before."""
    capacity = runner_capacity(g, body)
    if ver.at_least(ACTIVE_SEQS_VERSION) and capacity is not None:
        given = read_flags(find_container(body or {}, g.container) or {})[ACTIVE_SEQS_FLAG] is not None
        if cap >= capacity and not given:
            return None, None  # vLLM admits up to --max-num-seqs already: nothing to write
        return None, min(cap, capacity)
    return cap, None


def _planned(g: Group, choice: Any, body: Mapping[str, Any] | None, pp: int, ver: EngineVersion,
             labels: bool = False) -> tuple[Knobs, list[str]]:
    notes: list[str] = []
    knobs = Knobs()
    watermark_ok = ver.at_least(WATERMARK_VERSION)
    if g.engine.knobs == "Auto":
        if ver.version is None:
            notes.append(f"group {g.name}: --watermark not written: {ver.describe()}")
        elif not watermark_ok:
            notes.append(f"group {g.name}: --watermark not written: {ver.describe()} has no --watermark "
                         f"(needs >= 0.33)")
        if choice is not None:
            seqs, active = admission_knob(g, body, int(choice.max_num_seqs), ver)
            knobs = Knobs(max_num_seqs=seqs, max_num_active_seqs=active,
                          watermark=None if choice.watermark is None or not watermark_ok
                          else float(choice.watermark), scheduling_policy=str(choice.scheduling_policy))
    if g.plugin.enabled:
        cls, why = scheduler_class(g, body, pp)
        own = literal(read_flags(find_container(body or {}, g.container) or {})[SCHEDULER_FLAG] or "")
        if cls is None:
            notes.append(f"group {g.name}: kvplan's plugin not added: whether vLLM schedules asynchronously cannot "
                         f"be told ({why}); set plugin.scheduler to Async or Sync")
        elif not ver.within(PLUGIN_VERSIONS):
            notes.append(f"group {g.name}: --scheduler-cls {cls} (kvplan's plugin) not added: the plugin needs vLLM "
                         f"0.33.x, the group has {ver.describe()}")
        elif own and not is_plugin_scheduler(own):
            notes.append(f"group {g.name}: --scheduler-cls {cls} (kvplan's plugin) not added: the container runs "
                         f"its own scheduler {own}")
        else:
            knobs = replace(knobs, scheduler_cls=cls)
    if labels and knobs.scheduler_cls is None:
        knobs = replace(knobs, labels=True)
    return knobs, notes


def needs_labels(spec: KVPlanSpec) -> bool:
    """Whether a class's history comes from kvplan's stat logger (``history.source: kvplan``), whose class labels
    need the group's classification file in every serving pod (prompt-length rules, the default class)."""
    return any(c.history.source == "kvplan" for c in spec.classes)


def _held(planned: Knobs, now: Knobs) -> tuple[HeldKnob, ...]:
    out = []
    for flag, p in planned.flags().items():
        n = now.flags()[flag]
        if (p is not None or flag == SCHEDULER_FLAG) and p != n:
            out.append(HeldKnob(flag, p or "(none)", n or "(none)"))
    if planned.labels != now.labels:
        out.append(HeldKnob(LABELS_KNOB, "mounted" if planned.labels else "(none)",
                            "mounted" if now.labels else "(none)"))
    return tuple(out)


def decide_knobs(spec: KVPlanSpec, instance: Instance, choices: Mapping[str, Any], *,
                 bodies: Mapping[str, Mapping[str, Any] | None], adopted: Sequence[str], relaid: Sequence[str],
                 layouts: Mapping[str, tuple[int, int]], spec_changed: bool, recorded: Sequence[str],
                 max_per_hour: int, failed: Mapping[str, str] | None = None, pending: Collection[str] = (),
                 pending_note: str = "") -> KnobDecision:
    """The knob decision (module docstring). ``choices``: group -> the knob rule's answer
    (:mod:`.engine_rules`); ``failed``: group -> why the rule failed; ``pending``: groups the cycle's work budget
    left without an answer (they keep what runs; ``pending_note`` says why). ``bodies``: group -> its Deployment;
    ``adopted``: groups kvplan manages already; ``relaid``: groups this apply re-lays out; ``layouts``: group ->
    planned (tp, pp); ``recorded``: the budget's attempts in the last hour (their keys)."""
    failed = failed or {}
    now = {g.name: running_knobs(bodies.get(g.name), g.container) for g in spec.groups}
    versions = {g.name: engine_version(g, bodies.get(g.name)) for g in spec.groups}
    planned: dict[str, Knobs] = {}
    notes: dict[str, list[str]] = {}
    labels = needs_labels(spec)
    for g in spec.groups:
        choice = choices.get(g.name) if g.name not in failed else None
        planned[g.name], notes[g.name] = _planned(g, choice, bodies.get(g.name), layouts.get(g.name, (1, 1))[1],
                                                  versions[g.name],
                                                  labels and served_by_deployment(g, bodies.get(g.name)))
    moving = sorted(g.name for g in spec.groups if g.name in adopted and g.name not in relaid
                    and bodies.get(g.name) is not None and differs(planned[g.name], now[g.name]))
    key = "knobs:" + ",".join(f"{n}={planned[n].budget_key()}" for n in moving)
    record: str | None = None
    resumed = False
    held: set[str] = set()
    if not moving:
        budget = ""
    elif relaid:
        budget = f"knobs of {', '.join(moving)} change with the re-layout of {', '.join(sorted(relaid))}"
    elif resumes(recorded, key):  # only the newest attempt of the hour can be unfinished (issue 26)
        resumed = True
        budget = f"resuming the knob change of {', '.join(moving)} attempted within the hour"
    elif len(recorded) < max_per_hour:  # a spec change does not bypass the budget either
        budget, record = (("spec changed: " if spec_changed else "") + f"knobs of {', '.join(moving)} change: a "
                          f"restart ({len(recorded) + 1} of maxLayoutChangesPerHour {max_per_hour} in the last "
                          "hour)"), key
    else:
        held = set(moving)
        budget = (f"knob change of {', '.join(moving)} held: {len(recorded)} restart(s) in the last hour "
                  f"(maxLayoutChangesPerHour {max_per_hour})")
    groups = {}
    for g in spec.groups:
        n = g.name
        choice = choices.get(n)
        groups[n] = GroupKnobs(
            group=n, mode=g.engine.knobs, version=versions[n].text, version_from=versions[n].source,
            planned=planned[n],
            target=now[n] if n in held else planned[n], running=now[n],
            held=_held(planned[n], now[n]) if n in held else (), unsupported=tuple(notes[n]),
            rule=str(choice.reason) if choice is not None and n not in failed
            else (f"pending: {pending_note}" if n in pending else None), failed=failed.get(n),
            pending=n in pending,
            version_unknown=versions[n].version is None and (g.engine.knobs == "Auto" or g.plugin.enabled))
    policy = any(k.target.scheduling_policy == "priority" for k in groups.values())
    return KnobDecision(groups, class_priorities(instance) if policy else {}, record, budget, resumed)


def engine_status(k: GroupKnobs) -> dict[str, Any]:
    """``status.plan.groups.<g>.engine``: the knobs this apply leaves in force, the plan's where they differ
    (``held``: knob, planned, current), refusals, and the knob rule's reason."""
    t = k.target
    return {"vllmVersion": k.version or None, "vllmVersionFrom": k.version_from, "knobs": k.mode,
            "maxNumSeqs": t.max_num_seqs, "maxNumActiveSeqs": t.max_num_active_seqs, "watermark": t.watermark,
            "schedulingPolicy": t.scheduling_policy, "schedulerCls": t.scheduler_cls,
            "held": [{"knob": h.knob, "planned": h.planned, "current": h.current} for h in k.held],
            "unsupported": list(k.unsupported), "rule": k.failed or k.rule}


def knob_condition(dec: KnobDecision, *, reserve_failed: Mapping[str, str] | None = None,
                   pending: Mapping[str, Sequence[str]] | None = None, pending_note: str = "",
                   ) -> tuple[bool, str, str]:
    """(status, reason, message) of the EngineKnobs condition: a rule failure first (knobs, then reservations),
    then a group of unknown vLLM version (its version-gated knobs withheld), then refused knobs, then held ones,
    then rules left pending by the work budget (``pending``: rule -> groups);
    else every knob in force."""
    from .. import conditions as C

    failed = sorted(g for g, k in dec.groups.items() if k.failed)
    res_failed = sorted((reserve_failed or {}).items())
    unsupported = [m for k in dec.groups.values() for m in k.unsupported]
    held = [f"group {g}: " + ", ".join(f"{h.knob} {h.planned} (in force {h.current})" for h in k.held)
            for g, k in sorted(dec.groups.items()) if k.held]
    waiting = [f"{rule} of {', '.join(groups)}" for rule, groups in sorted((pending or {}).items()) if groups]
    parts = [f"knob rule failed for {', '.join(failed)} ({dec.groups[failed[0]].failed}); their knobs stay as they "
             "run"] if failed else []
    parts += [f"reservation rule failed for {', '.join(g for g, _ in res_failed)} ({res_failed[0][1]}); their "
              "reservation files stay as they are"] if res_failed else []
    parts += unsupported
    parts += [f"held back by the disruption budget ({dec.budget}): " + "; ".join(held)] if held else []
    parts += [f"engine-model rules pending ({pending_note}): " + "; ".join(waiting)] if waiting else []
    if failed:
        return False, C.KNOB_RULE_FAILED, "; ".join(parts)
    if res_failed:
        return False, C.RESERVE_RULE_FAILED, "; ".join(parts)
    if any(k.version_unknown for k in dec.groups.values()):
        return False, C.ENGINE_VERSION_UNKNOWN, "; ".join(parts)
    if unsupported:
        return False, C.KNOB_UNSUPPORTED, "; ".join(parts)
    if held:
        return False, C.KNOBS_HELD, "; ".join(parts)
    if waiting:
        return False, C.RULES_PENDING, "; ".join(parts)
    auto = sorted(g for g, k in dec.groups.items() if k.mode == "Auto")
    return True, C.KNOBS_IN_FORCE, ("knob rule's knobs in force on " + ", ".join(auto) if auto
                                    else "engine.knobs Formula on every group: kvplan sets only --max-num-seqs")
