"""The engine-model rules in the operator's re-plan cycle (operator/decide/rules.py, operator/decide/gate.py), through
whole reconciles over the fake apiserver (test_op_engine_knobs.World) with scripted rules that report work:

- the per-cycle work budget (``Deps.rule_work``): the pairs (group, rule) run in order until the work spent reaches
  it; the others are pending (EngineKnobs=False/RulesPending naming them, ``status.plan.rules``), keep the knobs
  they run and the reservation file in force, and the rest of the plan still applies;
- with the operator's answer cache, pairs that never had an answer run first, so every pending pair gets one within
  a few cycles and then nothing runs while the situation holds;
- the reservation rule runs on the group's engines as they run (their knobs as the rule's engine base);
- a reservation rule that raises fails only its group (ReserveRuleFailed, no exception text in status), keeping its
  file in force, while the other group's file follows its own answer;
- one file per plugin group with that group's answer; the plan's detail shows per class the plan's y and the file's
  value, status the reason and counts.
"""

from __future__ import annotations

import json
from typing import Any

from kvcore.sim.engine import EngineConfig
from kvplan_operator import conditions as C
from kvplan_operator.knob_cache import KnobCache
from op_fakes import ScriptedKnobs, ScriptedReserves  # type: ignore[import-not-found]
from op_engine_knobs_world import T0, World  # type: ignore[import-not-found]


def both_plugins(**kw: Any) -> World:
    w = World(budget=5, plugin={"enabled": True}, **kw)
    w.spec["groups"][1]["plugin"] = {"enabled": True}
    return w


def ran(w: World) -> list[str]:
    return list((w.kube.status["plan"].get("rules") or {}).get("ran") or [])


def pending(w: World) -> dict[str, list[str]]:
    return dict((w.kube.status["plan"].get("rules") or {}).get("pending") or {})


def test_each_plugin_group_gets_its_own_answer_in_its_own_file():
    w = both_plugins()
    w.reserves = ScriptedReserves(0.5, reserves={"small": {"chat": 40}})
    assert w.run(T0).ok
    assert w.files() == ["reservations-big.json", "reservations-small.json"]
    # chat's plan y is 500, code-gen's 100 (fixed_plan): big keeps half of each, small its own 40 for chat
    assert dict(w.reservations("big").reserve_tokens) == {"chat": 250, "code-gen": 50}
    assert dict(w.reservations("small").reserve_tokens) == {"chat": 40, "code-gen": 50}
    for g in ("big", "small"):
        gate, listed = w.kube.status["plan"]["groups"][g]["gate"], w.gates()[g]["classes"]
        file = dict(w.reservations(g).reserve_tokens)
        assert {c: v["reserveTokens"] for c, v in listed.items()} == file
        assert {c: v["planTokens"] for c, v in listed.items()} == {"chat": 500, "code-gen": 100}
        assert gate == {"reason": f"scripted for {g}", "pending": False, "classes": 2, "reserving": 2}
        assert w.gates()[g]["reason"] == gate["reason"]
    assert w.cond(C.ENGINE_KNOBS)["reason"] == C.KNOBS_IN_FORCE


def test_the_work_budget_leaves_pairs_pending_and_keeps_what_is_in_force():
    w = both_plugins()
    w.rule = ScriptedKnobs({"big": (64, 0.02, "fcfs")}, work={"big": 700, "small": 700})
    w.reserves = ScriptedReserves(0.5, work={"big": 300, "small": 300})
    assert w.run(T0).ok  # unlimited (the default budget is far above these): every pair runs
    assert sorted(ran(w)) == ["big/knobs", "big/reservations", "small/knobs", "small/reservations"]
    assert w.kube.status["plan"]["rules"]["work"] == 2000 and pending(w) == {}
    before = {g: dict(w.reservations(g).reserve_tokens) for g in ("big", "small")}
    template = json.dumps(w.kube.deployments["vllm-big"]["spec"]["template"], sort_keys=True)

    w.deps["rule_work"] = 0  # nothing may run: everything is pending
    w.rule = ScriptedKnobs({"big": (32, 0.05, "fcfs")})  # would change the knobs, if asked
    w.reserves = ScriptedReserves(0.1)  # would change the files, if asked
    out = w.run(T0 + 60)
    assert out.ok, out
    assert w.rule.calls == [] and w.reserves.calls == []
    assert pending(w) == {"knobs": ["big", "small"], "reservations": ["big", "small"]} and ran(w) == []
    cond = w.cond(C.ENGINE_KNOBS)
    assert (cond["status"], cond["reason"]) == ("False", C.RULES_PENDING)
    assert "knobs of big, small" in cond["message"] and "reservations of big, small" in cond["message"]
    assert {g: dict(w.reservations(g).reserve_tokens) for g in ("big", "small")} == before  # files in force stay
    assert json.dumps(w.kube.deployments["vllm-big"]["spec"]["template"], sort_keys=True) == template
    assert w.flag("--max-num-active-seqs") == "64"
    gate = w.kube.status["plan"]["groups"]["big"]["gate"]
    assert gate["pending"] is True and "in force stays" in gate["reason"]
    assert {c: v["source"] for c, v in w.gates()["big"]["classes"].items()} == {"chat": "in force",
                                                                                "code-gen": "in force"}
    assert w.engine()["rule"].startswith("pending")
    assert w.cond(C.APPLIED)["reason"] == C.APPLY_SUCCEEDED and w.cond(C.READY)["status"] == "True"


def test_a_budget_lets_the_crossing_pair_finish_and_no_more():
    w = both_plugins()
    w.deps["rule_work"] = 1000
    w.rule = ScriptedKnobs(work={"big": 600, "small": 600})
    w.reserves = ScriptedReserves(work={"big": 600, "small": 600})
    assert w.run(T0).ok
    assert ran(w) == ["big/knobs", "big/reservations"]  # 600 < 1000 -> the next runs, 1200 >= 1000 -> stop
    assert w.kube.status["plan"]["rules"]["work"] == 1200 and w.kube.status["plan"]["rules"]["budget"] == 1000
    assert pending(w) == {"knobs": ["small"], "reservations": ["small"]}
    gate = w.kube.status["plan"]["groups"]["small"]["gate"]  # small has no file yet: it reserves nothing meanwhile
    assert gate["pending"] is True and "nothing reserved until the rule has run" in gate["reason"]
    assert dict(w.reservations("small").reserve_tokens) == {"chat": 0, "code-gen": 0}
    assert w.reservations("big").reserve("chat") == 125  # 0.25 x 500


def test_with_the_cache_unanswered_pairs_go_first_and_every_pair_gets_an_answer():
    w = both_plugins(cache=KnobCache(max_age_s=3600))
    w.deps["rule_work"] = 1
    w.rule = ScriptedKnobs({"big": (64, 0.0, "fcfs")}, work={"big": 10, "small": 10})
    w.reserves = ScriptedReserves(work={"big": 10, "small": 10})
    order: list[list[str]] = []
    for i in range(8):
        assert w.run(T0 + 60 * i).ok
        order.append(ran(w))
        if not ran(w) and not pending(w):
            break
    assert all(len(r) <= 1 for r in order), order  # one pair per cycle at this budget
    first = [r[0] for r in order if r]
    # cycle by cycle, a pair that never had an answer goes before one whose answer is only stale
    assert first[:4] == ["big/knobs", "big/reservations", "small/knobs", "small/reservations"], order
    assert order[-1] == [] and pending(w) == {}, order  # all answered, reused while the situation holds
    assert w.cond(C.ENGINE_KNOBS)["reason"] == C.KNOBS_IN_FORCE
    assert w.reservations("small").reserve("chat") == 125 and w.flag("--max-num-active-seqs") == "64"


def test_the_reservation_rule_runs_on_the_knobs_the_engines_run():
    w = both_plugins()
    w.rule = ScriptedKnobs({"big": (64, 0.02, "priority")})
    assert w.run(T0).ok
    assert w.flag("--max-num-active-seqs") == "64"
    assert w.run(T0 + 60).ok
    bases = {g: b for names, b in w.reserves.calls[-2:] for g in names for b in [b[g]]}
    big, small = bases["big"], bases["small"]
    assert isinstance(big, EngineConfig) and (big.max_num_seqs, big.watermark, big.policy) == (64, 0.02, "priority")
    assert (small.max_num_seqs, small.watermark, small.policy) == (256, 0.0, "fcfs")  # vLLM's defaults


def test_a_failing_reservation_rule_fails_only_its_group_and_keeps_its_file():
    w = both_plugins()
    w.reserves = ScriptedReserves(0.5)
    assert w.run(T0).ok
    kept = dict(w.reservations("big").reserve_tokens)
    w.reserves = ScriptedReserves(0.1, fail=RuntimeError("boom /secret"), fail_on={"big"})
    out = w.run(T0 + 60)
    assert out.ok, out
    assert dict(w.reservations("big").reserve_tokens) == kept
    assert w.reservations("small").reserve("chat") == 50  # 0.1 x 500: the other group follows its answer
    cond = w.cond(C.ENGINE_KNOBS)
    assert (cond["status"], cond["reason"]) == ("False", C.RESERVE_RULE_FAILED)
    assert "reservation rule failed for big (RuntimeError in the reservation rule)" in cond["message"]
    assert "boom" not in json.dumps(w.kube.status)
    gate = w.kube.status["plan"]["groups"]["big"]["gate"]
    assert gate["failed"] == "RuntimeError in the reservation rule" and "in force stays" in gate["reason"]
    assert w.cond(C.APPLIED)["reason"] == C.APPLY_SUCCEEDED and w.cond(C.READY)["status"] == "True"
    w.reserves = ScriptedReserves(0.1)  # fixed: the file follows again and the condition clears
    assert w.run(T0 + 120).ok and w.reservations("big").reserve("chat") == 50
    assert w.cond(C.ENGINE_KNOBS)["reason"] == C.KNOBS_IN_FORCE


def test_an_input_error_of_the_reservation_rule_names_its_field():
    from kvcore.errors import InputError

    w = both_plugins()
    w.reserves = ScriptedReserves(fail=InputError("reserves.classes", "at least one class is needed"))
    assert w.run(T0).ok
    cond = w.cond(C.ENGINE_KNOBS)
    assert cond["reason"] == C.RESERVE_RULE_FAILED and "reserves.classes: at least one class" in cond["message"]
    assert dict(w.reservations("big").reserve_tokens) == {"chat": 0, "code-gen": 0}  # none in force: nothing


def test_a_groups_file_lists_only_the_classes_that_matter_there():
    """code-gen routed to small only: big's file lists chat (routed, and the default class) and not code-gen, whose
    requests, if any reached big, would get the default's reservation; small's file lists both."""
    w = both_plugins()
    plain = w.planner

    def planner(instance: Any, *, previous: Any = None) -> Any:
        p = plain(instance, previous=previous)
        return p.model_copy(update={"classes": [c.model_copy(update={"routing": {"small": 1.0}})
                                                if c.name == "code-gen" else c for c in p.classes]})

    w.planner = planner
    w.reserves = ScriptedReserves(0.5)
    assert w.run(T0).ok
    big, small = w.reservations("big"), w.reservations("small")
    assert dict(big.reserve_tokens) == {"chat": 250} and big.default_class == "chat"
    assert big.reserve("code-gen") == big.reserve("chat") == 250
    assert dict(small.reserve_tokens) == {"chat": 250, "code-gen": 50}
    assert set(w.gates()["big"]["classes"]) == {"chat"} and w.kube.status["plan"]["groups"]["big"]["gate"][
        "classes"] == 1


def test_each_groups_latency_targets_reach_both_rules():
    """``engine.latencyTargets`` is per group: the big group's reach the knob and reservation rules for it, the small
    group (no field) gets the defaults, 2 s and 0.1 s."""
    w = both_plugins()
    w.spec["groups"][0]["engine"] = {"latencyTargets": {"ttftSeconds": 0.5, "tpotSeconds": 0.05}}
    assert w.run(T0).ok
    knobs = {g: t for names, t in w.rule.targets for g in names}
    reserves = {g: t for names, t in w.reserves.targets for g in names}
    assert knobs == reserves == {"big": (0.5, 0.05), "small": (2.0, 0.1)}
