"""Request classes: the class rules of a ``kvplan.reservations.v1`` document (:mod:`kvcore.reservation_file`) and
the one evaluation of them, :func:`classify`. Pure; imports nothing of kvcore.

The rule lives here once and is evaluated on what each component sees of a request (:class:`RequestView`): the
gateway sees headers (the operator writes the header rules as HTTPRoute matches,
:meth:`kvcore.reservation_file.Reservations.header_rules`), vLLM's scheduler sees the priority, the LoRA adapter and
the prompt length, the stat logger only the prompt length. ``classify`` is tried first, in order, then
``priorityClasses``, then ``promptLengthRules``, then ``defaultClass``. ``defaultPriority`` is the vLLM priority
(lower runs first) of requests of no class: larger than every class's, so untagged traffic never outranks a planned
class.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: The Gateway API inference extension's request headers: the name of an ``InferenceObjective``, and a tenant
#: (fairness) id. A ``classify`` entry ``{"objective": v}`` is ``{"header": OBJECTIVE_HEADER, "value": v}``.
OBJECTIVE_HEADER = "x-gateway-inference-objective"
FAIRNESS_HEADER = "x-gateway-inference-fairness-id"
#: A ``classify`` entry's shorthand key -> the header it matches.
SHORTHANDS = {"objective": OBJECTIVE_HEADER, "fairnessId": FAIRNESS_HEADER}
#: The keys of which a ``classify`` entry has exactly one.
MATCH_KEYS = {"objective", "fairnessId", "model", "header"}
#: A request header name (RFC 7230 token; Gateway API's HTTPHeaderName), and a header value kvplan matches.
HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]{1,256}$")
HEADER_VALUE_MAX = 256
#: Where :func:`classify` found a request's class.
FROM_HEADER = "header"
FROM_MODEL = "model"
FROM_PRIORITY = "priority"
FROM_PROMPT = "prompt-length"
FROM_DEFAULT = "default"
#: A header that some rule matches on, or a priority, carries a value no rule knows: the default class.
UNKNOWN_VALUE = "unknown-class"
#: vLLM's priority of a request that names none (the body's ``priority`` default, no ``X-Vllm-Priority``).
VLLM_DEFAULT_PRIORITY = 0


@dataclass(frozen=True)
class PromptLengthRule:
    """Requests whose prompt has at most ``max_prompt_tokens`` tokens (any prompt when None) get ``klass``."""

    max_prompt_tokens: int | None
    klass: str


@dataclass(frozen=True)
class ClassRule:
    """One ``classify`` entry: requests whose header ``header`` (lower-case; None for a model rule) or served
    model / LoRA adapter name (``header`` None) equals ``value`` get ``klass``."""

    header: str | None
    value: str
    klass: str


@dataclass(frozen=True)
class RequestView:
    """What one component sees of a request; None where that component cannot see it.

    ``headers``: lower-case name -> value (the gateway). ``model``: the served model or LoRA adapter the request
    names (the scheduler: ``lora_request.lora_name``). ``priority``: vLLM's request priority (the scheduler).
    ``prompt_tokens``: prompt length (the scheduler and the stat logger)."""

    headers: Mapping[str, str] | None = None
    model: str | None = None
    priority: int | None = None
    prompt_tokens: int | None = None


def matched_headers(rules: Iterable[ClassRule]) -> frozenset[str]:
    """Lower-case names of the headers some rule matches on."""
    return frozenset(r.header for r in rules if r.header is not None)


def classify(view: RequestView, *, rules: tuple[ClassRule, ...], priority_classes: Mapping[int, str],
             prompt_length_rules: tuple[PromptLengthRule, ...], default_class: str,
             default_priority: int | None) -> tuple[str, str]:
    """``(class, source)`` of a request from what a component sees of it (:class:`RequestView`).

    ``rules`` first (a rule is skipped where its header or model is not visible), then ``priority_classes``, then
    ``prompt_length_rules``, then the default. A visible header that some rule matches on, carrying a value no rule
    knows, gives the default class with source :data:`UNKNOWN_VALUE`; so does a priority that is neither a class's,
    vLLM's default nor ``default_priority`` where priorities are mapped at all."""
    headers = view.headers
    for rule in rules:
        if rule.header is None:
            if view.model is not None and view.model == rule.value:
                return rule.klass, FROM_MODEL
        elif headers is not None and headers.get(rule.header) == rule.value:
            return rule.klass, FROM_HEADER
    if headers is not None and any(h in headers for h in matched_headers(rules)):
        return default_class, UNKNOWN_VALUE
    if view.priority is not None and priority_classes:
        if view.priority in priority_classes:
            return priority_classes[view.priority], FROM_PRIORITY
        if view.priority not in (VLLM_DEFAULT_PRIORITY, default_priority):
            return default_class, UNKNOWN_VALUE
    if view.prompt_tokens is not None:
        for p in prompt_length_rules:
            if p.max_prompt_tokens is None or view.prompt_tokens <= p.max_prompt_tokens:
                return p.klass, FROM_PROMPT
    return default_class, FROM_DEFAULT


def render_rule(rule: ClassRule) -> dict[str, str]:
    """The ``classify`` entry of ``rule`` (a shorthand key where its header has one)."""
    if rule.header is None:
        return {"model": rule.value, "class": rule.klass}
    short = next((k for k, h in SHORTHANDS.items() if h == rule.header), None)
    if short is not None:
        return {short: rule.value, "class": rule.klass}
    return {"header": rule.header, "value": rule.value, "class": rule.klass}
