"""Part of phase 2, decide (pure): kvcore's two engine-model rules, run for the groups that need an answer, within
one work budget per re-plan cycle. docs/operator.md, "Engine-model rules".

- the **knob rule** (:func:`kvcore.rules.knobs.knobs_for_plan`) for every group with ``engine.knobs: Auto``;
- the **reservation rule** (:func:`kvcore.rules.reserve.reserves_for_plan`) for every group with
  ``plugin.enabled`` on a vLLM the plugin supports: the reservations kvplan's plugin gates admission with, on the
  group's engines as they run now (their ``--max-num-seqs``, ``--watermark`` and policy).

**Reuse.** An answer is reused while the group's situation holds (:mod:`.knob_cache`: generation, engine version,
planned layout and replicas, the knobs the engines run) and it is younger than the cache's ``max_age_s``. Both
rules measure on the same replays of a group (:class:`kvcore.rules.replays.ReplayStore`, one per cycle), so the
reservation rule reuses the knob rule's stock runs (where the group's engines run vLLM's ``--max-num-seqs``), and
groups in the same situation share every measurement.

**Work budget.** The rules cost CPU in proportion to the requests they replay through the engine model (the
*work*, counted by kvcore in simulated requests, never timed: what a cycle decides must not depend on the machine's
load). A cycle spends at most ``KVPLAN_RULE_WORK`` (:data:`~.run.DEFAULT_RULE_WORK`) on them: the (group, rule) pairs that need
an answer run in order (those that never had one first, then the oldest answers first, then spec order), and once
the work spent reaches the budget the rest are **pending**: the group keeps the knobs its engines run and the
reservation file in force (reserving nothing when it has none yet) until a later cycle, and status says which are
pending (condition ``EngineKnobs``, reason ``RulesPending``). The pair that crosses the budget finishes, so a cycle
overruns by at most one group's work; the reservation rule's own search is capped at the budget per group.
A rule that raises fails only its group (``KnobRuleFailed`` / ``ReserveRuleFailed``), keeping what is in force.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kvcore import InputError
from kvcore import Instance
from kvcore import Plan
from kvcore import ReplayStore
from kvcore import EngineConfig
from kvcore import GPU_CATALOGUE, GpuFigures

from .knobs import PLUGIN_VERSIONS, EngineVersion, Knobs
from ..knob_cache import KnobCache
from ..run import DEFAULT_RULE_WORK
from ..spec import Group, KVPlanSpec

#: Either rule (``knobs_for_plan``'s or ``reserves_for_plan``'s signature); injected through ``Deps``.
Rule = Callable[..., Mapping[str, Any]]
KNOBS, RESERVES = "knobs", "reservations"


@dataclass(frozen=True)
class RuleRun:
    """How to run the rules this cycle: the rules, where answers are reused, and the work budget."""

    knobs: Rule
    reserves: Rule
    cache: KnobCache | None = None
    owner: str = ""
    generation: int | None = None
    now: float = 0.0
    budget: int = DEFAULT_RULE_WORK


@dataclass(frozen=True)
class RuleAnswers:
    """Per rule (``knobs`` / ``reservations``): group -> answer (fresh or reused), group -> failure, the groups left
    pending; the work spent this cycle and the budget."""

    answers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    failed: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    pending: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    ran: tuple[tuple[str, str], ...] = ()
    work: int = 0
    budget: int = DEFAULT_RULE_WORK

    def get(self, rule: str, group: str) -> Any | None:
        return self.answers.get(rule, {}).get(group)

    def failure(self, rule: str, group: str) -> str | None:
        return self.failed.get(rule, {}).get(group)

    def is_pending(self, rule: str, group: str) -> bool:
        return group in self.pending.get(rule, ())

    def summary(self) -> dict[str, Any]:
        """``status.plan.rules``: the work spent against the budget, what ran, what is pending."""
        return {"work": self.work, "budget": self.budget,
                "ran": [f"{g}/{r}" for r, g in self.ran],
                "pending": {r: list(gs) for r, gs in self.pending.items() if gs}}


def situation(run: RuleRun, g: Group, plan: Plan, running: Knobs, version: EngineVersion) -> tuple[Any, ...]:
    """What a reused answer for group ``g`` depends on (:mod:`.knob_cache`)."""
    gp = next((x for x in plan.groups if x.name == g.name), None)
    return (run.generation, version.version, (gp.tp, gp.pp, gp.replicas) if gp else None,
            (running.watermark, running.admission(), running.scheduling_policy))


def engine_base(running: Knobs, gpu: GpuFigures = GPU_CATALOGUE["A100-80GB"]) -> EngineConfig:
    """The engine settings the gate runs on: the group's knobs as its engines run them (vLLM 0.33's per-GPU
    defaults where a flag is absent: ``max_num_seqs`` 1024 on large-memory non-A100 GPUs, kvcore.profiles.gpus)."""
    seqs = running.admission() or gpu.vllm_max_num_seqs
    batched = gpu.vllm_max_num_batched_tokens
    return EngineConfig(max_num_seqs=seqs, max_num_batched_tokens=max(batched, seqs),
                        watermark=running.watermark or 0.0,
                        policy="priority" if running.scheduling_policy == "priority" else "fcfs")


def wants(spec: KVPlanSpec, versions: Mapping[str, EngineVersion]) -> list[tuple[str, Group]]:
    """The (rule, group) pairs this spec asks for, in spec order."""
    out: list[tuple[str, Group]] = []
    for g in spec.groups:
        if g.engine.knobs == "Auto":
            out.append((KNOBS, g))
        if g.plugin.enabled and versions[g.name].within(PLUGIN_VERSIONS):
            out.append((RESERVES, g))
    return out


def run_rules(spec: KVPlanSpec, plan: Plan, instance: Instance, run: RuleRun, *, running: Mapping[str, Knobs],
              versions: Mapping[str, EngineVersion], priorities: Mapping[str, int]) -> RuleAnswers:
    """Both rules for every (rule, group) pair that needs an answer, within the budget (module docstring).
    ``running``: each group's knobs as its engines run them; ``priorities``: class -> vLLM priority (for groups
    running ``--scheduling-policy priority``)."""
    answers: dict[str, dict[str, Any]] = {KNOBS: {}, RESERVES: {}}
    failed: dict[str, dict[str, str]] = {KNOBS: {}, RESERVES: {}}
    todo: list[tuple[tuple[int, float, int], str, Group, tuple[Any, ...]]] = []
    for n, (rule, g) in enumerate(wants(spec, versions)):
        seen = situation(run, g, plan, running[g.name], versions[g.name])
        key = (run.owner, g.name, rule)
        cached = run.cache.get(key, seen, run.now) if run.cache is not None else None
        if cached is not None:
            answers[rule][g.name] = cached
            continue
        age = run.cache.age(key, run.now) if run.cache is not None else None
        todo.append(((0 if age is None else 1, -(age or 0.0), n), rule, g, seen))
    store = ReplayStore()
    spent = 0
    ran: list[tuple[str, str]] = []
    pending: dict[str, list[str]] = {KNOBS: [], RESERVES: []}
    for _, rule, g, seen in sorted(todo, key=lambda t: t[0]):
        if spent >= run.budget:
            pending[rule].append(g.name)
            continue
        sub = plan.model_copy(update={"groups": [gp for gp in plan.groups if gp.name == g.name]})
        now = running[g.name]
        targets = {"ttft_slo_s": g.engine.latency_targets.ttft_seconds,
                   "tpot_slo_s": g.engine.latency_targets.tpot_seconds}
        try:
            if rule == KNOBS:
                current = ({g.name: (now.watermark, now.admission(), now.scheduling_policy)}
                           if now.admission() is not None and now.watermark is not None
                           and now.scheduling_policy is not None else {})
                answer = dict(run.knobs(sub, instance, engine_version=versions[g.name].rule_text(),
                                        current=current, store=store, **targets))
            else:
                answer = dict(run.reserves(sub, instance, groups=[g.name],
                                           bases={g.name: engine_base(now, g.node_pool.gpu())},
                                           priorities=priorities, store=store, work_limit=run.budget, **targets))
        except InputError as exc:
            failed[rule][g.name] = f"{exc.field}: {exc.message}"
            continue
        except Exception as exc:  # a rule bug must not stop the plan; the type is enough to find it
            failed[rule][g.name] = f"{type(exc).__name__} in the {'knob' if rule == KNOBS else 'reservation'} rule"
            continue
        ran.append((rule, g.name))
        spent += sum(int(getattr(a, "work", 0) or 0) for a in answer.values())
        if g.name in answer:
            answers[rule][g.name] = answer[g.name]
            if run.cache is not None:
                run.cache.put((run.owner, g.name, rule), seen, run.now, answer[g.name])
    if run.cache is not None:
        run.cache.forget(run.owner, {g.name: g for g in spec.groups})
    return RuleAnswers(answers, failed, {r: tuple(v) for r, v in pending.items()}, tuple(ran), spent, run.budget)
