"""Settings of the vLLM engine model: one :class:`EngineConfig` per serving group (the flags of its ``vllm serve``).

Defaults are vLLM 0.33's for an OpenAI API server on an A100 (``EngineArgs.get_batch_defaults``): 16-token blocks,
``max_num_seqs`` 256, ``max_num_batched_tokens`` 2048 with chunked prefill, ``fcfs``, no watermark, prefix caching on.

:class:`StepTiming` turns a step's shape into its duration in **integer nanoseconds**, so the fast and the reference
engine model compute bit-identical clocks (a run of k equal steps is ``k * dt`` exactly, not a float sum).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvcore.bounds import MAX_CONTEXT_S_PER_TOKEN
from kvcore.errors import InputError

NS_PER_S = 1_000_000_000


class EngineConfig(BaseModel):
    """One group's vLLM engine settings. Frozen; unknown keys rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    block_size: int = Field(default=16, ge=1)
    """Tokens per KV block (``--block-size``; vLLM's default 16)."""
    num_blocks: int | None = Field(default=None, ge=2)
    """KV blocks per replica (``--num-gpu-blocks-override``). None: ``floor(kv_capacity_tokens / block_size)`` of
    the group. vLLM keeps one of them as its null block, so ``num_blocks - 1`` hold requests."""
    watermark: float = Field(default=0.0, ge=0.0, lt=1.0)
    """``--watermark`` W: admitting a waiting or preempted request must leave ``int(W * num_blocks)`` blocks free,
    checked only while some request is running. 0 (vLLM's default) turns it off."""
    max_num_seqs: int = Field(default=256, ge=1)
    """``--max-num-seqs``: at most this many running requests (vLLM's default on an A100: 256)."""
    max_num_batched_tokens: int = Field(default=2048, ge=1)
    """``--max-num-batched-tokens``: tokens per step; longer prompts are prefilled in chunks (vLLM's API-server
    default on an A100: 2048)."""
    policy: Literal["fcfs", "priority"] = "fcfs"
    """``--scheduling-policy``. ``priority`` orders the waiting queue and picks preemption victims by
    ``(priority, arrival)``; smaller priority values are served first."""
    prefix_caching: bool = True
    """``--enable-prefix-caching`` (on by default in vLLM 0.33): block-hash prefix caching with LRU eviction of
    freed blocks. A preempted request then finds its own blocks again unless they were reused meanwhile."""
    admission: Literal["vllm", "gate"] = "vllm"
    """``vllm``: stock admission. ``gate``: kvplan's reservation gate (:mod:`kvcore.sim.gate`) in front of it, with
    the policy's per-class reservations, as kvplan's scheduler plugin enforces inside vLLM."""
    max_model_len: int | None = Field(default=None, ge=1)
    """``--max-model-len``: the most tokens a request may hold. The gate caps a reservation at what a request can
    ever hold, ``min(max_model_len, (num_blocks - 1) * block_size) - prompt``, as kvplan's scheduler plugin does.
    None: the KV cache alone."""
    class_priority: tuple[int, ...] | None = None
    """Per-class request priority sent with ``--scheduling-policy priority`` (index = class). None: all 0."""

    @model_validator(mode="after")
    def _budget_covers_batch(self) -> EngineConfig:
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_num_seqs "
                             f"({self.max_num_seqs}), as vLLM requires")
        return self

    def blocks_for(self, kv_capacity_tokens: int) -> int:
        """Blocks per replica for a group of ``kv_capacity_tokens`` tokens (``num_blocks`` when set)."""
        if self.num_blocks is not None:
            return self.num_blocks
        n = int(kv_capacity_tokens) // self.block_size
        if n < 2:
            raise InputError("engine.num_blocks", f"{kv_capacity_tokens} tokens make {n} blocks of {self.block_size}; "
                                                  "vLLM needs at least 2 (one is its null block)")
        return n

    def watermark_blocks(self, num_blocks: int) -> int:
        """``int(W * num_blocks)``, exactly as vLLM's ``KVCacheManager`` computes it."""
        return int(self.watermark * num_blocks)

    def priority_of(self, cls: int) -> int:
        """The priority a class-``cls`` request is sent with."""
        if self.class_priority is None:
            return 0
        if cls >= len(self.class_priority):
            raise InputError("engine.class_priority", f"has {len(self.class_priority)} entries, class {cls} needs one")
        return int(self.class_priority[cls])


Knots = tuple[tuple[int, float], ...]
"""(batch, seconds) points of a decode-step curve, batches strictly increasing from 1."""


@dataclass(frozen=True, slots=True)
class StepTiming:
    """Duration of one engine step, integer nanoseconds::

        step_ns = max(1, round(1e9 * (d(B) - c * n0 * B + (T - B) * t_prefill))) + floor((S * c_ps + 500) / 1000)

    B is the number of requests scheduled in the step, T the tokens scheduled and S their context: the sum over the
    scheduled requests of the tokens each holds in the KV cache once the step has computed (a decoder at
    ``prompt + output`` tokens reads its whole context). A decode step schedules one token per request (T = B) and,
    at the nominal context ``n0`` (1,024 tokens) per sequence, costs ``d(B)``: the profile's line ``t0 + t1 * B``,
    or, when ``decode_knots`` are given (the measured step-time model's curve,
    :attr:`kvcore.profiles.Profile.decode_knots`), the curve through them, linear between knots and along the last
    segment past the last one. Every further token (prompt, chunk or recompute) costs ``t_prefill = 1 /
    prefill_tokens_per_s``. ``c = context_s_per_token`` (seconds per step per context token: the KV read of one
    token) moves the step with the context; it is taken as ``c_ps = round(1e12 * c)`` whole picoseconds, so a run
    of decode steps, whose context grows by B tokens a step, sums exactly (:func:`floor_sum`). ``c = 0`` (the
    default) is the context-free model. ``StepTiming(1.0, 0.0, 0.0)`` makes every step last exactly one second,
    which is how the parity tier counts steps.
    """

    t0_s: float
    t1_s: float
    prefill_s_per_token: float
    decode_knots: Knots = ()
    context_s_per_token: float = 0.0
    nominal_context: int = 1024
    context_ps: int = field(init=False, repr=False, compare=False)
    """``c`` in whole picoseconds per context token per step (derived from ``context_s_per_token``)."""

    def __post_init__(self) -> None:
        for name in ("t0_s", "t1_s", "prefill_s_per_token", "context_s_per_token"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise InputError(f"timing.{name}", f"must be finite and >= 0, got {v}")
        if self.t0_s <= 0:
            raise InputError("timing.t0_s", "must be > 0 (a step takes time)")
        check_knots(self.decode_knots, field="timing.decode_knots")
        if self.context_s_per_token > MAX_CONTEXT_S_PER_TOKEN:
            raise InputError("timing.context_s_per_token", f"{self.context_s_per_token} s per context token per step "
                                                           f"is not a KV read time (at most {MAX_CONTEXT_S_PER_TOKEN})")
        if self.nominal_context < 0:
            raise InputError("timing.nominal_context", f"must be >= 0, got {self.nominal_context}")
        object.__setattr__(self, "context_ps", round(self.context_s_per_token * 1e12))

    def decode_s(self, batch: float) -> float:
        """Seconds of a decode step of ``batch`` sequences (``d(B)`` above)."""
        k = self.decode_knots
        if not k:
            return self.t0_s + self.t1_s * batch
        if len(k) == 1 or batch <= k[0][0]:
            return k[0][1]
        i = min(bisect.bisect_left(k, (batch, -math.inf)), len(k) - 1)  # the segment batch falls in, or the last
        (b0, s0), (b1, s1) = k[i - 1], k[i]
        return max(s0 + (s1 - s0) * (batch - b0) / (b1 - b0), min(s0, s1))

    def base_ns(self, batch: int, tokens: int) -> int:
        """The step's duration without its context term, integer nanoseconds (>= 1)."""
        s = self.decode_s(batch)
        if self.context_ps:
            s -= self.context_ps * 1e-12 * self.nominal_context * batch
        return max(1, round(NS_PER_S * (s + (tokens - batch) * self.prefill_s_per_token)))

    def context_ns(self, context: int) -> int:
        """The context term of a step whose scheduled requests hold ``context`` tokens, integer nanoseconds."""
        return (context * self.context_ps + 500) // 1000

    def step_ns(self, batch: int, tokens: int, context: int) -> int:
        """Duration of a step of ``batch`` requests, ``tokens`` tokens and ``context`` tokens of context, integer
        nanoseconds (>= 1)."""
        return self.base_ns(batch, tokens) + self.context_ns(context)


def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """``sum(floor((a * i + b) / m) for i in range(n))`` for integers ``n >= 0, m >= 1, a >= 0, b >= 0``, in
    O(log m) steps (the Euclid-like reduction of the lattice-point count under a line)."""
    total = 0
    while True:
        if a >= m:
            total += n * (n - 1) // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        top = a * n + b
        if top < m:
            return total
        n, b = divmod(top, m)
        m, a = a, m


def check_knots(knots: Knots, *, field: str) -> None:
    """Refuse knots whose batches are not whole, at least 1 and strictly increasing, or whose times are not finite
    and > 0 (seconds)."""
    last = 0
    for j, knot in enumerate(knots):
        if len(knot) != 2:
            raise InputError(f"{field}[{j}]", "must be a (batch, seconds) pair")
        b, t = knot
        if not (isinstance(b, int) and b > last):
            raise InputError(f"{field}[{j}]", f"batch {b!r} must be a whole number above {last}")
        if not (math.isfinite(t) and t > 0):
            raise InputError(f"{field}[{j}]", f"seconds must be finite and > 0, got {t}")
        last = b
