"""How long an engine step of the layout a Pod asks for takes, and how many KV blocks that layout holds, from
kvcore's measured step-time model (:mod:`kvcore.profiles.steptime`); pure (kvcore only, no vLLM).

The token-fabricating executor (:mod:`kvplan_dev.vllm_fake`) reads :data:`ENV` (the JSON of a
:class:`ClockSpec`) and sleeps :meth:`StepClock.seconds` of each step it fabricates, times ``time_scale``: a twin
Pod asking for TP=4 on an A100-80GB runs each step as long as that layout's step (scaled), so a re-layout changes
the engine's speed as it would on GPUs. ``kv_scale`` shrinks the KV cache (and so the load that fills it) to what
fits this machine; the block count is :meth:`StepClock.kv_blocks`.

With ``law`` set (the coefficients of a :class:`kvcore.profiles.online.StepLaw`), every step sleeps that linear law
instead: ``intercept + per_seq * B + per_context_token * S + per_prefill_token * P`` (B decoding sequences, S the sum
of their contexts, P the step's prefill tokens), times ``time_scale``. The online step-time fit is tested against
an engine sleeping a known law (tests/vllm/test_step_fit_online.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from typing import Sequence

from kvcore.profiles.calibrate import Coefficients
from kvcore.profiles.gpus import get_gpu
from kvcore.profiles.models import get_model
from kvcore.profiles.online import StepLaw
from kvcore.profiles.steptime import Layout, kv_tokens, layout, step_time

ENV = "KVPLAN_FAKE_STEP_CLOCK"
"""Environment variable the executor reads (in the engine-core process): a :class:`ClockSpec` as JSON."""


@dataclass(frozen=True)
class ClockSpec:
    """The layout a Pod asks for and the twin's scales (``time_scale``: emulated seconds per modelled second;
    ``kv_scale``: the share of the layout's KV capacity the engine gets)."""

    gpu: str
    model: str
    tp: int = 1
    pp: int = 1
    time_scale: float = 1.0
    kv_scale: float = 1.0
    coeff: Coefficients | None = None
    """The GPU family's fitted kernel coefficients. The agent fits them (scipy, in kvplan's environment) and the
    engine process reads them from :data:`ENV`, so vLLM's environment needs no scipy."""
    law: dict[str, float] | None = None
    """A :class:`~kvcore.profiles.online.StepLaw`'s fields: each step sleeps that law instead of the layout's."""

    def fitted(self) -> "ClockSpec":
        """This spec with its GPU family's coefficients filled in."""
        from kvcore.profiles.calibrate import fit

        return replace(self, coeff=self.coeff or fit(get_gpu(self.gpu, field="clock.gpu").family))

    def to_env(self) -> str:
        data = asdict(self)
        if self.coeff is not None:
            data["coeff"]["allreduce"] = {str(k): list(v) for k, v in self.coeff.allreduce.items()}
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_env(cls, text: str) -> "ClockSpec":
        data = json.loads(text)
        coeff = None
        if data.get("coeff"):
            c = dict(data["coeff"])
            c["allreduce"] = {int(k): (float(a), float(b)) for k, (a, b) in c["allreduce"].items()}
            c["p2p"] = (float(c["p2p"][0]), float(c["p2p"][1]))
            coeff = Coefficients(**c)
        law = {str(k): float(v) for k, v in data["law"].items()} if data.get("law") else None
        return cls(str(data["gpu"]), str(data["model"]), int(data.get("tp", 1)), int(data.get("pp", 1)),
                   float(data.get("time_scale", 1.0)), float(data.get("kv_scale", 1.0)), coeff, law)


class StepClock:
    """Seconds per step and KV blocks for one :class:`ClockSpec` (raises kvcore's ``InputError`` for an unknown
    GPU or model, or a layout the model cannot take)."""

    def __init__(self, spec: ClockSpec) -> None:
        if not (spec.time_scale >= 0 and math.isfinite(spec.time_scale)):
            raise ValueError(f"time_scale={spec.time_scale}: must be a finite number >= 0")
        if not 0 < spec.kv_scale <= 1:
            raise ValueError(f"kv_scale={spec.kv_scale}: must be in (0, 1]")
        self.spec = spec
        self.law = StepLaw(**spec.law) if spec.law else None
        # a law needs no layout (nor the kernel fit, whose scipy vLLM's environment lacks)
        self.layout: Layout | None = None if self.law is not None else layout(
            get_gpu(spec.gpu, field="clock.gpu"), get_model(spec.model, field="clock.model"), spec.tp, spec.pp,
            field="clock", coeff=spec.coeff)

    def seconds(self, decode_contexts: Sequence[float], prefill: Sequence[tuple[float, float]]) -> float:
        """Emulated seconds of a step: ``decode_contexts`` each decoding sequence's context (tokens),
        ``prefill`` (chunk tokens, context before the chunk) pairs."""
        if not decode_contexts and not prefill:
            return 0.0
        if self.law is not None:
            return self.law.step(float(len(decode_contexts)), float(sum(decode_contexts)),
                                 float(sum(t for t, _ in prefill))) * self.spec.time_scale
        assert self.layout is not None
        return step_time(self.layout, list(decode_contexts), list(prefill)) * self.spec.time_scale

    def kv_blocks(self, block_size: int, max_model_len: int) -> int:
        """GPU blocks of the layout's KV capacity times ``kv_scale``, at least what one ``max_model_len`` request
        and vLLM's null block need (vLLM refuses to start otherwise)."""
        if self.layout is None:
            raise ValueError("a step law gives no KV capacity: give the engine its blocks")
        blocks = int(kv_tokens(self.layout) * self.spec.kv_scale) // block_size
        return max(blocks, math.ceil(max_model_len / block_size) + 1)


__all__ = ["ENV", "ClockSpec", "StepClock"]
