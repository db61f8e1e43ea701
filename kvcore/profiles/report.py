"""One layout's profile as a JSON-able object (what ``kvcore profile --json`` prints)."""

from __future__ import annotations

from typing import Any

from kvcore.profiles.steptime import (FIRST_TOKEN, NOMINAL_CONTEXT, Layout, first_token_time, kv_tokens,
                                      operating_batch, prefill_time, step_time, tokens_per_s_per_gpu)

BATCHES = (1, 16, 32, 64, 128, 256)
CONTEXTS = (512, 2048, 8192)
PROMPTS = (128, 512, 2048, 8192)


def profile_report(lay: Layout) -> dict[str, Any]:
    g, m, c, k = lay.gpu, lay.model, lay.coeff, lay.costs
    return {
        "gpu": g.name, "model": m.name, "tp": lay.tp, "pp": lay.pp, "kv_dtype": m.kv_dtype,
        "weight_dtype": m.weight_dtype, "params": m.params, "active_params": m.active_params,
        "kv_tokens": kv_tokens(lay),
        "decode_step_s": {str(b): step_time(lay, float(NOMINAL_CONTEXT), batch=b) for b in BATCHES},
        "decode_step_s_ctx": {str(x): step_time(lay, float(x), batch=32) for x in CONTEXTS},
        "prefill_s": {str(p): prefill_time(lay, p) for p in PROMPTS},
        "first_token_s": {str(p): first_token_time(lay, p) for p in PROMPTS},
        "operating_batch": operating_batch(lay),
        "max_num_seqs": g.vllm_max_num_seqs, "max_num_batched_tokens": g.vllm_max_num_batched_tokens,
        "tokens_per_s_per_gpu": tokens_per_s_per_gpu(lay),
        "source": (f"step-time model calibrated on vidur {g.family.upper()} profiles "
                   f"(eta_bw={c.eta_bw:.3f}, eta_fl={c.eta_fl:.3f}) and, for steps inside CUDA graphs, on published "
                   f"vLLM runs ({k.kernel_s * 1e6:.1f} us per kernel, {k.allreduce_s * 1e6:.0f} us per all-reduce, "
                   f"{k.cpu_s * 1e3:.2f} ms CPU per step, matmuls adding {k.compute_share:.2f} x their peak-FLOPS "
                   f"time to the weight read); first token: the prefill plus the server's "
                   f"{FIRST_TOKEN.base_s * 1e3:.1f} ms + {FIRST_TOKEN.per_gpu_s * 1e3:.2f} ms per GPU, fitted on the "
                   f"same runs; GPU: {g.source}; model: {m.source or 'given'}"),
    }
