"""A model as its architecture (issue 22, part 1): what a Hugging Face ``config.json`` says, checked.

:func:`from_hf_config` reads a ``config.json`` mapping (Llama, Mistral, Mixtral, Qwen2/Qwen3 dense and MoE,
DeepSeek-V3 and gpt-oss key names); an architecture the model cannot express (e.g. multi-head latent attention,
sliding-window-only attention, state-space layers) is refused with the key named. Every bad value raises
:class:`kvcore.errors.InputError` with the field path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvcore.errors import InputError

DTYPE_BYTES = {"bf16": 2.0, "bfloat16": 2.0, "fp16": 2.0, "float16": 2.0, "fp8": 1.0, "float8": 1.0,
               "mxfp4": 0.53}
"""Bytes per element; mxfp4 (gpt-oss experts) is 4 bits plus one 8-bit scale per 32 values."""
SUPPORTED_ARCHS = ("LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM",
                   "Qwen3ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "GptOssForCausalLM",
                   "DeepseekV3ForCausalLM")


@dataclass(frozen=True)
class ModelArch:
    """Shape of a decoder-only transformer. ``experts`` 0 means dense; ``moe_intermediate`` is one expert's width.
    ``dense_layers`` of the first layers use the dense MLP (``intermediate``) in an MoE model (DeepSeek-V3)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    experts: int = 0
    experts_per_token: int = 0
    moe_intermediate: int = 0
    shared_experts: int = 0
    dense_layers: int = 0
    kv_bytes_per_token_override: float = 0.0
    """MLA models cache a latent (DeepSeek-V3: 512 + 64 per layer), not K and V per head."""
    tied_embeddings: bool = False
    source: str = ""

    @property
    def weight_bytes_per_param(self) -> float:
        return DTYPE_BYTES[self.weight_dtype]

    @property
    def kv_bytes_per_elem(self) -> float:
        return DTYPE_BYTES[self.kv_dtype]

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def attn_params_per_layer(self) -> float:
        h, d = self.hidden, self.head_dim
        return float(h * (self.heads + 2 * self.kv_heads) * d + self.heads * d * h)

    def mlp_params_per_layer(self, *, active: bool) -> float:
        """Parameters of one MoE layer's MLP (``active``: the experts one token uses, plus shared ones)."""
        if not self.moe:
            return 3.0 * self.hidden * self.intermediate
        n = self.experts_per_token if active else self.experts
        return 3.0 * self.hidden * self.moe_intermediate * (n + self.shared_experts) + self.hidden * self.experts

    @property
    def embedding_params(self) -> float:
        return float(self.vocab * self.hidden * (1 if self.tied_embeddings else 2))

    def _mlp_total(self, *, active: bool) -> float:
        dense = 3.0 * self.hidden * self.intermediate
        moe_layers = self.layers - self.dense_layers if self.moe else 0
        return (self.layers - moe_layers) * dense + moe_layers * self.mlp_params_per_layer(active=active)

    @property
    def params(self) -> float:
        return self.layers * self.attn_params_per_layer + self._mlp_total(active=False) + self.embedding_params

    @property
    def active_params(self) -> float:
        return self.layers * self.attn_params_per_layer + self._mlp_total(active=True) + self.embedding_params

    @property
    def weight_bytes(self) -> float:
        return self.params * self.weight_bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        if self.kv_bytes_per_token_override:
            return self.kv_bytes_per_token_override
        return 2.0 * self.layers * self.kv_heads * self.head_dim * self.kv_bytes_per_elem

    def with_kv_dtype(self, kv_dtype: str) -> ModelArch:
        from dataclasses import replace
        if kv_dtype not in DTYPE_BYTES:
            raise InputError("kv_dtype", f"unknown KV-cache dtype {kv_dtype!r}", hint="bf16 or fp8")
        scale = DTYPE_BYTES[kv_dtype] / self.kv_bytes_per_elem
        return replace(self, kv_dtype=kv_dtype,
                       kv_bytes_per_token_override=self.kv_bytes_per_token_override * scale)


def check_arch(m: ModelArch, *, field: str) -> None:
    """Refuse a shape the time model (or vLLM) cannot run, naming the field."""
    for name in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab"):
        v = getattr(m, name)
        if not isinstance(v, int) or v < 1:
            raise InputError(f"{field}.{name}", f"must be a positive integer, got {v!r}")
    if m.heads % m.kv_heads:
        raise InputError(f"{field}.kv_heads", f"{m.kv_heads} KV heads do not divide {m.heads} attention heads")
    for name in ("weight_dtype", "kv_dtype"):
        if getattr(m, name) not in DTYPE_BYTES:
            raise InputError(f"{field}.{name}", f"unknown dtype {getattr(m, name)!r}", hint="bf16 or fp8")
    if m.moe and not (1 <= m.experts_per_token <= m.experts and m.moe_intermediate >= 1):
        raise InputError(f"{field}.experts_per_token", "an MoE model needs 1 <= experts_per_token <= experts and "
                         "a moe_intermediate size >= 1")
    if not 0 <= m.dense_layers <= m.layers:
        raise InputError(f"{field}.dense_layers", f"must be in [0, layers], got {m.dense_layers}")


def check_tp(m: ModelArch, tp: int, *, field: str) -> None:
    """vLLM refuses a TP that does not divide the attention heads; KV heads are replicated when TP exceeds them,
    but a TP that neither divides nor is a multiple of the KV heads is refused too."""
    if m.heads % tp:
        raise InputError(field, f"TP={tp} does not divide the {m.heads} attention heads of {m.name}")
    if not m.kv_bytes_per_token_override and m.kv_heads % tp and tp % m.kv_heads:
        raise InputError(field, f"TP={tp} neither divides nor is a multiple of the {m.kv_heads} KV heads of {m.name}")


_UNSUPPORTED_KEYS = {
    "sliding_window_pattern": "sliding-window attention layers",
    "layer_types": "per-layer attention types",
    "ssm_cfg": "state-space layers",
    "mamba_d_state": "state-space layers",
    "linear_attn_config": "linear attention",
}


def _get(cfg: Mapping[str, Any], field: str, *keys: str, default: Any = None) -> Any:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    if default is None:
        raise InputError(f"{field}.{keys[0]}", "is required")
    return default


def _int(cfg: Mapping[str, Any], field: str, *keys: str, default: int | None = None) -> int:
    v = _get(cfg, field, *keys, default=default)
    key = next((k for k in keys if k in cfg), keys[0])
    if isinstance(v, bool) or not isinstance(v, int):
        raise InputError(f"{field}.{key}", f"must be an integer, got {v!r}")
    return v


def from_hf_config(cfg: Mapping[str, Any], *, name: str = "custom", field: str = "model_config",
                   kv_dtype: str = "bf16", source: str = "") -> ModelArch:
    """A :class:`ModelArch` from a Hugging Face ``config.json`` mapping."""
    if not isinstance(cfg, Mapping):
        raise InputError(field, "must be a mapping (a config.json object)")
    archs = cfg.get("architectures") or []
    if archs and not isinstance(archs, list):
        raise InputError(f"{field}.architectures", "must be a list")
    for a in archs:
        if a not in SUPPORTED_ARCHS:
            raise InputError(f"{field}.architectures", f"architecture {a!r} is not one the time model expresses",
                             hint="supported: " + ", ".join(SUPPORTED_ARCHS))
    for key, what in _UNSUPPORTED_KEYS.items():
        if cfg.get(key) and not (key == "layer_types" and "GptOssForCausalLM" in archs):
            raise InputError(f"{field}.{key}", f"{what} cannot be expressed by the time model")
    if cfg.get("use_sliding_window") and "max_window_layers" in cfg:
        raise InputError(f"{field}.use_sliding_window", "sliding-window attention cannot be expressed")
    layers = _int(cfg, field, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _int(cfg, field, "hidden_size", "n_embd", "d_model")
    heads = _int(cfg, field, "num_attention_heads", "n_head")
    kv_heads = _int(cfg, field, "num_key_value_heads", default=heads)
    head_dim = _int(cfg, field, "head_dim", default=hidden // heads if heads else 0)
    vocab = _int(cfg, field, "vocab_size")
    experts = _int(cfg, field, "num_local_experts", "num_experts", "n_routed_experts", default=0)
    topk = _int(cfg, field, "num_experts_per_tok", "experts_per_token", default=0)
    moe_inter = _int(cfg, field, "moe_intermediate_size", default=0) if experts else 0
    inter = _int(cfg, field, "intermediate_size", default=moe_inter or 0)
    if experts and not moe_inter:
        moe_inter = inter  # Mixtral, gpt-oss: every layer's experts have intermediate_size
    shared = _int(cfg, field, "n_shared_experts", default=0)
    if "shared_expert_intermediate_size" in cfg and cfg["shared_expert_intermediate_size"]:
        shared = max(1, round(cfg["shared_expert_intermediate_size"] / max(moe_inter, 1)))
    dense_layers = _int(cfg, field, "first_k_dense_replace", default=0)
    kv_override = 0.0
    if "kv_lora_rank" in cfg and cfg["kv_lora_rank"]:  # MLA: one latent + the rope key per token and layer
        lat = _int(cfg, field, "kv_lora_rank") + _int(cfg, field, "qk_rope_head_dim", default=64)
        kv_override = float(layers * lat * DTYPE_BYTES.get(kv_dtype, 2.0))
        head_dim = _int(cfg, field, "v_head_dim", default=128)
    qcfg = cfg.get("quantization_config") or {}
    method = qcfg.get("quant_method") if isinstance(qcfg, Mapping) else None
    wdtype = {"fp8": "fp8", "mxfp4": "mxfp4"}.get(str(method), "bf16")
    if method not in (None, "fp8", "mxfp4"):
        raise InputError(f"{field}.quantization_config.quant_method",
                         f"{qcfg.get('quant_method')!r} weights cannot be expressed (bf16, fp8 or mxfp4 only)")
    if kv_dtype not in DTYPE_BYTES:
        raise InputError("kv_dtype", f"unknown KV-cache dtype {kv_dtype!r}", hint="bf16 or fp8")
    arch = ModelArch(name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                     intermediate=inter or moe_inter, vocab=vocab, weight_dtype=wdtype, kv_dtype=kv_dtype,
                     experts=experts, experts_per_token=topk if experts else 0, moe_intermediate=moe_inter,
                     shared_experts=shared if experts else 0, dense_layers=dense_layers if experts else 0,
                     kv_bytes_per_token_override=kv_override,
                     tied_embeddings=bool(cfg.get("tie_word_embeddings", False)), source=source)
    if layers < 1:
        raise InputError(f"{field}.num_hidden_layers", f"must be >= 1, got {layers}")
    if heads < 1:
        raise InputError(f"{field}.num_attention_heads", f"must be >= 1, got {heads}")
    if kv_heads < 1 or heads % kv_heads:
        raise InputError(f"{field}.num_key_value_heads",
                         f"{kv_heads} KV heads do not divide {heads} attention heads")
    check_arch(arch, field=field)
    if not math.isfinite(arch.params):
        raise InputError(field, "parameter count is not finite")
    return arch
