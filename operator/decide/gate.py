"""Part of phase 2, decide (pure): the reservations kvplan's vLLM plugin gates admission with, one file per group.
docs/operator.md, "Reservations that pay".

The plan's y_i is a per-request newsvendor quantile; the plugin's gate holds it for every running request at once,
which can cost more concurrency than the stalls it prevents are worth (docs/results.md, section 5: at load 0.9 the
plan's raw reservations keep 0.78 of stock vLLM's goodput, geometric mean over 5 traces, the rule's 1.06). So the file a group's plugin reads holds
what kvcore's reservation rule (:func:`kvcore.rules.reserve.reserves_for_plan`, run by :mod:`.engine_rules`) keeps
for that group: per class nothing, a fraction of y, or a quantile of its outputs, measured on the group's recent
history through the vLLM engine model. One class can get different reservations on different groups, hence one
file per group (the state ConfigMap's key ``reservations-<group>.json``, :mod:`.targets.plugin_mount`).

Per group whose engines run, or are about to run, kvplan's plugin:

- the rule's answer: its reservation for each class routed to the group, 0 for the others (``not routed here``;
  the file lists only the classes that matter on the group, :func:`~.build.reservation_document`);
- the rule pending (this cycle's work budget was spent) or failed: the file in force (from the state ConfigMap)
  stays as it is; with none yet, nothing is reserved (the gate then admits as stock vLLM does) until the rule runs.

Status (``status.plan.groups.<g>.gate``) gives the rule's reason and how many classes the group's file lists and
reserves for; the plan's detail (``gates.<g>``, :mod:`kvplan_operator.targets.plandetail`: status stays small at 256
classes x 64 groups) shows per class the plan's y, the reservation in the file and where it comes from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvcore import Plan
from kvcore import ReservationsError, parse_reservations

from .knobs import KnobDecision
from .rules import RESERVES, RuleAnswers
from ..spec import KVPlanSpec
from ..targets.plugin_mount import file_key


@dataclass(frozen=True)
class GroupGate:
    """One group's reservation file: per class the tokens reserved (every class of the spec), the plan's y, where
    each value comes from, and why."""

    group: str
    reserve: Mapping[str, int]
    plan: Mapping[str, int]
    sources: Mapping[str, str]
    reason: str
    #: classes the status lists (routed to the group, or reserving something).
    shown: tuple[str, ...] = ()
    pending: bool = False
    failed: str | None = None

    def status(self) -> dict[str, Any]:
        """``status.plan.groups.<g>.gate``: why, and how many classes it lists and reserves for (``failed`` only when
        the rule failed: a merge patch drops nulls). Per class: :meth:`detail`, in the plan's detail."""
        return {"reason": self.reason, "pending": self.pending} | ({"failed": self.failed} if self.failed else {}) | {
            "classes": len(self.shown), "reserving": sum(1 for c in self.shown if self.reserve[c] > 0)}

    def detail(self) -> dict[str, Any]:
        """The plan detail's ``gates.<g>`` (:mod:`kvplan_operator.targets.plandetail`): per class listed, the plan's y, the
        reservation in the file and where it comes from, and the reason."""
        return {"reason": self.reason, "classes": {c: {"planTokens": self.plan.get(c, 0),
                                                       "reserveTokens": self.reserve[c], "source": self.sources[c]}
                                                   for c in self.shown}}


@dataclass(frozen=True)
class GateDecision:
    """The reservation file of every group that mounts one (or is about to)."""

    groups: Mapping[str, GroupGate] = field(default_factory=dict)

    @property
    def failed(self) -> dict[str, str]:
        return {g: x.failed for g, x in self.groups.items() if x.failed}


def in_force(state: Mapping[str, Any] | None, group: str) -> dict[str, int] | None:
    """The reservations of ``group``'s file in the state ConfigMap now; None when there is none (or it is not a
    valid document: the plugin then keeps its last good values, and the next write replaces it)."""
    text = ((state or {}).get("data") or {}).get(file_key(group))
    if not isinstance(text, str):
        return None
    try:
        return dict(parse_reservations(text).reserve_tokens)
    except ReservationsError:
        return None


def gate_reservations(spec: KVPlanSpec, plan: Plan, rules: RuleAnswers, knobs: KnobDecision,
                      state: Mapping[str, Any] | None, *, pending_note: str = "") -> GateDecision:
    """The reservation file of each group whose engines run kvplan's plugin or will after this apply (module
    docstring). ``state``: the state ConfigMap as observed (the files in force)."""
    y = {c.name: int(round(c.reserve_tokens)) for c in plan.classes}
    names = [c.name for c in spec.classes]
    out: dict[str, GroupGate] = {}
    for g in spec.groups:
        k = knobs.groups.get(g.name)
        if k is None or (k.target.scheduler_cls is None and k.running.scheduler_cls is None):
            continue
        answer = rules.get(RESERVES, g.name)
        failed = rules.failure(RESERVES, g.name)
        pending = rules.is_pending(RESERVES, g.name)
        if answer is not None and not failed:
            reserve = {c: int(answer.reserves.get(c, 0)) for c in names}
            sources = {c: str(answer.sources.get(c, "not routed here")) for c in names}
            shown = tuple(c for c in names if c in answer.reserves or reserve[c])
            out[g.name] = GroupGate(g.name, reserve, y, sources, str(answer.reason), shown)
            continue
        now = in_force(state, g.name)
        why = (f"reservation rule failed ({failed})" if failed else f"pending: {pending_note}" if pending
               else "no traffic planned on this group")
        if now is not None and (failed or pending):
            reserve = {c: int(now.get(c, 0)) for c in names}
            reason, source = f"{why}; the reservation file in force stays", "in force"
        else:
            reserve = dict.fromkeys(names, 0)
            reason, source = f"{why}; nothing reserved" + (" until the rule has run" if failed or pending else ""), \
                "none"
        shown = tuple(c for c in names if reserve[c])
        out[g.name] = GroupGate(g.name, reserve, y, dict.fromkeys(names, source), reason, shown, pending, failed)
    return GateDecision(out)
