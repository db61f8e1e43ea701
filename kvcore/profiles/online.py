"""Step times fitted online from what a running vLLM engine exports; pure (numpy and scipy).

A **window** is one stretch of time (``W`` seconds) of one engine, as Prometheus counters show it
(:class:`StepWindow`; the operator builds them from vLLM 0.33's own series, docs/model.md "Online step-time fit"):

* ``step_s``: the mean step of the window (seconds): ``W / increase(vllm:iteration_tokens_total_count)`` (one
  sample per engine step that produced output), in a window where the engine had a running request at every
  scrape (``min_over_time(vllm:num_requests_running) >= 1``), so that it stepped all the time;
* ``decode``: decoding sequences per step: ``increase(vllm:inter_token_latency_seconds_count) / increase(iteration
  count)`` (one inter-token latency sample per decode token);
* ``prefill``: prompt tokens computed per step: ``(increase(iteration_tokens sum) -
  increase(vllm:generation_tokens_total)) / increase(iteration count)`` (each step observes its computed prompt
  tokens plus its sampled tokens);
* ``context``: KV tokens held per step: ``avg_over_time(vllm:kv_cache_usage_perc) x`` the engine's KV capacity
  (``vllm:cache_config_info``), less half a block per decoding sequence (the partly filled last block);
* ``tokens``: decode tokens in the window (its weight).

The **law** fitted is linear in those (:class:`StepLaw`, seconds)::

    step(B, S, P) = c0 + c_seq * B + c_ctx * S + c_pf * P

with B decoding sequences, S = the sum of their contexts (tokens) and P prompt tokens computed in the step. Since
every term is linear, the window means obey it too (up to the spread of B within a window). :func:`fit_step_law`
fits it by non-negative least relative squares, each window weighted by its decode tokens. When the windows do not
pin all four coefficients (one workload shape all day: B, S and P move together), it fits one factor ``s`` on the
model's own step times instead (``step ~ s * model(B, S, P)``, source ``scaled``); with too few windows, or a fit
that does not describe the windows (relative RMS residual above ``max_residual``), it returns no fit and a reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvcore.bounds import MAX_CONTEXT_S_PER_TOKEN
from kvcore.profiles import NOMINAL_CONTEXT_TOKENS, PREFILL_PROMPT_TOKENS, Profile, ProfileOverride, gpu_of
from kvcore.profiles import _arch_of
from kvcore.profiles.steptime import layout as _layout
from kvcore.profiles.steptime import step_time as _step_time

TOO_FEW_WINDOWS = "TooFewWindows"
"""Reason: fewer usable windows than ``min_windows`` (none, when no engine of the group has served)."""
UNDERDETERMINED = "Underdetermined"
"""Reason: the windows do not pin the law's coefficients, and no model was given to scale."""
POOR_FIT = "PoorFit"
"""Reason: neither the law nor the scaled model describes the windows within ``max_residual``."""

FITTED = "fitted"
SCALED = "scaled"

MIN_WINDOWS = 8
"""Fewest usable windows for a fit (4 coefficients: twice as many windows)."""
MIN_TOKENS = 50.0
"""Fewest decode tokens for a window to count (fewer: its mean step is noise)."""
MAX_CONDITION = 50.0
"""Largest condition number of the column-scaled, weighted design for the four-coefficient fit (dimensionless)."""
MAX_RESIDUAL = 0.25
"""Largest relative RMS residual of an accepted fit (dimensionless)."""


@dataclass(frozen=True)
class StepWindow:
    """One engine over one window (module docstring). Units: seconds, sequences per step, tokens per step,
    tokens, decode tokens."""

    step_s: float
    decode: float
    prefill: float
    context: float
    tokens: float

    def usable(self, min_tokens: float = MIN_TOKENS) -> bool:
        values = (self.step_s, self.decode, self.prefill, self.context, self.tokens)
        return (all(math.isfinite(v) for v in values) and self.step_s > 0 and self.decode > 0
                and self.prefill >= 0 and self.context >= 0 and self.tokens >= min_tokens)


@dataclass(frozen=True)
class StepLaw:
    """``step = intercept_s + per_seq_s * B + per_context_token_s * S + per_prefill_token_s * P`` (seconds;
    seconds per sequence, per context token, per prompt token)."""

    intercept_s: float
    per_seq_s: float
    per_context_token_s: float
    per_prefill_token_s: float

    def step(self, decode: float, context: float, prefill: float) -> float:
        return (self.intercept_s + self.per_seq_s * decode + self.per_context_token_s * context
                + self.per_prefill_token_s * prefill)

    def line(self, context: float = NOMINAL_CONTEXT_TOKENS) -> tuple[float, float]:
        """``(t0, t1)`` of the decode line ``t0 + t1*B`` at ``context`` tokens per sequence (seconds, s/seq)."""
        return self.intercept_s, self.per_seq_s + self.per_context_token_s * context

    def prefill_tokens_s(self, prompt: int = PREFILL_PROMPT_TOKENS) -> float:
        """A ``prompt``-token prompt alone in one step, over its duration (tokens/s)."""
        return prompt / (self.intercept_s + self.per_prefill_token_s * prompt)


@dataclass(frozen=True)
class StepFit:
    """The outcome for one (engine group, layout): ``source`` ``fitted`` (``law``), ``scaled`` (``scale``: measured
    over modelled step time) or empty with ``reason`` / ``message``. ``windows``: usable windows; ``tokens``: their
    decode tokens; ``residual``: relative RMS error of the accepted fit (or the best refused one)."""

    source: str
    windows: int
    tokens: float
    residual: float | None = None
    law: StepLaw | None = None
    scale: float | None = None
    reason: str = ""
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.source in (FITTED, SCALED)


Model = Callable[[float, float, float], float]
"""The model's step time (seconds) at (decode sequences, context tokens, prompt tokens) per step."""


def layout_model(gpu_type: str, model: str, tp: int, pp: int, *,
                 models: Mapping[str, Mapping[str, Any]] | None = None,
                 gpus: Mapping[str, Mapping[str, Any]] | None = None) -> Model:
    """The measured step-time model of one layout as a :data:`Model`: ``B`` sequences at the mean context
    ``S / B`` each, plus one prefill chunk of ``P`` tokens (seconds). Raises kvcore's ``InputError`` for an unknown
    GPU or model or a layout the model cannot take."""
    lay = _layout(gpu_of(gpu_type, gpus, field="gpu_type"), _arch_of(model, models), tp, pp, field="layout")

    def step(decode: float, context: float, prefill: float) -> float:
        batch = max(1, round(decode))
        chunks = [(float(prefill), 0.0)] if prefill > 0 else []
        return _step_time(lay, context / batch, chunks, batch=batch)

    return step


def _weights(windows: Sequence[StepWindow]) -> tuple[np.ndarray, np.ndarray]:
    y = np.array([w.step_s for w in windows])
    weight = np.sqrt(np.array([w.tokens for w in windows])) / y  # relative error, by sample size
    return y, weight


def _residual(pred: np.ndarray, y: np.ndarray, windows: Sequence[StepWindow]) -> float:
    tokens = np.array([w.tokens for w in windows])
    return float(math.sqrt(float(np.sum(tokens * ((pred - y) / y) ** 2) / float(np.sum(tokens)))))


def _law_fit(windows: Sequence[StepWindow]) -> tuple[StepLaw | None, float]:
    """The four coefficients by weighted non-negative least squares, with the design's condition number (inf:
    a column is constant zero)."""
    from scipy.optimize import nnls

    y, weight = _weights(windows)
    x = np.array([[1.0, w.decode, w.context, w.prefill] for w in windows])
    a = x * weight[:, None]
    norms = np.linalg.norm(a, axis=0)
    if np.any(norms <= 0):
        return None, math.inf
    sv = np.linalg.svd(a / norms, compute_uv=False)
    cond = float(sv[0] / sv[-1]) if sv[-1] > 0 else math.inf
    coef, _ = nnls(a / norms, y * weight)
    coef = coef / norms
    if coef[0] <= 0:
        return None, cond
    return StepLaw(*(float(c) for c in coef)), cond


def fit_step_law(windows: Sequence[StepWindow], *, model: Model | None = None, min_windows: int = MIN_WINDOWS,
                 min_tokens: float = MIN_TOKENS, max_condition: float = MAX_CONDITION,
                 max_residual: float = MAX_RESIDUAL) -> StepFit:
    """Fit the law on ``windows`` (module docstring); ``model`` scales the model's step times when the windows do
    not pin the law."""
    use = [w for w in windows if w.usable(min_tokens)]
    tokens = float(sum(w.tokens for w in use))
    if len(use) < min_windows:
        return StepFit("", len(use), tokens, reason=TOO_FEW_WINDOWS,
                       message=f"{len(use)} window(s) with at least {min_tokens:g} decode tokens, "
                               f"{min_windows} needed")
    y = np.array([w.step_s for w in use])
    law, cond = _law_fit(use)
    law_res = None
    if law is not None:
        law_res = _residual(np.array([law.step(w.decode, w.context, w.prefill) for w in use]), y, use)
        if cond <= max_condition and law_res <= max_residual:
            return StepFit(FITTED, len(use), tokens, law_res, law=law)
    if model is None:
        why = (f"condition number {cond:.3g} > {max_condition:g}" if cond > max_condition
               else f"relative residual {law_res:.3g} > {max_residual:g}")
        return StepFit("", len(use), tokens, law_res, reason=UNDERDETERMINED if cond > max_condition else POOR_FIT,
                       message=f"the windows do not pin the step-time law ({why}) and there is no model to scale")
    m = np.array([model(w.decode, w.context, w.prefill) for w in use])
    if not np.all(np.isfinite(m)) or np.any(m <= 0):
        return StepFit("", len(use), tokens, law_res, reason=POOR_FIT, message="the model has no step time here")
    w2 = np.array([w.tokens for w in use]) / y**2
    scale = float(np.sum(w2 * m * y) / np.sum(w2 * m * m))
    res = _residual(scale * m, y, use)
    if res > max_residual:
        return StepFit("", len(use), tokens, res, reason=POOR_FIT,
                       message=f"neither the law (condition {cond:.3g}) nor the model scaled by {scale:.3g} describes "
                               f"the windows (relative residual {res:.3g} > {max_residual:g})")
    return StepFit(SCALED, len(use), tokens, res, scale=scale)


def fitted_figures(fit: StepFit, base: Profile) -> tuple[float, float, float]:
    """``(t0, t1, prefill_tokens_s)`` of the fitted layout: the law's line and prefill rate, or the profile's
    scaled by the fit's factor."""
    if fit.law is not None:
        t0, t1 = fit.law.line()
        return t0, t1, fit.law.prefill_tokens_s()
    if fit.scale is None:
        raise ValueError("no fit")
    return base.step_t0_s * fit.scale, base.step_t1_s * fit.scale, base.prefill_tokens_s / fit.scale


def scaled_override(base: Profile, ratios: tuple[float, float, float]) -> ProfileOverride:
    """The override of ``base`` (another layout on the same GPU and model, or the fitted one with ratio 1) with its
    t0, t1 and prefill rate multiplied by ``ratios`` = fitted / modelled at the fitted layout, and the decode
    throughput ``B* / (t0 + t1 B*)`` of the new line at the profile's operating batch (tokens/s)."""
    t0, t1, pf = base.step_t0_s * ratios[0], base.step_t1_s * ratios[1], base.prefill_tokens_s * ratios[2]
    batch = base.operating_batch
    thr = batch / (t0 + t1 * batch) if batch > 0 and t0 + t1 * batch > 0 else base.throughput_tokens_s
    return ProfileOverride(gpu_type=base.gpu_type, model=base.model, tp=base.tp, pp=base.pp, step_t0_s=t0,
                           step_t1_s=t1, throughput_tokens_s=thr, prefill_tokens_s=pf,
                           context_s_per_token=min(base.context_s_per_token * ratios[1], MAX_CONTEXT_S_PER_TOKEN))


def ratios(fit: StepFit, base: Profile) -> tuple[float, float, float]:
    """Fitted over modelled t0, t1 and prefill rate at the fitted layout (``base``: its profile)."""
    t0, t1, pf = fitted_figures(fit, base)

    def ratio(a: float, b: float) -> float:
        return a / b if b > 0 else 1.0

    return ratio(t0, base.step_t0_s), ratio(t1, base.step_t1_s), ratio(pf, base.prefill_tokens_s)


__all__ = ["FITTED", "MAX_CONDITION", "MAX_RESIDUAL", "MIN_TOKENS", "MIN_WINDOWS", "POOR_FIT", "SCALED",
           "TOO_FEW_WINDOWS", "UNDERDETERMINED", "StepFit", "StepLaw", "StepWindow", "fit_step_law",
           "fitted_figures", "layout_model", "ratios", "scaled_override"]
