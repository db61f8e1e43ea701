"""The model catalogue (issue 22, part 1): common open families as their Hugging Face ``config.json`` fields.

Each entry is the subset of the published ``config.json`` the time model reads, with its provenance (the Hugging
Face repository whose ``config.json`` it copies). :func:`get_model` builds the :class:`ModelArch` through
:func:`kvcore.profiles.arch.from_hf_config`, so a catalogue entry and a user's ``config.json`` take the same path.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from kvcore.errors import InputError
from kvcore.profiles.arch import ModelArch, from_hf_config

_LLAMA = {"architectures": ["LlamaForCausalLM"], "num_attention_heads": 64, "num_key_value_heads": 8,
          "vocab_size": 128256}
_QWEN3_MOE = {"architectures": ["Qwen3MoeForCausalLM"], "head_dim": 128, "vocab_size": 151936}
_GPT_OSS = {"architectures": ["GptOssForCausalLM"], "hidden_size": 2880, "intermediate_size": 2880,
            "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 201088,
            "num_experts_per_tok": 4, "quantization_config": {"quant_method": "mxfp4"}}

CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    # legacy names, the Llama-2/3 shapes the planner has always used (Llama-3 vocabulary)
    "llama-70b": ("meta-llama/Meta-Llama-3-70B", {**_LLAMA, "num_hidden_layers": 80, "hidden_size": 8192,
                                                  "intermediate_size": 28672}),
    "llama-8b": ("meta-llama/Meta-Llama-3-8B", {**_LLAMA, "num_hidden_layers": 32, "hidden_size": 4096,
                                                "num_attention_heads": 32, "intermediate_size": 14336}),
    "llama-2-70b": ("meta-llama/Llama-2-70b-hf", {**_LLAMA, "num_hidden_layers": 80, "hidden_size": 8192,
                                                  "intermediate_size": 28672, "vocab_size": 32000}),
    "llama-3.1-8b": ("meta-llama/Llama-3.1-8B", {**_LLAMA, "num_hidden_layers": 32, "hidden_size": 4096,
                                                 "num_attention_heads": 32, "intermediate_size": 14336}),
    "llama-3.1-70b": ("meta-llama/Llama-3.1-70B", {**_LLAMA, "num_hidden_layers": 80, "hidden_size": 8192,
                                                   "intermediate_size": 28672}),
    "llama-3.1-405b": ("meta-llama/Llama-3.1-405B", {**_LLAMA, "num_hidden_layers": 126, "hidden_size": 16384,
                                                     "num_attention_heads": 128, "intermediate_size": 53248}),
    "llama-3.3-70b": ("meta-llama/Llama-3.3-70B-Instruct", {**_LLAMA, "num_hidden_layers": 80,
                                                            "hidden_size": 8192, "intermediate_size": 28672}),
    "qwen2.5-7b": ("Qwen/Qwen2.5-7B", {"architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": 28,
                                       "hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4,
                                       "intermediate_size": 18944, "vocab_size": 152064}),
    "qwen2.5-72b": ("Qwen/Qwen2.5-72B", {"architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": 80,
                                         "hidden_size": 8192, "num_attention_heads": 64, "num_key_value_heads": 8,
                                         "intermediate_size": 29568, "vocab_size": 152064}),
    "qwen3-8b": ("Qwen/Qwen3-8B", {"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 36,
                                   "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
                                   "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936}),
    "qwen3-32b": ("Qwen/Qwen3-32B", {"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 64,
                                     "hidden_size": 5120, "num_attention_heads": 64, "num_key_value_heads": 8,
                                     "head_dim": 128, "intermediate_size": 25600, "vocab_size": 151936}),
    "qwen3-30b-a3b": ("Qwen/Qwen3-30B-A3B", {**_QWEN3_MOE, "num_hidden_layers": 48, "hidden_size": 2048,
                                             "num_attention_heads": 32, "num_key_value_heads": 4,
                                             "intermediate_size": 6144, "moe_intermediate_size": 768,
                                             "num_experts": 128, "num_experts_per_tok": 8}),
    "qwen3-235b-a22b": ("Qwen/Qwen3-235B-A22B", {**_QWEN3_MOE, "num_hidden_layers": 94, "hidden_size": 4096,
                                                 "num_attention_heads": 64, "num_key_value_heads": 4,
                                                 "intermediate_size": 12288, "moe_intermediate_size": 1536,
                                                 "num_experts": 128, "num_experts_per_tok": 8}),
    "mistral-7b": ("mistralai/Mistral-7B-v0.3", {"architectures": ["MistralForCausalLM"], "num_hidden_layers": 32,
                                                 "hidden_size": 4096, "num_attention_heads": 32,
                                                 "num_key_value_heads": 8, "intermediate_size": 14336,
                                                 "vocab_size": 32768}),
    "mixtral-8x7b": ("mistralai/Mixtral-8x7B-v0.1", {"architectures": ["MixtralForCausalLM"],
                                                     "num_hidden_layers": 32, "hidden_size": 4096,
                                                     "num_attention_heads": 32, "num_key_value_heads": 8,
                                                     "intermediate_size": 14336, "num_local_experts": 8,
                                                     "num_experts_per_tok": 2, "vocab_size": 32000}),
    "mixtral-8x22b": ("mistralai/Mixtral-8x22B-v0.1", {"architectures": ["MixtralForCausalLM"],
                                                       "num_hidden_layers": 56, "hidden_size": 6144,
                                                       "num_attention_heads": 48, "num_key_value_heads": 8,
                                                       "intermediate_size": 16384, "num_local_experts": 8,
                                                       "num_experts_per_tok": 2, "vocab_size": 32768}),
    "deepseek-v3": ("deepseek-ai/DeepSeek-V3", {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61,
                                                "hidden_size": 7168, "num_attention_heads": 128,
                                                "num_key_value_heads": 128, "intermediate_size": 18432,
                                                "moe_intermediate_size": 2048, "n_routed_experts": 256,
                                                "num_experts_per_tok": 8, "n_shared_experts": 1,
                                                "first_k_dense_replace": 3, "kv_lora_rank": 512,
                                                "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
                                                "quantization_config": {"quant_method": "fp8"}}),
    "gpt-oss-120b": ("openai/gpt-oss-120b", {**_GPT_OSS, "num_hidden_layers": 36, "num_local_experts": 128}),
    "gpt-oss-20b": ("openai/gpt-oss-20b", {**_GPT_OSS, "num_hidden_layers": 24, "num_local_experts": 32}),
}
"""name -> (Hugging Face repository whose config.json the fields copy, the fields)."""


@lru_cache(maxsize=256)
def get_model(name: str, kv_dtype: str = "bf16", *, field: str = "model") -> ModelArch:
    if name not in CONFIGS:
        raise InputError(field, f"unknown model {name!r}", hint="known: " + ", ".join(CONFIGS))
    repo, cfg = CONFIGS[name]
    return from_hf_config(cfg, name=name, field=field, kv_dtype=kv_dtype,
                          source=f"huggingface.co/{repo} config.json")
