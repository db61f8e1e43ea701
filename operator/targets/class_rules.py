"""Request classes as the ecosystem names them, on both sides of the reservation file. Pure.

``spec.classes[].match`` (an ``InferenceObjective`` name, a fairness id, a model or LoRA adapter, a header) becomes
the ``classify`` rules of the file the plugin reads (:func:`class_rules`, kvcore's
:class:`kvcore.Reservations.classify` being the one rule), and the same header rules say which HTTPRoute rule is
which class's (:func:`route_rule_class`). Requests of no class run with :func:`untagged_priority`: vLLM runs lower
priorities first, so it is one past the largest class priority.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from kvcore import ClassRule, PromptLengthRule, Reservations, render_reservations

from ..spec import KVPlanSpec
from ..spec.engine import match_keys


def class_rules(classes: Sequence[Any]) -> tuple[ClassRule, ...]:
    """The ``classify`` rules of ``spec.classes``: per class in spec order, objective, fairness id, model, header."""
    return tuple(ClassRule(header, value, c.name) for c in classes for header, value in match_keys(c.match))


def route_rule_class(rule: Mapping[str, Any], class_header: str, rules: Sequence[ClassRule],
                     known: Mapping[str, Any]) -> str | None:
    """The class an HTTPRoute rule stands for: an Exact header match of ``class_header`` naming a class, or of a
    header rule's name and value; None for a rule of the fleet mix."""
    for match in rule.get("matches") or []:
        for h in match.get("headers") or []:
            if h.get("type", "Exact") != "Exact":
                continue
            name, value = str(h.get("name", "")).lower(), str(h.get("value"))
            if name == class_header.lower() and value in known:
                return value
            for r in rules:
                if r.header == name and r.value == value:
                    return r.klass
    return None


def untagged_priority(priorities: Mapping[str, int]) -> int | None:
    """The vLLM priority of requests of no class: one past the largest class priority (None when none)."""
    return max(priorities.values()) + 1 if priorities else None


def classification_document(spec: KVPlanSpec, *, owner: str, plan: str | None, reserve: Mapping[str, int],
                            routed: Collection[str], priorities: Mapping[str, int]) -> str:
    """A group's ``kvplan.reservations.v1`` document (:func:`kvplan_operator.build.reservation_document`) from its
    parts. The classes listed are those ``routed`` there, those reserving something, the default and those of a
    rule. With nothing reserved, routed or prioritised it is the bare classification file the stat logger labels
    requests by (:mod:`kvplan_operator.decide.bootstrap`)."""
    default = next((c.name for c in spec.classes if c.fleet_default), spec.classes[0].name)
    rules = sorted((c.max_prompt_tokens, i, c.name) for i, c in enumerate(spec.classes)
                   if c.max_prompt_tokens is not None)
    listed = [c.name for c in spec.classes if c.name in routed or reserve.get(c.name, 0) > 0 or c.name == default
              or c.max_prompt_tokens is not None or c.match is not None]
    kept = {c: p for c, p in priorities.items() if c in listed}
    return render_reservations(Reservations(
        reserve_tokens={c: int(reserve.get(c, 0)) for c in listed}, default_class=default,
        priority_classes={p: c for c, p in kept.items()},
        prompt_length_rules=tuple(PromptLengthRule(limit, name) for limit, _, name in rules),
        plan=plan, kvplan=owner, rules=class_rules(spec.classes),
        default_priority=untagged_priority(priorities)))
