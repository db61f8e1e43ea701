"""The step-time model from measurements (issue 22, part 3).

One engine step processes ``n = B + P`` tokens: B decoding sequences (one token each, each with its own context)
and P prefill tokens (chunked prefill: chunks of prompts, each with the context before it). Per layer, on one GPU
of a TP group::

    linear   = sum over qkv, o, gate+up, down of  max(bytes / (eta_bw*BW), flops / (eta_fl*F)) + c_lin
    elem     = e0 + e1 * n * (hidden + intermediate/TP)
    attn     = KV bytes read (every sequence's own context) / (eta_bw*BW)
               + prefill attention FLOPs 4 * heads/TP * head_dim * sum q*(c + q/2) / (eta_fl*F) + c_lin
    comm     = 2 * (alpha_ar(TP) + n*hidden*2 / beta_ar(TP))                    (TP > 1)

A step is ``PP * stage(n / PP) + (PP-1) * (alpha_p2p + n*hidden*2/beta_p2p) + lm_head + cpu``: vLLM splits the
batch into PP micro-batches that flow through the stages. MoE layers read the weights of the distinct experts the
step's tokens touch (E * (1 - (1 - k/E)^n) of E) and compute only the active ones. eta_bw, eta_fl, c_lin, e0, e1,
alpha and beta are fitted on vidur's measured A100/H100 operator and NCCL profiles (:mod:`kvcore.profiles.calibrate`);
a GPU type without vidur data uses its family's efficiencies with its own datasheet peaks.

vidur timed its kernels one by one, launched eagerly, and NCCL's collectives alone. vLLM runs a step of at most
``min(2 * max_num_seqs, 512)`` tokens inside a captured CUDA graph, where a kernel costs no launch and a small
all-reduce over NVLink or xGMI is vLLM's own one-shot kernel. Such a step takes :class:`StepCosts` (``GRAPH``) in
place of c_lin and alpha_ar, and its linear layers add the matmul to the weight read, as vLLM's own runs at batch
3-222 measure them::

    linear (in a graph) = max(bytes / (eta_bw*BW) + compute_share * flops / F, flops / (eta_fl*F)) + kernel_s

Every step pays its CPU share ``GRAPH.cpu_s``. The four figures are fitted on the decode steps of published
end-to-end vLLM runs (:mod:`kvcore.profiles.published`), not on vidur's data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from kvcore.errors import InputError
from kvcore.profiles.arch import ModelArch, check_arch, check_tp
from kvcore.profiles.calibrate import Coefficients, fit
from kvcore.profiles.gpus import GiB, GpuType


@dataclass(frozen=True)
class StepCosts:
    """The fixed costs of a step that vidur's kernel profiles cannot show (seconds)."""

    kernel_s: float
    """One kernel inside a captured CUDA graph (replaces c_lin, which holds an eager launch)."""
    allreduce_s: float
    """Latency of one small all-reduce inside a graph over NVLink or xGMI (replaces NCCL's alpha_ar)."""
    cpu_s: float
    """CPU time per step that the GPU waits for (scheduling, input preparation, sampling), every step."""
    compute_share: float = 0.0
    """The share of a linear layer's matmul time at the GPU's peak FLOPS that adds to its weight read inside a
    graph (dimensionless): ``max(read + share * flops / peak, flops / (eta_fl * peak))``; 0 keeps vidur's larger of
    the two."""


GRAPH = StepCosts(kernel_s=2.7e-6, allreduce_s=1.7e-5, cpu_s=2.1e-4, compute_share=1.14)
"""Fitted (least squares on log error) on the 34 decode phases, batch 1 to 222, of the seven ``fit`` runs in
``kvcore/data/profiling/published_vllm_runs.json`` (:func:`kvcore.profiles.published.fit_step_costs`); a fit that
leaves one run out predicts it within 13%: left without the A100 or the H100 run at batch up to 222, the compute
share comes out 0.97 or 1.20 (docs/model.md)."""


@dataclass(frozen=True)
class FirstTokenCost:
    """What a vLLM server adds to a request's first token beyond the engine's steps (seconds): the request's HTTP
    round trip, tokenisation, the first detokenisation and the stream (``base_s``), and a part that grows with the
    layout's GPUs (``per_gpu_s``: the driver hands each step's inputs to every worker, and the prefill's large
    all-reduces; the published runs cannot separate the causes)."""

    base_s: float
    per_gpu_s: float

    def seconds(self, gpus: int) -> float:
        return self.base_s + self.per_gpu_s * gpus


FIRST_TOKEN = FirstTokenCost(base_s=2.35e-2, per_gpu_s=2.95e-3)
"""Fitted (least squares) on the first-token latencies of the five 10-prompt published vLLM fit runs
(:func:`kvcore.profiles.published.fit_first_token`); a fit without one of them predicts it within 6%, and the two
check runs no fit sees come out within 3% (docs/model.md). Measured on the vLLM server of September 2024 those runs
used; for another version it is a guess."""
GRAPH_MAX_TOKENS = 512
"""vLLM's largest CUDA-graph capture size: ``min(2 * max_num_seqs, 512)`` tokens."""
GPU_MEMORY_UTILIZATION = 0.90
NOMINAL_CONTEXT = 1024
_REF_LINK = {"a100": 300e9, "h100": 450e9}
"""One-direction NVLink bandwidth of the DGX parts vidur profiled NCCL on; other links scale beta by the ratio."""


@dataclass(frozen=True)
class Layout:
    gpu: GpuType
    model: ModelArch
    tp: int
    pp: int
    coeff: Coefficients
    costs: StepCosts = GRAPH

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @cached_property
    def graph_coeff(self) -> Coefficients:
        """The coefficients of a step inside a CUDA graph: ``costs.kernel_s`` per kernel; over NVLink or xGMI,
        ``costs.allreduce_s`` per all-reduce (vLLM's custom all-reduce needs a full peer-to-peer link; over PCIe
        NCCL's latency stays)."""
        ar = self.coeff.allreduce
        if self.gpu.interconnect != "pcie":
            ar = {g: (self.costs.allreduce_s, beta) for g, (_, beta) in ar.items()}
        return replace(self.coeff, c_lin_s=self.costs.kernel_s, allreduce=ar, compute_share=self.costs.compute_share)

    @cached_property
    def graph_max_tokens(self) -> int:
        """vLLM's largest CUDA-graph capture size on this GPU: ``min(2 * max_num_seqs, 512)`` tokens."""
        return min(2 * self.gpu.vllm_max_num_seqs, GRAPH_MAX_TOKENS)

    def step_coeff(self, tokens: float) -> Coefficients:
        """The coefficients of a step of ``tokens`` tokens: graphed up to vLLM's capture size, else eager."""
        return self.graph_coeff if tokens <= self.graph_max_tokens else self.coeff


def layout(gpu: GpuType, model: ModelArch, tp: int, pp: int, *, field: str = "profile",
           coeff: Coefficients | None = None, costs: StepCosts = GRAPH) -> Layout:
    """Check a layout (TP/PP against the heads, fp8 against the GPU) and bind its calibrated coefficients
    (``coeff``: coefficients already fitted, e.g. in another process; default: the GPU family's fit) and its
    graph-step costs (``costs``)."""
    check_arch(model, field=f"{field}.model")
    if tp < 1 or pp < 1:
        raise InputError(f"{field}.tp" if tp < 1 else f"{field}.pp", "must be >= 1")
    if gpu.memory_bytes <= 0:
        raise InputError(f"{field}.gpu.memory_bytes", "a GPU with no memory cannot hold weights or KV cache")
    check_tp(model, tp, field=f"{field}.tp")
    if pp > model.layers:
        raise InputError(f"{field}.pp", f"PP={pp} exceeds the {model.layers} layers")
    if model.kv_dtype == "fp8" and not gpu.has_fp8:
        raise InputError(f"{field}.kv_dtype", f"fp8 KV cache needs fp8 support; {gpu.name} has none")
    if model.weight_dtype == "fp8" and not gpu.has_fp8:
        raise InputError(f"{field}.model.weight_dtype", f"fp8 weights need fp8 support; {gpu.name} has none")
    return Layout(gpu, model, tp, pp, coeff if coeff is not None else fit(gpu.family), costs)


def activation_reserve_bytes(lay: Layout) -> float:
    """Per-GPU memory vLLM keeps outside weights and KV: 2 GiB (CUDA graphs, NCCL, allocator) plus fp32 logits of a
    full chunk, ``max_num_batched_tokens * vocab / TP * 4`` bytes."""
    return 2 * GiB + lay.gpu.vllm_max_num_batched_tokens * lay.model.vocab / lay.tp * 4.0


def kv_tokens(lay: Layout) -> float:
    """KV capacity of one replica, tokens (0 when the weights do not fit)."""
    m, n = lay.model, lay.gpus
    free = lay.gpu.memory_bytes * GPU_MEMORY_UTILIZATION - m.weight_bytes / n - activation_reserve_bytes(lay)
    return float(max(0, math.floor(free * n / m.kv_bytes_per_token)))


def check_fits(lay: Layout, *, field: str = "profile") -> None:
    if kv_tokens(lay) <= 0:
        need = lay.model.weight_bytes / lay.gpus / 1e9
        usable = lay.gpu.memory_bytes * GPU_MEMORY_UTILIZATION / 1e9
        raise InputError(f"{field}.tp", f"the weights of {lay.model.name} need {need:.1f} GB per GPU at TP={lay.tp}, "
                         f"PP={lay.pp}; {usable:.1f} GB usable on {lay.gpu.name} (less the activation reserve)")


def _linear(lay: Layout, c: Coefficients, k: float, m: float, tokens: float, *, weights: float | None = None) -> float:
    g, mod = lay.gpu, lay.model
    wb = mod.weight_bytes_per_param
    flops_peak = g.fp8_flops if (mod.weight_dtype == "fp8" and g.has_fp8) else g.bf16_flops
    nbytes = (k * m if weights is None else weights) * wb + 2.0 * tokens * (k + m)
    read, flops = nbytes / (c.eta_bw * g.hbm_bytes_s), 2.0 * tokens * k * m
    return max(read + c.compute_share * flops / flops_peak, flops / (c.eta_fl * flops_peak)) + c.c_lin_s


def _layer(lay: Layout, c: Coefficients, n: float, kv_bytes: float, prefill_qc: float, moe_layer: bool) -> float:
    m, tp, g = lay.model, lay.tp, lay.gpu
    h, d = m.hidden, m.head_dim
    t = (_linear(lay, c, h, (m.heads + 2 * m.kv_heads) * d / tp, n)
         + _linear(lay, c, m.heads * d / tp, h, n))
    if moe_layer:
        e, k = m.experts, m.experts_per_token
        touched = e * (1.0 - (1.0 - k / e) ** max(n, 0.0)) if n > 0 else 0.0
        per = h * m.moe_intermediate / tp
        t += _linear(lay, c, h, 2 * m.moe_intermediate * k / tp, n, weights=2 * per * touched)
        t += _linear(lay, c, m.moe_intermediate * k / tp, h, n, weights=per * touched)
        if m.shared_experts:
            si = m.moe_intermediate * m.shared_experts
            t += _linear(lay, c, h, 2 * si / tp, n) + _linear(lay, c, si / tp, h, n)
        inter = m.moe_intermediate * k
    else:
        t += (_linear(lay, c, h, 2 * m.intermediate / tp, n)
              + _linear(lay, c, m.intermediate / tp, h, n))
        inter = m.intermediate
    t += c.elem0_s + c.elem1_s_per_elem * n * (h + inter / tp)
    kv_shard = min(tp, m.kv_heads) if not m.kv_bytes_per_token_override else 1
    t += kv_bytes / m.layers / kv_shard / (c.eta_bw * g.hbm_bytes_s)
    t += 4.0 * m.heads / tp * d * prefill_qc / (c.eta_fl * g.bf16_flops) + c.c_lin_s
    if tp > 1:
        t += 2.0 * c.allreduce_s(tp, n * h * 2.0, _link_scale(lay))
    return t


def _link_scale(lay: Layout) -> float:
    return lay.gpu.interconnect_bytes_s / _REF_LINK[lay.gpu.family]


def step_time(lay: Layout, decode_contexts: Sequence[float] | float = (), prefill: Sequence[tuple[float, float]] = (),
              *, batch: int | None = None) -> float:
    """Seconds of one engine step: ``decode_contexts`` the context of each decoding sequence (or, with ``batch``,
    one context shared by ``batch`` sequences); ``prefill`` (chunk tokens, context before the chunk) pairs."""
    if batch is not None:
        ctx = float(decode_contexts) if not isinstance(decode_contexts, Sequence) else NOMINAL_CONTEXT
        b, sum_ctx = float(batch), float(batch) * ctx
    else:
        seq = list(decode_contexts) if isinstance(decode_contexts, Sequence) else [float(decode_contexts)]
        b, sum_ctx = float(len(seq)), float(sum(seq))
    m, pp = lay.model, lay.pp
    p_tok = float(sum(q for q, _ in prefill))
    prefill_ctx = float(sum(cb for _, cb in prefill))
    qc = float(sum(q * (cb + q / 2.0) for q, cb in prefill))
    n = b + p_tok
    if n <= 0:
        return lay.costs.cpu_s
    c = lay.step_coeff(n)
    kv_bytes = (sum_ctx + prefill_ctx + p_tok) * m.kv_bytes_per_token
    # PP micro-batches: each stage sees n/PP tokens at a time, PP times per step
    mb = n / pp
    dense_layers = m.layers if not m.moe else m.dense_layers
    moe_layers = m.layers - dense_layers
    per_mb = dense_layers * _layer(lay, c, mb, kv_bytes / pp, qc / pp, False) / pp if dense_layers else 0.0
    if moe_layers:
        per_mb += moe_layers * _layer(lay, c, mb, kv_bytes / pp, qc / pp, True) / pp
    t = pp * per_mb
    if pp > 1:
        a, beta = lay.coeff.p2p
        t += (pp - 1) * (a + mb * m.hidden * 2.0 / (beta * _link_scale(lay)))
    t += _linear(lay, c, m.hidden, m.vocab / lay.tp, b + len(prefill))
    return t + lay.costs.cpu_s


def prefill_time(lay: Layout, prompt: int) -> float:
    """Seconds to the first token of one ``prompt``-token request alone: its chunks of at most vLLM's
    ``max_num_batched_tokens`` default, one step each."""
    chunk = lay.gpu.vllm_max_num_batched_tokens
    t, done = 0.0, 0
    while done < prompt:
        q = min(chunk, prompt - done)
        t += step_time(lay, (), [(float(q), float(done))])
        done += q
    return t


def first_token_time(lay: Layout, prompt: int, cost: FirstTokenCost = FIRST_TOKEN) -> float:
    """Seconds from a ``prompt``-token request's arrival at an idle server to its first streamed token: the
    prefill's steps (:func:`prefill_time`) plus the server's own share (``cost``)."""
    return prefill_time(lay, prompt) + cost.seconds(lay.gpus)


def operating_batch(lay: Layout, context: int = NOMINAL_CONTEXT) -> int:
    return int(max(1, min(lay.gpu.vllm_max_num_seqs, kv_tokens(lay) // context)))


def tokens_per_s_per_gpu(lay: Layout, context: int = NOMINAL_CONTEXT) -> float:
    b = operating_batch(lay, context)
    return b / step_time(lay, float(context), batch=b) / lay.gpus
