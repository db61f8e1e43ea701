"""Which kvplan class a request belongs to. Pure: the scheduler and the stat logger call these with plain values.

In the engine core (the scheduler) a request carries ``sampling_params.extra_args`` (the OpenAI request's
``vllm_xargs``) and its vLLM ``priority``; in the API-server process (the stat logger) a finished request carries
only its request id and token counts. So:

- scheduler: ``vllm_xargs["kvplan_class"]``, else ``priorityClasses[priority]``, else the prompt-length rules,
  else the fleet default (:func:`class_in_engine`);
- stat logger: the class in the request id (:data:`REQUEST_ID_MARKER`), else the prompt-length rules, else the
  fleet default (:func:`class_in_api_server`).

A class the reservation file does not know is never used as such: the request gets the fleet default (so the
``kvplan_class`` label has at most one value per class in the file, plus the default).
"""

from __future__ import annotations

from typing import Any, Mapping

from kvcore import Reservations

#: The ``vllm_xargs`` key naming a request's class.
XARGS_KEY = "kvplan_class"
#: Request-id convention: ``X-Request-Id: kvplan:<class>:<anything>``. vLLM prefixes its own id (``cmpl-``,
#: ``chatcmpl-``) and may suffix ``-<n>``, so the marker is looked for anywhere in the id; class names never
#: contain ``:``.
REQUEST_ID_MARKER = "kvplan:"

#: Where a class came from (for logs and tests).
FROM_XARGS = "vllm_xargs"
FROM_REQUEST_ID = "request-id"
FROM_PRIORITY = "priority"
FROM_PROMPT = "prompt-length"
FROM_DEFAULT = "default"
UNKNOWN_TO_DEFAULT = "unknown-class"


def class_from_prompt(res: Reservations, prompt_tokens: int) -> str | None:
    """The first prompt-length rule that covers ``prompt_tokens``, or None."""
    for rule in res.prompt_length_rules:
        if rule.max_prompt_tokens is None or prompt_tokens <= rule.max_prompt_tokens:
            return rule.klass
    return None


def class_in_engine(res: Reservations, extra_args: Mapping[str, Any] | None, priority: int | None,
                    prompt_tokens: int) -> tuple[str, str]:
    """``(class, source)`` of a request inside vLLM's engine core. A ``kvplan_class`` that names no known class
    (or is not a string) gives the fleet default, source :data:`UNKNOWN_TO_DEFAULT`."""
    if extra_args and XARGS_KEY in extra_args:
        named = extra_args[XARGS_KEY]
        if res.knows(named):
            return str(named), FROM_XARGS
        return res.default_class, UNKNOWN_TO_DEFAULT
    if priority is not None and priority in res.priority_classes:
        return res.priority_classes[priority], FROM_PRIORITY
    by_prompt = class_from_prompt(res, prompt_tokens)
    if by_prompt is not None:
        return by_prompt, FROM_PROMPT
    return res.default_class, FROM_DEFAULT


def class_in_request_id(request_id: str | None) -> str | None:
    """The ``<class>`` of ``kvplan:<class>:`` in a request id (not checked against any file), or None."""
    if not request_id:
        return None
    start = request_id.find(REQUEST_ID_MARKER)
    if start < 0:
        return None
    start += len(REQUEST_ID_MARKER)
    end = request_id.find(":", start)
    return request_id[start:end] if end > start else None


def class_in_api_server(res: Reservations, request_id: str | None, prompt_tokens: int) -> tuple[str, str]:
    """``(class, source)`` of a finished request in the API-server process (no extra_args there)."""
    named = class_in_request_id(request_id)
    if named is not None:
        if res.knows(named):
            return named, FROM_REQUEST_ID
        return res.default_class, UNKNOWN_TO_DEFAULT
    by_prompt = class_from_prompt(res, prompt_tokens)
    if by_prompt is not None:
        return by_prompt, FROM_PROMPT
    return res.default_class, FROM_DEFAULT
