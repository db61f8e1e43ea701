"""kvplan's reservation gate for a vLLM-style paged KV cache: the one admission rule that kvplan's vLLM scheduler
plugin (``kvplan_vllm``) enforces inside vLLM and the vLLM engine model (``kvcore.sim``) reproduces.

vLLM V1 admits a waiting request as soon as its prompt fits and grows KV blocks on demand. The gate adds one
condition before that: the free blocks must cover what every running request may still claim up to its class's
reservation, plus what the new request would hold up to its own.

Definitions, all in tokens unless said (``B`` = block size, tokens per block; ``blocks(t) = ceil(t / B)``):

- ``y``: the class's reservation, output tokens (0 = reserve nothing: the gate then adds nothing to vLLM's rule).
- ``P``: the request's prompt tokens; ``G``: output tokens generated so far (0 for a new request; a preempted
  request recomputes ``P + G``); ``C``: prompt tokens served from the prefix cache at admission.
- A request's **reserved footprint** is ``F = P + max(y, G)``: what it holds if it stops at its reservation, and
  never less than what it already has.
- A **running** request's outstanding claim is ``max(0, blocks(F) - allocated_blocks)``, blocks.
- A **waiting** (new or preempted) request's own claim is ``max(0, blocks(F) - cached_blocks)``, blocks, where
  ``cached_blocks = C // B`` (only whole cached blocks are reused).

A reservation is capped at what the request can ever hold: ``min(y, capacity - P)`` (never below 0), capacity
being ``min(max_model_len, usable blocks x B)`` tokens, so a reservation larger than the whole cache does not block
a request forever (:func:`capped_reserve`).

**Rule.** Admit the head of the waiting queue only if
``free_blocks >= sum(running outstanding claims) + own claim``; otherwise stop admitting in this step (head-of-line
blocking, like vLLM's watermark and a prompt that does not fit). ``free_blocks`` is vLLM's free count less the
prefix-cache hit blocks no request holds (vLLM counts them as free; admitting the request takes them). vLLM's own
checks (``max_num_seqs``, the token budget, the watermark, the allocation itself) still apply on top.
"""

from __future__ import annotations

from collections.abc import Iterable


def blocks(tokens: int, block_size: int) -> int:
    """``ceil(tokens / block_size)`` for ``tokens >= 0``."""
    return -(-max(0, int(tokens)) // int(block_size))


def capped_reserve(reserve: int, prompt: int, capacity_tokens: int) -> int:
    """``y`` capped at what a request of ``prompt`` tokens can ever hold, ``capacity_tokens - prompt`` (>= 0)."""
    return max(0, min(int(reserve), int(capacity_tokens) - int(prompt)))


def footprint(prompt: int, generated: int, reserve: int) -> int:
    """Reserved footprint ``P + max(y, G)``, tokens."""
    return int(prompt) + max(int(reserve), int(generated))


def running_claim(prompt: int, generated: int, reserve: int, allocated_blocks: int, block_size: int) -> int:
    """Blocks a running request may still claim up to its reservation (never negative)."""
    return max(0, blocks(footprint(prompt, generated, reserve), block_size) - int(allocated_blocks))


def waiting_claim(prompt: int, generated: int, reserve: int, cached_tokens: int, block_size: int) -> int:
    """Blocks a waiting (new or preempted) request would hold up to its reservation, net of whole cached blocks."""
    return max(0, blocks(footprint(prompt, generated, reserve), block_size) - int(cached_tokens) // int(block_size))


def admits(free_blocks: int, running_claims: Iterable[int], own_claim: int) -> bool:
    """The gate: free blocks cover every running claim plus the candidate's own."""
    return int(free_blocks) >= sum(int(c) for c in running_claims) + int(own_claim)
