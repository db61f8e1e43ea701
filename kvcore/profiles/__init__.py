"""Roofline performance profiles: what one replica of a (GPU type, model, TP, PP) layout can hold and serve.

For each layout z = (TP, PP) a replica uses ``TP * PP`` GPUs and the profile gives

* **KV capacity** ``M(z)`` in tokens::

      M = floor( (mem * util - W / (TP*PP) - act) * TP*PP / kv_bytes_per_token )

  ``mem`` GPU memory (bytes), ``util`` vLLM's ``--gpu-memory-utilization`` (0.90, vLLM's default), ``W`` the
  weights in bytes (params x 2 for bf16), ``act`` a per-GPU activation / CUDA-graph reserve, and
  ``kv_bytes_per_token = 2 (K and V) x layers x kv_heads x head_dim x 2 bytes``. If the bracket is <= 0 the weights
  do not fit and the layout is **infeasible** (e.g. a 70B model in bf16 at TP=1: 141 GB of weights on 80 GB).
* **Step time** for a decode step in which each of B running sequences gains one token, ``t(B) = t0 + t1 * B``
  seconds (memory-bandwidth roofline)::

      t0 = W / (TP * eta_bw * BW)                       # every step reads each stage's weights once per micro-batch
           + 2 * layers * alpha_ar * [TP > 1]            # two all-reduces per layer (latency part)
           + (PP - 1) * alpha_p2p                        # pipeline hand-offs
      t1 = ctx * kv_bytes_per_token / (TP*PP * eta_bw * BW)   # reading one sequence's KV cache (ctx tokens)
           + 2 * params / (TP*PP * eta_fl * FLOPS)             # its matmul FLOPs
           + 4 * layers * hidden * 2 * (TP-1)/TP / (PP * NVLINK)  # its all-reduce bytes (TP communication penalty)

  Pipeline parallelism adds memory but not decode speed at small batch (every micro-batch still reads every stage's
  weights), which is the known picture for memory-bound decode.
* **Decode throughput** ``C(z) = B* / t(B*)`` tokens/s at the operating batch
  ``B* = min(max_num_seqs, M / ctx)`` (vLLM's default ``max_num_seqs`` is 256).
* **Configuration cost** ``phi(z) = TP * PP`` GPUs per replica; a group's phi is ``replicas * TP * PP`` (GPUs in
  use; idle GPUs of an uneven split are not charged).

Sources for the A100 SXM figures: NVIDIA A100 Tensor Core GPU datasheet (80 GB: HBM2e, 2,039 GB/s; 40 GB: HBM2,
1,555 GB/s; both 312 TFLOPS dense bf16 and 600 GB/s NVLink 3).
Efficiencies (eta_bw = 0.8 of peak bandwidth, eta_fl = 0.5 of peak FLOPS) and latencies
(alpha_ar = 8 us per all-reduce, alpha_p2p = 30 us per stage hand-off) are typical measured fractions, not
measurements of ours; override them with measured numbers through :class:`ProfileOverride`.

Models: ``llama-70b`` (70.6e9 params, 80 layers, hidden 8192, GQA 8 KV heads, head dim 128, bf16) and ``llama-8b``
(8.03e9 params, 32 layers, hidden 4096, 8 KV heads, head dim 128, bf16) — the Llama-2/3 shapes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kvcore.bounds import MAX_COUNT, MAX_KV_TOKENS, MAX_SECONDS, MAX_TOKENS_PER_S
from kvcore.catalogue import GPU_TYPES
from kvcore.catalogue import MODELS as CATALOGUE_MODELS
from kvcore.errors import InputError
from kvcore.profiles.arch import ModelArch as _ModelArch
from kvcore.profiles.arch import from_hf_config as _from_hf_config
from kvcore.profiles.gpus import CATALOGUE as _GPU_CATALOGUE
from kvcore.profiles.gpus import GpuType as _GpuType
from kvcore.profiles.models import CONFIGS as _MODEL_CONFIGS
from kvcore.profiles.models import get_model as _get_model


def _gpu_catalogue() -> dict[str, "_GpuType"]:
    return _GPU_CATALOGUE


def _model_configs() -> tuple[str, ...]:
    return tuple(_MODEL_CONFIGS)


@dataclass(frozen=True)
class GpuSpec:
    """One GPU type. Units: bytes, bytes/s, FLOP/s."""

    memory_bytes: float
    hbm_bytes_s: float
    bf16_flops: float
    nvlink_bytes_s: float


@dataclass(frozen=True)
class ModelSpec:
    """One model's shape. ``params`` in parameters; bf16 means 2 bytes per parameter and per KV element."""

    params: float
    layers: int
    hidden: int
    kv_heads: int
    head_dim: int
    bytes_per_param: float = 2.0
    activation_reserve_bytes: float = 4 * 1024**3

    @property
    def weight_bytes(self) -> float:
        return self.params * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        return 2.0 * self.layers * self.kv_heads * self.head_dim * self.bytes_per_param


GPUS: dict[str, GpuSpec] = {
    # 81,920 MiB as nvidia-smi reports it; 2,039 GB/s HBM2e; 312 TFLOPS bf16 dense; 600 GB/s NVLink 3 (total).
    "A100-80GB": GpuSpec(memory_bytes=81920 * 1024**2, hbm_bytes_s=2039e9, bf16_flops=312e12, nvlink_bytes_s=600e9),
    # The 40 GB SXM4 part: 40,960 MiB of HBM2 (as nvidia-smi reports it) at 1,555 GB/s; the same GA100 compute
    # (312 TFLOPS bf16 dense) and NVLink 3 (600 GB/s total) as the 80 GB part.
    "A100-40GB": GpuSpec(memory_bytes=40960 * 1024**2, hbm_bytes_s=1555e9, bf16_flops=312e12, nvlink_bytes_s=600e9),
}
for _name, _g in _gpu_catalogue().items():  # every other catalogue GPU: datasheet figures (kvcore.profiles.gpus)
    GPUS.setdefault(_name, GpuSpec(memory_bytes=_g.memory_bytes, hbm_bytes_s=_g.hbm_bytes_s,
                                   bf16_flops=_g.bf16_flops, nvlink_bytes_s=2 * _g.interconnect_bytes_s))
"""Known GPU types (:data:`kvcore.catalogue.GPU_TYPES`). Names are matched exactly."""

MODELS: dict[str, ModelSpec] = {
    "llama-70b": ModelSpec(params=70.6e9, layers=80, hidden=8192, kv_heads=8, head_dim=128),
    "llama-8b": ModelSpec(
        params=8.03e9, layers=32, hidden=4096, kv_heads=8, head_dim=128, activation_reserve_bytes=2 * 1024**3
    ),
}
for _mname in _model_configs():  # every other catalogue model, from its config.json (kvcore.profiles.models)
    if _mname not in MODELS:
        _a = _get_model(_mname)
        MODELS[_mname] = ModelSpec(params=_a.params, layers=_a.layers, hidden=_a.hidden, kv_heads=_a.kv_heads,
                                   head_dim=_a.head_dim, bytes_per_param=_a.weight_bytes_per_param,
                                   activation_reserve_bytes=(4 if _a.weight_bytes > 40e9 else 2) * 1024**3)
"""Known models (:data:`kvcore.catalogue.MODELS`). Names are matched exactly."""

if set(GPUS) != set(GPU_TYPES) or set(MODELS) != set(CATALOGUE_MODELS):  # one catalogue of names
    raise ImportError(f"kvcore.profiles and kvcore.catalogue disagree: {sorted(GPUS)} vs {GPU_TYPES}, "
                      f"{sorted(MODELS)} vs {CATALOGUE_MODELS}")

GPU_MEMORY_UTILIZATION = 0.90
"""vLLM's default ``--gpu-memory-utilization``."""
MAX_NUM_SEQS = 256
"""vLLM's default ``--max-num-seqs``: the batch never exceeds it."""
NOMINAL_CONTEXT_TOKENS = 1024.0
"""Context length (tokens) of an average running sequence, used for KV reads per step and the operating batch."""
ETA_BW = 0.8
ETA_FLOPS = 0.5
ALPHA_ALLREDUCE_S = 8e-6
ALPHA_P2P_S = 30e-6


class ProfileOverride(BaseModel):
    """Measured numbers that replace the roofline for one (gpu_type, model, tp, pp). Unset fields keep the default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_type: str = Field(description="GPU type the measurement is for, e.g. 'A100-80GB'.")
    model: str = Field(description="Model the measurement is for, e.g. 'llama-70b'.")
    tp: int = Field(ge=1, le=MAX_COUNT, description="Tensor-parallel size.")
    pp: int = Field(ge=1, le=MAX_COUNT, description="Pipeline-parallel size.")
    kv_capacity_tokens: float | None = Field(
        default=None, description="KV capacity per replica, tokens; must be > 0. None keeps the roofline value."
    )
    throughput_tokens_s: float | None = Field(
        default=None, description="Decode throughput per replica, tokens/s; must be > 0. None keeps the roofline."
    )
    step_t0_s: float | None = Field(default=None, description="Step-time intercept t0, seconds (>= 0).")
    step_t1_s: float | None = Field(default=None, description="Step-time slope t1, seconds per sequence (>= 0).")
    phi: float | None = Field(default=None, description="Configuration cost per replica (>= 0); default TP*PP.")


@dataclass(frozen=True)
class Profile:
    """One replica of one layout. ``feasible`` False means the weights do not fit (``reason`` says why)."""

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
        return min(float(MAX_NUM_SEQS), max(1.0, self.kv_capacity_tokens / NOMINAL_CONTEXT_TOKENS))


def spec_from_arch(a: "_ModelArch") -> ModelSpec:
    """The roofline's :class:`ModelSpec` of a model architecture (a catalogue entry or a user's config.json)."""
    return ModelSpec(params=a.params, layers=a.layers, hidden=a.hidden, kv_heads=a.kv_heads, head_dim=a.head_dim,
                     bytes_per_param=a.weight_bytes_per_param,
                     activation_reserve_bytes=(4 if a.weight_bytes > 40e9 else 2) * 1024**3)


@lru_cache(maxsize=256)
def _spec_from_json(text: str, name: str, field: str) -> ModelSpec:
    return spec_from_arch(_from_hf_config(json.loads(text), name=name, field=field))


def model_spec_from_config(cfg: Mapping[str, Any], *, name: str, field: str) -> ModelSpec:
    """A user's ``config.json`` mapping as a roofline :class:`ModelSpec`; bad keys raise :class:`InputError`
    naming ``field``.key. Cached on the mapping's content."""
    try:
        text = json.dumps(cfg, sort_keys=True)
    except (TypeError, ValueError):
        raise InputError(field, "must be a JSON-like mapping (a config.json object)") from None
    return _spec_from_json(text, name, field)


def check_known(gpu_type: str, model: str, *, field: str,
                models: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Raise :class:`InputError` naming ``field`` when the GPU type or model is unknown (``models``: the instance's
    own model configs, by name)."""
    if gpu_type not in GPUS:
        raise InputError(f"{field}.gpu_type", f"unknown GPU type {gpu_type!r}", hint="known: " + ", ".join(GPUS))
    if model not in MODELS and not (models and model in models):
        raise InputError(f"{field}.model", f"unknown model {model!r}", hint="known: " + ", ".join(MODELS))


@lru_cache(maxsize=4096)
def roofline(gpu_type: str, model: str, tp: int, pp: int) -> Profile:
    """The documented roofline default for one layout (see the module docstring). Cached: profiles are pure."""
    check_known(gpu_type, model, field="profile")
    return roofline_spec(gpu_type, model, MODELS[model], tp, pp)


@lru_cache(maxsize=4096)
def roofline_spec(gpu_type: str, model: str, m: ModelSpec, tp: int, pp: int) -> Profile:
    """The roofline of a model given by its :class:`ModelSpec` (e.g. from a config.json), named ``model``."""
    if gpu_type not in GPUS:
        raise InputError("profile.gpu_type", f"unknown GPU type {gpu_type!r}", hint="known: " + ", ".join(GPUS))
    if tp < 1 or pp < 1:
        raise InputError("profile.tp" if tp < 1 else "profile.pp", "must be >= 1")
    g = GPUS[gpu_type]
    n = tp * pp
    free_per_gpu = g.memory_bytes * GPU_MEMORY_UTILIZATION - m.weight_bytes / n - m.activation_reserve_bytes
    t0 = m.weight_bytes / (tp * ETA_BW * g.hbm_bytes_s)
    t0 += (2 * m.layers * ALPHA_ALLREDUCE_S if tp > 1 else 0.0) + (pp - 1) * ALPHA_P2P_S
    t1 = NOMINAL_CONTEXT_TOKENS * m.kv_bytes_per_token / (n * ETA_BW * g.hbm_bytes_s)
    t1 += 2 * m.params / (n * ETA_FLOPS * g.bf16_flops)
    t1 += 4 * m.layers * m.hidden * 2 * (tp - 1) / tp / (pp * g.nvlink_bytes_s)
    if free_per_gpu <= 0:
        need = m.weight_bytes / n / 1e9
        return Profile(gpu_type, model, tp, pp, False,
                       f"weights need {need:.1f} GB per GPU; {g.memory_bytes * GPU_MEMORY_UTILIZATION / 1e9:.1f} GB "
                       f"usable at TP={tp}, PP={pp}", 0.0, 0.0, t0, t1, float(n))
    cap = math.floor(free_per_gpu * n / m.kv_bytes_per_token)
    batch = min(float(MAX_NUM_SEQS), max(1.0, cap / NOMINAL_CONTEXT_TOKENS))
    thr = batch / (t0 + t1 * batch)
    return Profile(gpu_type, model, tp, pp, True, "roofline", float(cap), thr, t0, t1, float(n))


def resolve(gpu_type: str, model: str, tp: int, pp: int, overrides: tuple[ProfileOverride, ...] = (),
            models: Mapping[str, Mapping[str, Any]] | None = None) -> Profile:
    """The roofline profile with any matching override applied (the last matching override wins per field).
    ``models``: the instance's own model configs (config.json mappings by name), which take precedence."""
    if models and model in models:
        base = roofline_spec(gpu_type, model, model_spec_from_config(models[model], name=model,
                                                                     field=f"models.{model}"), tp, pp)
    else:
        base = roofline(gpu_type, model, tp, pp)
    fields: dict[str, float] = {}
    for ov in overrides:
        if (ov.gpu_type, ov.model, ov.tp, ov.pp) != (gpu_type, model, tp, pp):
            continue
        for name in ("kv_capacity_tokens", "throughput_tokens_s", "step_t0_s", "step_t1_s", "phi"):
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
                   fields.get("phi", base.phi))


_OVERRIDE_MAX = {"kv_capacity_tokens": MAX_KV_TOKENS, "throughput_tokens_s": MAX_TOKENS_PER_S,
                 "step_t0_s": MAX_SECONDS, "step_t1_s": MAX_SECONDS, "phi": float(MAX_COUNT)}
"""Upper bound of each override field (kvcore.bounds): past it the number cannot be a measurement."""


def check_override(ov: ProfileOverride, *, field: str) -> None:
    """Validate one override: known names, positive capacity and throughput, non-negative times and phi, each
    below its bound in :data:`_OVERRIDE_MAX`."""
    check_known(ov.gpu_type, ov.model, field=field)
    for name in ("kv_capacity_tokens", "throughput_tokens_s"):
        value = getattr(ov, name)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise InputError(f"{field}.{name}", f"must be a finite number > 0, got {value}")
    for name in ("step_t0_s", "step_t1_s", "phi"):
        value = getattr(ov, name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise InputError(f"{field}.{name}", f"must be a finite number >= 0, got {value}")
    for name, top in _OVERRIDE_MAX.items():
        value = getattr(ov, name)
        if value is not None and value > top:
            raise InputError(f"{field}.{name}", f"must be at most {top:g} (kvcore.bounds), got {value:g}")
