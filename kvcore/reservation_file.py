"""The reservation file ``kvplan.reservations.v1``: per-class reservations, the fleet default and the class rules
that kvplan's vLLM plugins (``kvplan_vllm``) read, and its validation.

One definition for both sides, like :mod:`kvcore.history.series`: the operator writes the document
(:func:`render_reservations`) into the KVPlan's state ConfigMap, one per group running the plugin (key
``reservations-<group>.json``); the group's pods mount that ConfigMap as a volume and the plugins parse it (:func:`parse_reservations`; ``docs/vllm-plugins.md``). Pure:
no I/O (``kvplan_vllm.source`` reads the file).

.. code-block:: json

    {
     "format": "kvplan.reservations.v1",
     "kvplan": "serving/fleet",
     "plan": "3f2a9c1b0d4e",
     "defaultClass": "chat",
     "classes": {"chat": {"reserveTokens": 512}, "batch": {"reserveTokens": 2048}},
     "priorityClasses": {"1": "chat", "2": "batch"},
     "defaultPriority": 3,
     "classify": [{"objective": "chat-premium", "class": "chat"}, {"fairnessId": "team-batch", "class": "batch"},
                  {"model": "sql-lora", "class": "chat"}, {"header": "x-team", "value": "search", "class": "chat"}],
     "promptLengthRules": [{"maxPromptTokens": 2048, "class": "chat"}, {"class": "batch"}]
    }

The class rules and their evaluation are :mod:`kvcore.classification` (:meth:`Reservations.classify`); this
module reads and writes them.

Every problem is reported with its field path, all at once (:class:`ReservationsError`, at most
:data:`MAX_PROBLEMS` of them, each quoting at most :data:`SHOWN_CHARS` characters of the value).

The work of a parse is bounded whatever the bytes (a plugin parses files it did not write): at most
:data:`MAX_BYTES` bytes, :data:`MAX_SEPARATORS` commas and colons, :data:`MAX_DEPTH` levels of nesting and no
duplicate key (:mod:`kvcore.bounded_json`, checked before the document is built), then at most
:data:`MAX_CLASSES` classes, priorities and rules (checked before any of them is validated).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Mapping

from kvcore.bounded_json import BoundedJsonError, load_bounded_json
from kvcore.bounds import MAX_TOKENS
from kvcore.classification import (HEADER_NAME, HEADER_VALUE_MAX, MATCH_KEYS, SHORTHANDS, ClassRule,
                                   PromptLengthRule, RequestView, classify, matched_headers, render_rule)
from kvcore.errors import InputError

#: The document's format and version; another value is refused (the plugin keeps its last good values).
FORMAT = "kvplan.reservations.v1"
#: A class name, as the KVPlan CRD allows it (a DNS label of at most 40 characters).
CLASS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
CLASS_NAME_MAX = 40
#: Most classes in one document, and most entries of ``priorityClasses`` and of ``promptLengthRules``: the KVPlan
#: CRD's limit on classes (``spec.classes`` maxItems), so the operator never writes more.
MAX_CLASSES = 256
#: Largest document, bytes. The largest the operator writes (256 classes of 40-character names, a priority and a
#: prompt-length rule each, 19-digit numbers) is about 64 KB; a ConfigMap can hold 1 MiB.
MAX_BYTES = 128 * 1024
#: Most commas and colons in a document (a bound on its values, counted before parsing); the largest document
#: the operator writes has about 9 per class.
MAX_SEPARATORS = 16 * MAX_CLASSES
#: Deepest nesting of arrays and objects; a valid document nests 3 deep (``classes.<name>.reserveTokens``).
MAX_DEPTH = 8
#: Most problems reported (the rest are counted), and most characters of a bad value quoted in one.
MAX_PROBLEMS = 20
SHOWN_CHARS = 60
#: Classes named in a log line's description of a document (the rest are counted).
DESCRIBED_CLASSES = 16
_TOP_KEYS = {"format", "kvplan", "plan", "defaultClass", "classes", "priorityClasses", "promptLengthRules",
             "classify", "defaultPriority"}
_CLASS_KEYS = {"reserveTokens"}
#: A vLLM priority as a JSON key: a decimal integer that fits in 64 bits.
_PRIORITY = re.compile(r"[+-]?[0-9]{1,18}")
#: Longest ``plan`` / ``kvplan`` (shown in logs): a namespace/name is at most 253 + 1 + 253 characters.
_MAX_LABEL = 512
_RULE_KEYS = {"maxPromptTokens", "class"}


class ReservationsError(InputError):
    """A reservation document that cannot be used; ``problems`` holds every ``field: message`` (``field`` is the
    first one's field)."""

    def __init__(self, problems: list[str]) -> None:
        if len(problems) > MAX_PROBLEMS:
            problems = [*problems[:MAX_PROBLEMS], f"(document): {len(problems) - MAX_PROBLEMS} more problem(s)"]
        self.problems = problems
        first_field, _, first_message = problems[0].partition(": ")
        super().__init__(first_field, first_message)
        self.args = ("; ".join(problems),)

    def __str__(self) -> str:
        return "; ".join(self.problems)


@dataclass(frozen=True)
class Reservations:
    """A validated reservation document.

    ``reserve_tokens``: class -> reserved output tokens y (tokens; 0 reserves nothing). ``default_class``: the
    fleet default, for requests that name no class or an unknown one. ``priority_classes``: vLLM request priority
    -> class. ``prompt_length_rules``: tried in order, first match wins. ``rules``: the ``classify`` matchers, in
    order, tried before the rest. ``default_priority``: the vLLM priority of requests of no class (None: not
    published). ``plan``/``kvplan``: informational (logs).
    """

    reserve_tokens: Mapping[str, int]
    default_class: str
    priority_classes: Mapping[int, str] = field(default_factory=dict)
    prompt_length_rules: tuple[PromptLengthRule, ...] = ()
    plan: str | None = None
    kvplan: str | None = None
    rules: tuple[ClassRule, ...] = ()
    default_priority: int | None = None

    def header_rules(self) -> tuple[ClassRule, ...]:
        """The header matchers, in order: what a gateway's route rules match on."""
        return tuple(r for r in self.rules if r.header is not None)

    def matched_headers(self) -> frozenset[str]:
        """Lower-case names of the headers some rule matches on."""
        return matched_headers(self.rules)

    def classify(self, view: RequestView) -> tuple[str, str]:
        """``(class, source)`` of a request from what a component sees of it: :func:`kvcore.classification.classify`
        on this document's rules."""
        return classify(view, rules=self.rules, priority_classes=self.priority_classes,
                        prompt_length_rules=self.prompt_length_rules, default_class=self.default_class,
                        default_priority=self.default_priority)

    def reserve(self, klass: str) -> int:
        """Reserved output tokens of ``klass``; an unknown class gets the default class's."""
        return self.reserve_tokens.get(klass, self.reserve_tokens.get(self.default_class, 0))

    def knows(self, klass: object) -> bool:
        """Whether ``klass`` is a class of this document."""
        return isinstance(klass, str) and klass in self.reserve_tokens

    def describe(self) -> str:
        """One line for logs: plan and reserves (the first :data:`DESCRIBED_CLASSES` classes, then a count)."""
        shown = sorted(self.reserve_tokens.items())
        reserves = ", ".join(f"{k}={v}" for k, v in shown[:DESCRIBED_CLASSES])
        if len(shown) > DESCRIBED_CLASSES:
            reserves += f", ... ({len(shown)} classes)"
        return f"plan {self.plan or '-'} ({self.kvplan or '-'}): reserveTokens {reserves}; default {self.default_class}"


#: Before any good file: no class reserves anything, so the gate adds nothing to vLLM's own admission.
NO_RESERVATIONS = Reservations(reserve_tokens={}, default_class="default")


def _show(value: Any) -> str:
    """``value`` as JSON, cut to :data:`SHOWN_CHARS` characters (a value from a file can be as large as the file)."""
    text = json.dumps(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."


def _tokens(value: Any, path: str, problems: list[str]) -> int | None:
    """A non-negative whole number of tokens (an integral float such as 512.0 is accepted)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        problems.append(f"{path}: must be a non-negative whole number of tokens, got {_show(value)}")
        return None
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        problems.append(f"{path}: must be a non-negative whole number of tokens, got {value!r}")
        return None
    if value < 0:
        problems.append(f"{path}: must be >= 0, got {value!r}")
        return None
    if value > MAX_TOKENS:
        problems.append(f"{path}: must be at most {MAX_TOKENS:.0f} tokens, got {value!r}")
        return None
    return int(value)


def _class_name(value: Any, path: str, problems: list[str]) -> str | None:
    if not isinstance(value, str) or len(value) > CLASS_NAME_MAX or not CLASS_NAME.match(value):
        problems.append(f"{path}: must be a class name (lower-case letters, digits and '-', at most "
                        f"{CLASS_NAME_MAX} characters), got {_show(value)}")
        return None
    return value


def _unknown_keys(obj: Mapping[str, Any], allowed: set[str], path: str, problems: list[str]) -> None:
    for key in sorted(set(obj) - allowed):
        problems.append(f"{path}{key}: unknown field (allowed: {', '.join(sorted(allowed))})")


def _too_many(raw: Mapping[Any, Any] | list[Any], path: str, problems: list[str]) -> bool:
    if len(raw) <= MAX_CLASSES:
        return False
    problems.append(f"{path}: {len(raw)} entries, more than the {MAX_CLASSES} allowed")
    return True


def _classes(raw: Any, problems: list[str], pause: Callable[[], None]) -> dict[str, int]:
    if not isinstance(raw, dict) or not raw:
        problems.append("classes: must be a non-empty object of class name -> {\"reserveTokens\": n}")
        return {}
    if _too_many(raw, "classes", problems):
        return {}
    out: dict[str, int] = {}
    for name, entry in raw.items():
        pause()
        if _class_name(name, f"classes key {_show(name)}", problems) is None:
            continue
        path = f"classes.{name}"
        if not isinstance(entry, dict):
            problems.append(f"{path}: must be an object {{\"reserveTokens\": n}}, got {_show(entry)}")
            continue
        _unknown_keys(entry, _CLASS_KEYS, path + ".", problems)
        if "reserveTokens" not in entry:
            problems.append(f"{path}.reserveTokens: required")
            continue
        tokens = _tokens(entry["reserveTokens"], path + ".reserveTokens", problems)
        if tokens is not None:
            out[name] = tokens
    return out


def _known(name: Any, path: str, classes: Collection[str], problems: list[str]) -> str | None:
    klass = _class_name(name, path, problems)
    if klass is not None and klass not in classes:
        known = ", ".join(sorted(classes)[:8]) + (f", ... ({len(classes)} classes)" if len(classes) > 8 else "")
        problems.append(f"{path}: class {_show(klass)} is not in classes ({known})")
        return None
    return klass


def _priorities(raw: Any, classes: Collection[str], problems: list[str], pause: Callable[[], None]
                ) -> dict[int, str]:
    if not isinstance(raw, dict):
        problems.append(f"priorityClasses: must be an object of priority (an integer, as a string) -> class, "
                        f"got {_show(raw)}")
        return {}
    if _too_many(raw, "priorityClasses", problems):
        return {}
    out: dict[int, str] = {}
    for key, name in raw.items():
        pause()
        path = f"priorityClasses.{key[:SHOWN_CHARS]}"
        if not _PRIORITY.fullmatch(key):
            problems.append(f"{path}: the key must be an integer vLLM priority (at most 18 digits), got "
                            f"{_show(key)}")
            continue
        priority = int(key, 10)
        klass = _known(name, path, classes, problems)
        if klass is not None:
            out[priority] = klass
    return out


def _rules(raw: Any, classes: Collection[str], problems: list[str], pause: Callable[[], None]
           ) -> tuple[PromptLengthRule, ...]:
    if not isinstance(raw, list):
        problems.append(f"promptLengthRules: must be a list of {{\"maxPromptTokens\": n, \"class\": c}}, "
                        f"got {_show(raw)}")
        return ()
    if _too_many(raw, "promptLengthRules", problems):
        return ()
    out: list[PromptLengthRule] = []
    catch_all_at: int | None = None
    for i, rule in enumerate(raw):
        pause()
        path = f"promptLengthRules[{i}]"
        if not isinstance(rule, dict):
            problems.append(f"{path}: must be an object {{\"maxPromptTokens\": n, \"class\": c}}")
            continue
        _unknown_keys(rule, _RULE_KEYS, path + ".", problems)
        if catch_all_at is not None:
            problems.append(f"{path}: unreachable, promptLengthRules[{catch_all_at}] has no maxPromptTokens and "
                            f"matches every prompt")
        if "class" not in rule:
            problems.append(f"{path}.class: required")
            continue
        klass = _known(rule["class"], path + ".class", classes, problems)
        limit: int | None = None
        if "maxPromptTokens" in rule:
            limit = _tokens(rule["maxPromptTokens"], path + ".maxPromptTokens", problems)
            if limit is None:
                continue
        elif catch_all_at is None:
            catch_all_at = i
        if klass is not None:
            out.append(PromptLengthRule(limit, klass))
    return tuple(out)


def _header_value(value: Any, path: str, problems: list[str]) -> str | None:
    if not isinstance(value, str) or not value or len(value) > HEADER_VALUE_MAX \
            or any(not (" " <= ch <= "~") for ch in value):
        problems.append(f"{path}: must be a non-empty printable ASCII string of at most {HEADER_VALUE_MAX} "
                        f"characters, got {_show(value)}")
        return None
    return value


def _matcher(rule: Mapping[str, Any], path: str, problems: list[str]) -> tuple[str | None, str] | None:
    """``(header or None for a model rule, value)`` of one ``classify`` entry, or None (problems recorded)."""
    kinds = sorted(set(rule) & MATCH_KEYS)
    if len(kinds) != 1:
        problems.append(f"{path}: needs exactly one of {', '.join(sorted(MATCH_KEYS))}, got "
                        f"{', '.join(kinds) or 'none'}")
        return None
    kind = kinds[0]
    if kind == "header":
        name = rule["header"]
        if not isinstance(name, str) or not HEADER_NAME.match(name):
            problems.append(f"{path}.header: must be an HTTP header name, got {_show(name)}")
            return None
        if "value" not in rule:
            problems.append(f"{path}.value: required with header")
            return None
        value = _header_value(rule["value"], path + ".value", problems)
        return None if value is None else (name.lower(), value)
    if "value" in rule:
        problems.append(f"{path}.value: only with header (the value of {kind} is {kind}'s own)")
        return None
    value = _header_value(rule[kind], f"{path}.{kind}", problems)
    if value is None:
        return None
    return (SHORTHANDS[kind], value) if kind in SHORTHANDS else (None, value)


def _classify(raw: Any, classes: Collection[str], problems: list[str], pause: Callable[[], None]
              ) -> tuple[ClassRule, ...]:
    if not isinstance(raw, list):
        problems.append(f"classify: must be a list of matchers {{\"objective\"|\"fairnessId\"|\"model\"|"
                        f"\"header\"+\"value\": ..., \"class\": c}}, got {_show(raw)}")
        return ()
    if _too_many(raw, "classify", problems):
        return ()
    out: list[ClassRule] = []
    seen: dict[tuple[str | None, str], int] = {}
    for i, rule in enumerate(raw):
        pause()
        path = f"classify[{i}]"
        if not isinstance(rule, dict):
            problems.append(f"{path}: must be an object with one matcher and a class")
            continue
        _unknown_keys(rule, MATCH_KEYS | {"value", "class"}, path + ".", problems)
        match = _matcher(rule, path, problems)
        if "class" not in rule:
            problems.append(f"{path}.class: required")
            continue
        klass = _known(rule["class"], path + ".class", classes, problems)
        if match is None or klass is None:
            continue
        if match in seen:
            problems.append(f"{path}: unreachable, classify[{seen[match]}] matches the same "
                            f"{'model' if match[0] is None else 'header ' + match[0]} value {_show(match[1])}")
            continue
        seen[match] = i
        out.append(ClassRule(match[0], match[1], klass))
    return tuple(out)


def _default_priority(raw: Any, priorities: Mapping[int, str], problems: list[str]) -> int | None:
    if isinstance(raw, bool) or not isinstance(raw, int) or abs(raw) >= 10 ** 18:
        problems.append(f"defaultPriority: must be an integer vLLM priority (at most 18 digits), got {_show(raw)}")
        return None
    planned = [p for p in priorities if p >= raw]
    if planned:
        problems.append(f"defaultPriority: {raw} must be larger than every class's priority (vLLM runs lower "
                        f"first), priorityClasses has {max(planned)}")
        return None
    return raw


def _no_pause() -> None:
    return None


def parse_reservations(text: str | bytes, *, pause: Callable[[], None] = _no_pause) -> Reservations:
    """Parse and validate a ``kvplan.reservations.v1`` document; :class:`ReservationsError` lists every problem.

    The work is bounded (module docstring). ``pause`` is called throughout the parse (:func:`kvcore.bounded_json.
    load_bounded_json`) and once per entry while they are validated: a reader thread passes one that yields the
    interpreter to the engine's thread once its slice is spent."""
    try:
        doc = load_bounded_json(text, max_bytes=MAX_BYTES, max_separators=MAX_SEPARATORS, max_depth=MAX_DEPTH,
                                pause=pause)
    except BoundedJsonError as exc:
        raise ReservationsError([f"(document): {exc}"]) from None
    if not isinstance(doc, dict):
        raise ReservationsError([f"(document): must be a JSON object, got {type(doc).__name__}"])
    problems: list[str] = []
    _unknown_keys(doc, _TOP_KEYS, "", problems)
    if doc.get("format") != FORMAT:
        problems.append(f"format: must be {json.dumps(FORMAT)}, got {_show(doc.get('format'))}")
    classes = _classes(doc.get("classes"), problems, pause)
    # Cross-references are checked against every class named, even one whose entry is invalid, so that one pass
    # reports every problem.
    names = set(doc["classes"]) if isinstance(doc.get("classes"), dict) and len(doc["classes"]) <= MAX_CLASSES \
        else set()
    default: str | None = None
    if "defaultClass" not in doc:
        problems.append("defaultClass: required (the class of requests that name none or an unknown one)")
    else:
        default = _known(doc["defaultClass"], "defaultClass", names, problems)
    priorities = _priorities(doc.get("priorityClasses", {}), names, problems, pause)
    rules = _rules(doc.get("promptLengthRules", []), names, problems, pause)
    matchers = _classify(doc.get("classify", []), names, problems, pause)
    default_priority = _default_priority(doc["defaultPriority"], priorities, problems) \
        if "defaultPriority" in doc else None
    for key in ("plan", "kvplan"):
        if key in doc and (not isinstance(doc[key], str) or len(doc[key]) > _MAX_LABEL):
            problems.append(f"{key}: must be a string of at most {_MAX_LABEL} characters, got {_show(doc[key])}")
    if problems or default is None:
        raise ReservationsError(problems or ["defaultClass: invalid"])
    return Reservations(
        reserve_tokens=dict(classes), default_class=default, priority_classes=priorities,
        prompt_length_rules=rules, plan=doc.get("plan"), kvplan=doc.get("kvplan"), rules=matchers,
        default_priority=default_priority,
    )


def render_reservations(res: Reservations) -> str:
    """The document for ``res`` (sorted keys, one trailing newline); ``parse_reservations`` inverts it."""
    doc: dict[str, Any] = {
        "format": FORMAT,
        "defaultClass": res.default_class,
        "classes": {k: {"reserveTokens": v} for k, v in res.reserve_tokens.items()},
        "priorityClasses": {str(p): k for p, k in res.priority_classes.items()},
        "promptLengthRules": [
            {"class": r.klass} if r.max_prompt_tokens is None else {"maxPromptTokens": r.max_prompt_tokens,
                                                                    "class": r.klass}
            for r in res.prompt_length_rules
        ],
    }
    if res.rules:
        doc["classify"] = [render_rule(r) for r in res.rules]
    if res.default_priority is not None:
        doc["defaultPriority"] = res.default_priority
    if res.plan is not None:
        doc["plan"] = res.plan
    if res.kvplan is not None:
        doc["kvplan"] = res.kvplan
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"
