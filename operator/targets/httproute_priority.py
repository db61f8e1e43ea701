"""The class priority as a request header, on the HTTPRoute's per-class rules. Pure.

When a group runs ``--scheduling-policy priority`` (:mod:`kvplan_operator.decide.knobs`), vLLM orders its queue and
picks preemption victims by each request's priority, which vLLM 0.33's OpenAI server reads from the header
:data:`PRIORITY_HEADER` (or the body). A gateway implementing Gateway API sets request headers per rule with a
``RequestHeaderModifier`` filter, so on every rule that matches ``router.httpRoute.classHeader: <class>`` kvplan
sets ``X-Vllm-Priority: <the class's priority>`` in that filter's ``set`` list:

- a rule that has a ``RequestHeaderModifier`` filter already gets the header merged into it (Gateway API allows one
  such filter per rule); every other entry of the user's filter is kept;
- with no priorities published (no group runs the priority policy), kvplan removes its header from the filter, and
  the filter itself when nothing else is left in it;
- rules without a class match (the fleet mix, and so every request whose class header carries a value no rule
  knows) get the priority of requests of no class, one past the largest class priority
  (:func:`kvplan_operator.targets.class_rules.untagged_priority`): vLLM runs lower priorities first, and its
  default 0 would run untagged traffic ahead of every planned class. The filter's ``set`` also overrides a
  client's own ``X-Vllm-Priority``, so a client cannot promote itself past the gateway.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

#: The request header vLLM 0.33's OpenAI server reads a request's priority from (``PRIORITY_HEADER``).
PRIORITY_HEADER = "X-Vllm-Priority"
FILTER = "RequestHeaderModifier"
_FIELD = "requestHeaderModifier"


def _without_ours(entries: list[Any]) -> list[Any]:
    return [e for e in entries if str(e.get("name", "")).lower() != PRIORITY_HEADER.lower()]


def _set_ours(rule: dict[str, Any], value: int | None) -> None:
    """Sets (``value``) or removes (None) :data:`PRIORITY_HEADER` in ``rule``'s ``RequestHeaderModifier``."""
    filters: list[dict[str, Any]] = rule.get("filters") or []
    mod = next((f for f in filters if f.get("type") == FILTER), None)
    if value is not None:
        if mod is None:
            mod = {"type": FILTER, _FIELD: {}}
            filters.append(mod)
        body = mod.setdefault(_FIELD, {})
        body["set"] = _without_ours(list(body.get("set") or [])) + [{"name": PRIORITY_HEADER, "value": str(value)}]
    elif mod is not None:
        body = mod.get(_FIELD) or {}
        if any(str(e.get("name", "")).lower() == PRIORITY_HEADER.lower() for e in body.get("set") or []):
            body["set"] = _without_ours(list(body.get("set") or []))
            if not body["set"]:
                del body["set"]
            if not any(body.get(k) for k in ("set", "add", "remove")):
                filters.remove(mod)
    if filters:
        rule["filters"] = filters
    else:
        rule.pop("filters", None)


def with_priority_headers(rules: list[dict[str, Any]], class_of: Callable[[Mapping[str, Any]], str | None],
                          priorities: Mapping[str, int], untagged: int | None = None) -> list[dict[str, Any]]:
    """``rules`` (a new list) with :data:`PRIORITY_HEADER` set on each class rule, and ``untagged`` on each rule
    of no class (see the module docstring). ``class_of``: a rule's class from its header match, or None."""
    out = copy.deepcopy(rules)
    for rule in out:
        cls = class_of(rule)
        _set_ours(rule, priorities.get(cls) if cls is not None else (untagged if priorities else None))
    return out
