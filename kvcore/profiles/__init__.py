"""Performance profiles: what one replica of a (GPU type, model, TP, PP) layout can hold and serve, from the
step-time model calibrated on measured kernels (:mod:`kvcore.profiles.steptime`, docs/model.md "Step-time model").

For each layout z = (TP, PP) a replica uses ``TP * PP`` GPUs and the profile gives

* **KV capacity** ``M(z)`` in tokens: :func:`kvcore.profiles.steptime.kv_tokens`, i.e.
  ``floor((mem * util - W/(TP*PP) - act) * TP*PP / kv_bytes_per_token)`` with ``mem`` GPU memory (bytes), ``util``
  vLLM's ``--gpu-memory-utilization`` (0.90), ``W`` the weight bytes, ``act`` the per-GPU activation reserve (bytes)
  and ``kv_bytes_per_token`` (bytes per token, all layers). ``M <= 0`` means the weights do not fit: **infeasible**.
  A layout vLLM would refuse (TP not dividing the heads, fp8 on a GPU without it, PP above the layers) is
  infeasible too, with the reason.
* **Step time** of a decode step of B sequences at the nominal context of 1,024 tokens, as the line
  ``t(B) = t0 + t1 * B`` (seconds; t1 seconds per sequence) that the planner, the engine model and the rules
  take: exact at the operating batch ``B*`` and fitted by least relative squares on the measured model's step
  times at B = 1, 2, 4, ... below it (:func:`linear_step`). The measured model itself is not linear (linear layers
  stay bandwidth-bound up to a batch of about 128); the line's worst relative error on that grid is reported by
  ``tests/unit/kvcore/test_profiles_measured.py``.
* **Decode throughput** ``C(z) = B* / t(B*)`` tokens/s at ``B* = min(max_num_seqs, M / 1024)``, ``max_num_seqs``
  vLLM 0.33's default on the GPU (256 on A100s, 1024 on large-memory GPUs).
* **Prefill rate** ``prefill_tokens_s``: 2,048 tokens over the model's time to the first token of a 2,048-token
  prompt alone (tokens/s).
* **Configuration cost** ``phi(z) = TP * PP`` GPUs per replica; a group's phi is ``replicas * TP * PP`` (GPUs in
  use; idle GPUs of an uneven split are not charged).

GPU figures are datasheets (:mod:`kvcore.profiles.gpus`), models their config.json (:mod:`kvcore.profiles.models`),
kernel efficiencies and NCCL latencies fitted on vidur's measured profiles (:mod:`kvcore.profiles.calibrate`); the
costs of a step inside a CUDA graph and the CPU per step fitted on published vLLM runs
(:data:`kvcore.profiles.steptime.GRAPH`). Measured numbers of a user's own fleet replace any field through
:class:`ProfileOverride`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kvcore.bounds import MAX_CONTEXT_S_PER_TOKEN, MAX_COUNT, MAX_KV_TOKENS, MAX_SECONDS, MAX_TOKENS_PER_S
from kvcore.catalogue import GPU_TYPES
from kvcore.catalogue import MODELS as CATALOGUE_MODELS
from kvcore.errors import InputError
from kvcore.profiles.arch import ModelArch as _ModelArch
from kvcore.profiles.arch import from_hf_config as _from_hf_config
from kvcore.profiles.gpus import CATALOGUE as _GPU_CATALOGUE
from kvcore.profiles.gpus import GpuType as _GpuType
from kvcore.profiles.gpus import gpu_from_spec as _gpu_from_spec
from kvcore.profiles.models import CONFIGS as _MODEL_CONFIGS
from kvcore.profiles.models import get_model as _get_model
from kvcore.profiles.steptime import kv_tokens as _kv_tokens
from kvcore.profiles.steptime import layout as _layout
from kvcore.profiles.steptime import prefill_time as _prefill_time
from kvcore.profiles.steptime import step_time as _step_time


GPUS: dict[str, _GpuType] = dict(_GPU_CATALOGUE)
"""Known GPU types (:data:`kvcore.catalogue.GPU_TYPES`), datasheet figures (:mod:`kvcore.profiles.gpus`)."""

MODELS: dict[str, _ModelArch] = {name: _get_model(name) for name in _MODEL_CONFIGS}
"""Known models (:data:`kvcore.catalogue.MODELS`), each from its config.json (:mod:`kvcore.profiles.models`)."""

if set(GPUS) != set(GPU_TYPES) or set(MODELS) != set(CATALOGUE_MODELS):  # one catalogue of names
    raise ImportError(f"kvcore.profiles and kvcore.catalogue disagree: {sorted(GPUS)} vs {GPU_TYPES}, "
                      f"{sorted(MODELS)} vs {CATALOGUE_MODELS}")

GPU_MEMORY_UTILIZATION = 0.90
"""vLLM's default ``--gpu-memory-utilization``."""
MAX_NUM_SEQS = 256
"""vLLM 0.33's default ``--max-num-seqs`` on A100s and GPUs under 70 GiB (:attr:`Profile.max_num_seqs` is the GPU's
own default, :attr:`kvcore.profiles.gpus.GpuType.vllm_max_num_seqs`)."""
NOMINAL_CONTEXT_TOKENS = 1024.0
"""Context length (tokens) of an average running sequence, used for KV reads per step and the operating batch."""
PREFILL_PROMPT_TOKENS = 2048
"""Prompt length (tokens) at which :attr:`Profile.prefill_tokens_s` is taken: a 2,048-token prompt alone, in vLLM's
default chunks."""


class ProfileOverride(BaseModel):
    """Measured numbers that replace the profile for one (gpu_type, model, tp, pp). Unset fields keep the default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_type: str = Field(description="GPU type the measurement is for, e.g. 'A100-80GB'.")
    model: str = Field(description="Model the measurement is for, e.g. 'llama-70b'.")
    tp: int = Field(ge=1, le=MAX_COUNT, description="Tensor-parallel size.")
    pp: int = Field(ge=1, le=MAX_COUNT, description="Pipeline-parallel size.")
    kv_capacity_tokens: float | None = Field(
        default=None, description="KV capacity per replica, tokens; must be > 0. None keeps the profile's value."
    )
    throughput_tokens_s: float | None = Field(
        default=None, description="Decode throughput per replica, tokens/s; must be > 0. None keeps the profile's."
    )
    step_t0_s: float | None = Field(default=None, description="Step-time intercept t0, seconds (>= 0).")
    step_t1_s: float | None = Field(default=None, description="Step-time slope t1, seconds per sequence (>= 0).")
    phi: float | None = Field(default=None, description="Configuration cost per replica (>= 0); default TP*PP.")
    prefill_tokens_s: float | None = Field(
        default=None, description="Prefill rate per replica, tokens/s; must be > 0. None keeps the profile's."
    )
    context_s_per_token: float | None = Field(
        default=None, description="Step seconds per token of context the step's requests hold (>= 0, at most 1 ms); "
                                  "the line t0 + t1*B holds at 1,024 tokens of context per sequence. None keeps "
                                  "the profile's."
    )


@dataclass(frozen=True)
class Profile:
    """One replica of one layout. ``feasible`` False means the weights do not fit or vLLM would refuse the layout
    (``reason`` says why). Units: tokens, tokens/s, seconds (t1: seconds per sequence), GPUs (phi)."""

    gpu_type: str
    model: str
    tp: int
    pp: int
    feasible: bool
    reason: str
    kv_capacity_tokens: float
    throughput_tokens_s: float
    step_t0_s: float
    step_t1_s: float
    phi: float
    prefill_tokens_s: float = 4400.0
    """Prefill rate of one replica, tokens/s: a :data:`PREFILL_PROMPT_TOKENS`-token prompt over its time to the
    first token in the step-time model."""
    max_num_seqs: int = MAX_NUM_SEQS
    """vLLM 0.33's default ``--max-num-seqs`` on this GPU: the operating batch never exceeds it."""
    decode_knots: tuple[tuple[int, float], ...] = ()
    """(batch, seconds) points of the measured model's decode step at a 1,024-token context, at B = 1, 2, 4, ...,
    B* and max_num_seqs: the curve the engine model takes (:class:`kvcore.sim.engine.StepTiming`); the line
    ``t0 + t1*B`` is fitted to it and exact at B*. Empty for an override of t0 or t1 (the user's line then)."""
    context_s_per_token: float = 0.0
    """Seconds a step takes per token of context its requests hold (the KV read of one token: the step-time model's
    slope in the context, exact since its attention term is linear in the KV bytes read). The knots and the line
    hold at :data:`NOMINAL_CONTEXT_TOKENS` per sequence; the engine model moves each step by this much per token
    above or below that (:class:`kvcore.sim.engine.StepTiming`). 0: context-free."""

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    def step_time(self, batch: float) -> float:
        """Seconds per decode step with ``batch`` running sequences: t0 + t1 * batch."""
        return self.step_t0_s + self.step_t1_s * batch

    @property
    def token_interval_s(self) -> float:
        """Seconds between two tokens of one sequence at the operating batch B* (= B* / C)."""
        batch = self.operating_batch
        return self.step_time(batch) if batch > 0 else math.inf

    @property
    def operating_batch(self) -> float:
        if not self.feasible:
            return 0.0
        return min(float(self.max_num_seqs), max(1.0, self.kv_capacity_tokens / NOMINAL_CONTEXT_TOKENS))


@lru_cache(maxsize=256)
def _arch_from_json(text: str, name: str, field: str) -> "_ModelArch":
    return _from_hf_config(json.loads(text), name=name, field=field)


def model_arch_from_config(cfg: Mapping[str, Any], *, name: str, field: str) -> "_ModelArch":
    """A user's ``config.json`` mapping as a :class:`~kvcore.profiles.arch.ModelArch`; bad keys raise
    :class:`InputError` naming ``field``.key. Cached on the mapping's content."""
    try:
        text = json.dumps(cfg, sort_keys=True)
    except (TypeError, ValueError):
        raise InputError(field, "must be a JSON-like mapping (a config.json object)") from None
    return _arch_from_json(text, name, field)


@lru_cache(maxsize=256)
def _gpu_from_json(text: str, name: str, field: str) -> _GpuType:
    return _gpu_from_spec(json.loads(text), name=name, field=field)


def gpu_from_config(spec: Mapping[str, Any], *, name: str, field: str) -> _GpuType:
    """A user-given GPU spec mapping (:func:`kvcore.profiles.gpus.gpu_from_spec`) as a :class:`GpuType` named
    ``name``; a catalogue name is refused (give the spec another name), bad keys raise :class:`InputError` naming
    ``field``.key. Cached on the mapping's content."""
    if name in GPUS:
        raise InputError(field, f"{name!r} is a catalogue GPU type; give the user's spec another name",
                         hint="catalogue: " + ", ".join(GPUS))
    if not isinstance(spec, Mapping):
        raise InputError(field, "must be a mapping of GPU figures (memoryBytes, hbmBytesPerSecond, bf16Flops, ...)")
    try:
        text = json.dumps(spec, sort_keys=True)
    except (TypeError, ValueError):
        raise InputError(field, "must be a JSON-like mapping") from None
    return _gpu_from_json(text, name, field)


def gpu_of(gpu_type: str, gpus: Mapping[str, Mapping[str, Any]] | None = None, *, field: str) -> _GpuType:
    """The GPU a group names: one of the instance's own GPU specs (``gpus``, by name), else the catalogue's;
    :class:`InputError` at ``field`` when it is neither."""
    if gpus and gpu_type in gpus:
        return gpu_from_config(gpus[gpu_type], name=gpu_type, field=f"gpu_types.{gpu_type}")
    if gpu_type not in GPUS:
        known = [*GPUS, *(gpus or {})]
        raise InputError(field, f"unknown GPU type {gpu_type!r}", hint="known: " + ", ".join(known))
    return GPUS[gpu_type]


def _arch_of(model: str, models: Mapping[str, Mapping[str, Any]] | None) -> "_ModelArch":
    if models and model in models:
        return model_arch_from_config(models[model], name=model, field=f"models.{model}")
    return MODELS[model]


def check_known(gpu_type: str, model: str, *, field: str,
                models: Mapping[str, Mapping[str, Any]] | None = None,
                gpus: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Raise :class:`InputError` naming ``field`` when the GPU type or model is unknown (``models``, ``gpus``: the
    instance's own model configs and GPU specs, by name)."""
    gpu_of(gpu_type, gpus, field=f"{field}.gpu_type")
    if model not in MODELS and not (models and model in models):
        raise InputError(f"{field}.model", f"unknown model {model!r}", hint="known: " + ", ".join(MODELS))


def check_layout(gpu_type: str, model: str, tp: int, pp: int, *, field: str,
                 models: Mapping[str, Mapping[str, Any]] | None = None,
                 gpus: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Raise :class:`InputError` naming ``field``.tp (or .pp, .kv_dtype, .model.weight_dtype) for a layout vLLM
    would refuse: a TP that does not divide the attention heads or the KV heads, more stages than layers, fp8 on a
    GPU without it. A layout whose weights do not fit is not an error here (the planner skips it)."""
    check_known(gpu_type, model, field=field, models=models, gpus=gpus)
    _layout(gpu_of(gpu_type, gpus, field=f"{field}.gpu_type"), _arch_of(model, models), tp, pp, field=field)


@lru_cache(maxsize=4096)
def roofline(gpu_type: str, model: str, tp: int, pp: int) -> Profile:
    """The measured-model profile of one catalogue layout (see the module docstring). Cached: profiles are pure."""
    check_known(gpu_type, model, field="profile")
    return measured(gpu_type, _get_model(model), tp, pp)


@lru_cache(maxsize=4096)
def measured(gpu_type: str | _GpuType, arch: "_ModelArch", tp: int, pp: int) -> Profile:
    """The profile of ``arch`` (a catalogue entry or a user's config.json) on ``gpu_type`` (a catalogue name or a
    user-given :class:`~kvcore.profiles.gpus.GpuType`) at one layout, from the step-time model
    calibrated on measured kernels (:mod:`kvcore.profiles.steptime`). A layout vLLM would refuse (a TP that does not
    divide the heads, fp8 on a GPU without it, more stages than layers) or whose weights do not fit is infeasible,
    with the reason; a bad GPU name or a TP/PP below 1 raises :class:`InputError`."""
    gpu = gpu_type if isinstance(gpu_type, _GpuType) else gpu_of(gpu_type, field="profile.gpu_type")
    gpu_type = gpu.name
    if tp < 1 or pp < 1:
        raise InputError("profile.tp" if tp < 1 else "profile.pp", "must be >= 1")
    n = tp * pp
    try:
        lay = _layout(gpu, arch, tp, pp)
    except InputError as exc:
        return Profile(gpu_type, arch.name, tp, pp, False, exc.message, 0.0, 0.0, 0.0, 0.0, float(n),
                       max_num_seqs=gpu.vllm_max_num_seqs)
    cap = _kv_tokens(lay)
    seqs = gpu.vllm_max_num_seqs
    batch = int(min(seqs, max(1.0, cap / NOMINAL_CONTEXT_TOKENS)))
    knots = tuple((b, _step_time(lay, NOMINAL_CONTEXT_TOKENS, batch=b)) for b in _knot_batches(batch, seqs))
    t0, t1 = linear_step(dict(knots).__getitem__, batch)
    prefill = PREFILL_PROMPT_TOKENS / _prefill_time(lay, PREFILL_PROMPT_TOKENS)
    if cap <= 0:
        need = arch.weight_bytes / n / 1e9
        usable = gpu.memory_bytes * GPU_MEMORY_UTILIZATION / 1e9
        return Profile(gpu_type, arch.name, tp, pp, False,
                       f"weights need {need:.1f} GB per GPU; {usable:.1f} GB usable at TP={tp}, PP={pp} (less the "
                       f"activation reserve)", 0.0, 0.0, t0, t1, float(n), prefill, seqs, knots)
    thr = batch / (t0 + t1 * batch)
    ctx = (_step_time(lay, 2 * NOMINAL_CONTEXT_TOKENS, batch=1) - _step_time(lay, NOMINAL_CONTEXT_TOKENS, batch=1))
    return Profile(gpu_type, arch.name, tp, pp, True, "measured step-time model", float(cap), thr, t0, t1, float(n),
                   prefill, seqs, knots, max(ctx / NOMINAL_CONTEXT_TOKENS, 0.0))


def doubling_batches(top: int) -> list[int]:
    """The batches 1, 2, 4, ... below ``top`` (at least 1 and 2): where the decode curve is sampled and the line
    fitted."""
    return sorted({1, 2, *(2**i for i in range(1, 12) if 2**i < top)})


def _knot_batches(batch: int, seqs: int) -> list[int]:
    """Batches the decode curve is sampled at: :func:`doubling_batches` up to ``seqs`` (vLLM's max_num_seqs), and
    ``batch`` (the operating batch B*) and ``seqs`` themselves."""
    return sorted({*doubling_batches(seqs), batch, seqs})


def linear_step(step: Callable[[int], float], batch: int) -> tuple[float, float]:
    """``(t0, t1)`` of the line ``t0 + t1*B`` through the measured step time at the operating batch ``batch``
    (exact there, so the throughput ``B*/t(B*)`` is the model's), with the slope fitted by least relative squares
    on the batches 1, 2, 4, ... below it. Seconds, seconds per sequence; ``t0 > 0``, ``t1 >= 0``."""
    top = step(batch)
    num = den = 0.0
    for b in doubling_batches(batch):
        if b == batch:
            continue
        y = step(b)
        w = 1.0 / (y * y)
        num += w * (b - batch) * (y - top)
        den += w * (b - batch) ** 2
    t1 = num / den if den > 0 else 0.0
    t1 = min(max(t1, 0.0), 0.99 * top / batch)
    return top - t1 * batch, t1


def resolve(gpu_type: str, model: str, tp: int, pp: int, overrides: tuple[ProfileOverride, ...] = (),
            models: Mapping[str, Mapping[str, Any]] | None = None,
            gpus: Mapping[str, Mapping[str, Any]] | None = None) -> Profile:
    """The profile with any matching override applied (the last matching override wins per field).
    ``models``, ``gpus``: the instance's own model configs (config.json mappings by name) and GPU specs
    (:func:`kvcore.profiles.gpus.gpu_from_spec` mappings by name), which take precedence over the catalogue."""
    if (models and model in models) or (gpus and gpu_type in gpus):
        check_known(gpu_type, model, field="profile", models=models, gpus=gpus)
        base = measured(gpu_of(gpu_type, gpus, field="profile.gpu_type"), _arch_of(model, models), tp, pp)
    else:
        base = roofline(gpu_type, model, tp, pp)
    fields: dict[str, float] = {}
    for ov in overrides:
        if (ov.gpu_type, ov.model, ov.tp, ov.pp) != (gpu_type, model, tp, pp):
            continue
        for name in ("kv_capacity_tokens", "throughput_tokens_s", "step_t0_s", "step_t1_s", "phi",
                     "prefill_tokens_s", "context_s_per_token"):
            value = getattr(ov, name)
            if value is not None:
                fields[name] = float(value)
    if not fields:
        return base
    cap = fields.get("kv_capacity_tokens", base.kv_capacity_tokens)
    thr = fields.get("throughput_tokens_s", base.throughput_tokens_s)
    feasible = cap > 0 and thr > 0
    reason = "measured override" if feasible else base.reason
    return Profile(gpu_type, model, tp, pp, feasible, reason, cap, thr,
                   fields.get("step_t0_s", base.step_t0_s), fields.get("step_t1_s", base.step_t1_s),
                   fields.get("phi", base.phi), fields.get("prefill_tokens_s", base.prefill_tokens_s),
                   base.max_num_seqs,
                   () if {"step_t0_s", "step_t1_s"} & set(fields) else base.decode_knots,
                   fields.get("context_s_per_token", base.context_s_per_token))


_OVERRIDE_MAX = {"kv_capacity_tokens": MAX_KV_TOKENS, "throughput_tokens_s": MAX_TOKENS_PER_S,
                 "step_t0_s": MAX_SECONDS, "step_t1_s": MAX_SECONDS, "phi": float(MAX_COUNT),
                 "prefill_tokens_s": MAX_TOKENS_PER_S, "context_s_per_token": MAX_CONTEXT_S_PER_TOKEN}
"""Upper bound of each override field (kvcore.bounds): past it the number cannot be a measurement."""


def check_override(ov: ProfileOverride, *, field: str, models: Mapping[str, Mapping[str, Any]] | None = None,
                   gpus: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Validate one override: known names (the catalogue's or the instance's own ``models`` and ``gpus``),
    positive capacity and throughput, non-negative times and phi, each below its bound in :data:`_OVERRIDE_MAX`."""
    check_known(ov.gpu_type, ov.model, field=field, models=models, gpus=gpus)
    for name in ("kv_capacity_tokens", "throughput_tokens_s", "prefill_tokens_s"):
        value = getattr(ov, name)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise InputError(f"{field}.{name}", f"must be a finite number > 0, got {value}")
    for name in ("step_t0_s", "step_t1_s", "phi", "context_s_per_token"):
        value = getattr(ov, name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise InputError(f"{field}.{name}", f"must be a finite number >= 0, got {value}")
    for name, top in _OVERRIDE_MAX.items():
        value = getattr(ov, name)
        if value is not None and value > top:
            raise InputError(f"{field}.{name}", f"must be at most {top:g} (kvcore.bounds), got {value:g}")
