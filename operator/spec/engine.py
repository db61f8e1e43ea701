"""The KVPlan's engine fields: ``spec.groups[].engine``, ``spec.groups[].plugin``, and the checks of the
classes' prompt-length rules and fleet default. Part of :mod:`kvplan_operator.spec` (kept apart to keep that module
small); pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from kvcore import FAIRNESS_HEADER, OBJECTIVE_HEADER

from .base import SpecModel

#: ``major.minor[.patch]`` with an optional local suffix (``0.33.0+cu128``); pre-releases are not accepted.
VLLM_VERSION = r"^[0-9]+\.[0-9]+(\.[0-9]+)?(\+[A-Za-z0-9.]+)?$"


class LatencyTargets(SpecModel):
    """What counts as a request served within its SLO on the group, for the engine rules (docs/model.md, "Knobs
    stock vLLM obeys"): neither rule may leave more requests outside these than stock vLLM on the history's
    replays."""

    ttft_seconds: float = Field(2.0, gt=0, le=3600, allow_inf_nan=False,
                                description="Time to first token at most this (s).")
    tpot_seconds: float = Field(0.1, gt=0, le=60, allow_inf_nan=False,
                                description="Mean time per output token after the first at most this (s).")


class Engine(SpecModel):
    """The group's serving engine and the stock vLLM knobs kvplan may set on it (docs/operator.md, "Engine knobs")."""

    vllm_version: str | None = Field(None, pattern=VLLM_VERSION, max_length=64,
                                     description="vLLM version of the group's image; gates --watermark (>= 0.33) and "
                                     "the plugin (0.33.x). None: the Deployment's label kvplan.io/vllm-version, "
                                     "else the official image's tag, else unknown (no version-gated knob is "
                                     "written).")
    knobs: Literal["Auto", "Formula"] = Field("Auto", description="Auto: --max-num-seqs, --watermark and "
                                              "--scheduling-policy from kvcore's knob rule; Formula: only "
                                              "--max-num-seqs from the capacity formula, riding along with rollouts "
                                              "(kvplan 0.1).")
    latency_targets: LatencyTargets = Field(default_factory=LatencyTargets, description="The SLO the engine rules "
                                            "keep: no knob or reservation may put more requests outside it than "
                                            "stock vLLM.")


def parse_version(text: str) -> tuple[int, int, int]:
    """``0.33.0+cu128`` / ``0.33`` / ``0.10.1.1`` -> (major, minor, patch); a missing patch is 0."""
    parts = [int(p) for p in text.split("+", 1)[0].split(".")[:3]]
    return (parts[0], parts[1], parts[2] if len(parts) > 2 else 0)


class Plugin(SpecModel):
    """kvplan's reservation-gated scheduler (``kvplan_vllm``) on the group's engines (docs/vllm-plugins.md)."""

    enabled: bool = Field(False, description="Add --scheduler-cls and mount the reservation file.")
    scheduler: Literal["Auto", "Async", "Sync"] = Field("Auto", description="Auto: the async variant unless the "
                                                        "container's flags or layout turn vLLM's async scheduling off.")


def match_keys(match: Any) -> list[tuple[str | None, str]]:
    """``(lower-case header, or None for the model, value)`` of each field set in a class's ``match``, in the order
    objective, fairness id, model, header."""
    if match is None:
        return []
    keys: list[tuple[str | None, str]] = []
    if match.objective is not None:
        keys.append((OBJECTIVE_HEADER, match.objective))
    if match.fairness_id is not None:
        keys.append((FAIRNESS_HEADER, match.fairness_id))
    if match.model is not None:
        keys.append((None, match.model))
    if match.header is not None:
        keys.append((match.header.name.lower(), match.header.value))
    return keys


def class_rule_errors(classes: Sequence[Any]) -> list[tuple[str, str]]:
    """At most one fleet default; no two classes with one prompt-length rule, nor with one match (the second could
    never match).
    ``classes``: ``spec.classes`` (``fleet_default``, ``max_prompt_tokens``)."""
    errs: list[tuple[str, str]] = []
    defaults = [i for i, c in enumerate(classes) if c.fleet_default]
    for i in defaults[1:]:
        errs.append((f"spec.classes[{i}].fleetDefault", f"spec.classes[{defaults[0]}] is the fleet default already"))
    limits: dict[int, int] = {}
    for i, c in enumerate(classes):
        if c.max_prompt_tokens is None:
            continue
        if c.max_prompt_tokens in limits:
            errs.append((f"spec.classes[{i}].maxPromptTokens", f"{c.max_prompt_tokens} is spec.classes"
                         f"[{limits[c.max_prompt_tokens]}]'s too: this rule could never match"))
        limits.setdefault(c.max_prompt_tokens, i)
    seen: dict[tuple[str | None, str], int] = {}
    for i, c in enumerate(classes):
        for key in match_keys(getattr(c, "match", None)):
            if key in seen:
                what = "model" if key[0] is None else f"header {key[0]}"
                errs.append((f"spec.classes[{i}].match", f"{what} = {key[1]!r} is spec.classes[{seen[key]}]'s "
                             "too: this rule could never match"))
            seen.setdefault(key, i)
    return errs
