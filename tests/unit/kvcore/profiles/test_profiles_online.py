"""The online step-time fit (:mod:`kvcore.profiles.online`) against independent methods: numpy's unweighted least
squares on noise-free windows, a known factor on the model's own step times, and the throughput definition of a
profile; plus every refusal (too few windows, windows that do not pin the law, windows no law describes) and the
override field it feeds (``ProfileOverride.prefill_tokens_s``)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from kvcore import InputError
from kvcore.profiles import NOMINAL_CONTEXT_TOKENS, PREFILL_PROMPT_TOKENS, ProfileOverride, check_override, resolve
from kvcore.profiles.online import (FITTED, POOR_FIT, SCALED, TOO_FEW_WINDOWS, UNDERDETERMINED, StepLaw, StepWindow,
                                    fit_step_law, fitted_figures, layout_model, ratios, scaled_override)

LAW = StepLaw(intercept_s=0.031, per_seq_s=2.2e-4, per_context_token_s=2e-7, per_prefill_token_s=5.5e-5)


def windows(law: StepLaw, n: int, *, seed: int = 0, noise: float = 0.0) -> list[StepWindow]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        b, p, c = rng.uniform(1, 120), rng.uniform(0, 1500), rng.uniform(64, 4000)
        y = law.step(b, b * c, p) * (1 + rng.gauss(0, noise))
        out.append(StepWindow(y, b, p, b * c, rng.uniform(200, 5000)))
    return out


def test_noise_free_windows_give_the_law_as_numpy_least_squares_does() -> None:
    ws = windows(LAW, 16)
    fit = fit_step_law(ws)
    assert fit.source == FITTED and fit.windows == 16 and fit.residual is not None and fit.residual < 1e-9
    x = np.array([[1.0, w.decode, w.context, w.prefill] for w in ws])
    ref = np.linalg.lstsq(x, np.array([w.step_s for w in ws]), rcond=None)[0]
    assert fit.law is not None
    got = [fit.law.intercept_s, fit.law.per_seq_s, fit.law.per_context_token_s, fit.law.per_prefill_token_s]
    assert got == pytest.approx(ref.tolist(), rel=1e-6)
    assert got == pytest.approx([LAW.intercept_s, LAW.per_seq_s, LAW.per_context_token_s, LAW.per_prefill_token_s],
                                rel=1e-6)


def test_with_one_percent_noise_nearly_every_fit_is_within_ten_percent() -> None:
    """Over 100 seeded draws of 30 windows with 1% noise on each window's mean step: at least 97 fits have every
    coefficient within 10% of the law (the per-sequence term, the smallest share of a step here, is the weakest),
    and the median error of every coefficient is under 3%."""
    names = ("intercept_s", "per_seq_s", "per_context_token_s", "per_prefill_token_s")
    errors = []
    for seed in range(100):
        fit = fit_step_law(windows(LAW, 30, seed=seed, noise=0.01))
        assert fit.source == FITTED and fit.law is not None
        errors.append([abs(getattr(fit.law, n) / getattr(LAW, n) - 1) for n in names])
    err = np.array(errors)
    assert int(np.sum(err.max(axis=1) <= 0.10)) >= 97
    assert np.all(np.median(err, axis=0) < 0.03), np.median(err, axis=0)


def test_too_few_windows_and_thin_windows_are_refused_by_count() -> None:
    ws = windows(LAW, 7)
    fit = fit_step_law(ws)
    assert (fit.source, fit.reason, fit.windows) == ("", TOO_FEW_WINDOWS, 7) and "8 needed" in fit.message
    thin = [StepWindow(w.step_s, w.decode, w.prefill, w.context, 10.0) for w in windows(LAW, 20)]
    assert fit_step_law(thin).reason == TOO_FEW_WINDOWS and fit_step_law(thin).windows == 0
    assert fit_step_law(windows(LAW, 5), min_windows=4).source == FITTED


def test_one_workload_shape_cannot_pin_the_law_and_scales_the_model_instead() -> None:
    model = layout_model("A100-80GB", "llama-70b", 4, 1)
    ws = []
    for k in range(12):  # B, S and P all proportional: the context and prefill terms cannot be told apart
        b = 4.0 + 8 * k
        ws.append(StepWindow(1.7 * model(b, 1000 * b, 20 * b), b, 20 * b, 1000 * b, 1000.0))
    assert fit_step_law(ws).reason == UNDERDETERMINED
    fit = fit_step_law(ws, model=model)
    assert fit.source == SCALED and fit.scale == pytest.approx(1.7, rel=1e-9) and fit.residual < 1e-9


def test_windows_no_law_describes_are_a_poor_fit() -> None:
    rng = random.Random(5)
    ws = [StepWindow(rng.uniform(0.01, 1.0), w.decode, w.prefill, w.context, w.tokens) for w in windows(LAW, 20)]
    fit = fit_step_law(ws, model=layout_model("A100-80GB", "llama-70b", 4, 1))
    assert fit.source == "" and fit.reason == POOR_FIT and fit.residual is not None and fit.residual > 0.25


def test_the_law_s_line_and_prefill_rate() -> None:
    t0, t1 = LAW.line()
    assert t0 == LAW.intercept_s and t1 == pytest.approx(LAW.per_seq_s + NOMINAL_CONTEXT_TOKENS *
                                                           LAW.per_context_token_s)
    assert LAW.prefill_tokens_s() == pytest.approx(PREFILL_PROMPT_TOKENS / LAW.step(0, 0, PREFILL_PROMPT_TOKENS))


def test_ratios_and_the_scaled_override_keep_the_throughput_definition() -> None:
    base = resolve("A100-80GB", "llama-70b", 4, 1)
    fit = fit_step_law(windows(LAW, 12))
    r = ratios(fit, base)
    t0, t1, pf = fitted_figures(fit, base)
    assert r == pytest.approx((t0 / base.step_t0_s, t1 / base.step_t1_s, pf / base.prefill_tokens_s))
    ov = scaled_override(base, r)
    assert (ov.step_t0_s, ov.step_t1_s, ov.prefill_tokens_s) == pytest.approx((t0, t1, pf))
    b = base.operating_batch
    assert ov.throughput_tokens_s == pytest.approx(b / (t0 + t1 * b))
    assert scaled_override(base, (1.0, 1.0, 1.0)).throughput_tokens_s == pytest.approx(base.throughput_tokens_s,
                                                                                        rel=1e-9)
    prof = resolve("A100-80GB", "llama-70b", 4, 1, (ov,))
    assert (prof.step_t0_s, prof.step_t1_s, prof.prefill_tokens_s) == pytest.approx((t0, t1, pf))
    assert prof.decode_knots == ()  # the fitted line replaces the measured curve


def test_a_bad_prefill_override_names_its_field() -> None:
    bad = ProfileOverride(gpu_type="A100-80GB", model="llama-70b", tp=4, pp=1, prefill_tokens_s=0.0)
    with pytest.raises(InputError) as info:
        check_override(bad, field="profiles[0]")
    assert info.value.field == "profiles[0].prefill_tokens_s"
