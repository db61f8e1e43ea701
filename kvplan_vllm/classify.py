"""Which kvplan class a request belongs to, on what each vLLM process sees of it. Pure: the scheduler and the stat
logger call these with plain values; the rule itself is :func:`kvcore.classification.classify`, the same rule the
operator writes into the gateway's route.

What reaches each process in vLLM 0.33 (``vllm/entrypoints``): the OpenAI server passes no request header into the
engine except ``X-Vllm-Priority`` (the request's priority), ``X-Request-Id`` (the request id) and tracing
headers. So:

- scheduler (engine core): ``vllm_xargs["kvplan_class"]`` of a client that names its class itself, else the
  ``classify`` model rules on the LoRA adapter (``lora_request.lora_name``; without one, the first
  ``--served-model-name``, the only one vLLM keeps), else ``priorityClasses[priority]`` (the
  gateway sets ``X-Vllm-Priority`` per class rule: that is how header rules reach the engine), else the
  prompt-length rules, else the fleet default (:func:`class_in_engine`);
- stat logger (API server): finished-request stats carry only the request id and token counts, so only the
  prompt-length rules, else the fleet default (:func:`class_in_api_server`). Per-class histories of header classes
  come from the gateway's series instead (docs/vllm-plugins.md, "Request classes").

A name or priority no rule knows is never used as a class: the request gets the fleet default (so the
``kvplan_class`` label has at most one value per class in the file, plus the default), source
:data:`UNKNOWN_TO_DEFAULT`, which the scheduler counts.
"""

from __future__ import annotations

from typing import Any, Mapping

from kvcore import RequestView, Reservations, UNKNOWN_CLASS_SOURCE

#: The ``vllm_xargs`` key naming a request's class, for clients that talk to vLLM directly.
XARGS_KEY = "kvplan_class"

#: Where a class came from (for logs, metrics and tests); the rest are :mod:`kvcore.classification`'s.
FROM_XARGS = "vllm_xargs"
UNKNOWN_TO_DEFAULT = UNKNOWN_CLASS_SOURCE


def class_in_engine(res: Reservations, extra_args: Mapping[str, Any] | None, priority: int | None,
                    prompt_tokens: int, lora_name: str | None = None) -> tuple[str, str]:
    """``(class, source)`` of a request inside vLLM's engine core. A ``kvplan_class`` that names no known class
    (or is not a string), or a priority that is neither vLLM's default, a class's nor ``defaultPriority``, gives
    the fleet default with source :data:`UNKNOWN_TO_DEFAULT`."""
    if extra_args and XARGS_KEY in extra_args:
        named = extra_args[XARGS_KEY]
        if res.knows(named):
            return str(named), FROM_XARGS
        return res.default_class, UNKNOWN_TO_DEFAULT
    return res.classify(RequestView(model=lora_name, priority=priority, prompt_tokens=prompt_tokens))


def engine_priority(res: Reservations, priority: int) -> int:
    """The vLLM priority a request should run with: its own when it is a class's, else the file's
    ``defaultPriority`` (when published), so a request of no class never runs ahead of a planned class."""
    if res.default_priority is None or priority in res.priority_classes:
        return priority
    return res.default_priority


def class_in_api_server(res: Reservations, prompt_tokens: int) -> tuple[str, str]:
    """``(class, source)`` of a finished request in the API-server process: the prompt-length rules, else the
    default (vLLM's finished-request stats carry no header, priority, extra args or LoRA adapter)."""
    return res.classify(RequestView(prompt_tokens=prompt_tokens))
