"""The step-time model against published vLLM runs: the replay of a run's steps (batches and contexts from its prompt
and output lengths), the vendored file's own checks, the band docs/model.md states for the model's error, and the
graph-step costs and the server's first-token cost fitted on the ``fit`` runs (at the fit's minimum, predictive for a
layout left out of the fit and for the ``check`` runs no fit sees)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import pytest

from kvcore.errors import InputError
from kvcore.profiles.models import get_model
from kvcore.profiles.published import (RUNS_FILE, Phase, Run, active_contexts, compare, decode_log_errors,
                                       fit_first_token, fit_step_costs, fitting, load_runs, model_step)
from kvcore.profiles.steptime import FIRST_TOKEN, GRAPH, FirstTokenCost, StepCosts


def _run(phases: tuple[Phase, ...]) -> Run:
    return Run("A100-80GB", "llama-8b", 1, "fit", "p", "c", "d", (5, 7), (12, 35), 0.5, phases, 10)


def _batch(ctx: Sequence[float], prefill: Sequence[tuple[float, float]]) -> float:
    return float(len(ctx) + sum(q for q, _ in prefill))


def _context(ctx: Sequence[float], prefill: Sequence[tuple[float, float]]) -> float:
    return float(sum(ctx))


def test_a_phase_replays_the_steps_the_run_scheduled() -> None:
    # Bursts 1-2 are steps 10..29. The 12-token output samples its last token (token 12) at step 10; the 35-token
    # one decodes throughout. Worked by hand: batches 2 then 1 x 19; contexts (5+11)+(7+11) = 34 at step 10, then
    # 7 + s + 1 for s = 11..29, which sum to 532.
    run = _run((Phase(1, 2, 1.0),))
    ttft, phase = compare(run, _batch)
    assert ttft.modelled_s == 12.0 and ttft.batch == "2"
    assert phase.modelled_s == pytest.approx(21 / 20) and phase.batch == "1-2"
    assert compare(run, _context)[1].modelled_s == pytest.approx((34 + 532) / 20)
    # the server's first-token share adds to the prefill step, for the run's GPUs: 1 + 2 * 1
    assert compare(run, _batch, FirstTokenCost(base_s=1.0, per_gpu_s=2.0))[0].modelled_s == 15.0


def test_a_run_without_a_first_token_figure_compares_its_decode_only() -> None:
    run = Run("A100-80GB", "llama-8b", 1, "check", "p", "c", "d", (5, 7), (12, 35), None, (Phase(1, 2, 1.0),), 10)
    assert [c.kind for c in compare(run, _batch, FIRST_TOKEN)] == ["decode"]


def test_a_phase_past_every_output_is_refused() -> None:
    with pytest.raises(InputError, match="no request is decoding at step 40"):
        compare(_run((Phase(4, 4, 1.0),)), _batch)


def test_a_run_whose_lengths_do_not_add_up_is_refused(tmp_path: Path) -> None:
    doc = json.loads(RUNS_FILE.read_text(encoding="utf-8"))
    doc["runs"][2]["output_lens"][1] += 1
    bad = tmp_path / "runs.json"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(InputError, match=r"runs\[2\]"):
        load_runs(bad)


def test_a_run_of_no_known_role_is_refused(tmp_path: Path) -> None:
    doc = json.loads(RUNS_FILE.read_text(encoding="utf-8"))
    doc["runs"][1]["role"] = "train"
    bad = tmp_path / "runs.json"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(InputError, match=r"runs\[1\]\.role.*fit, check"):
        load_runs(bad)


def test_every_vendored_run_is_a_catalogue_layout_with_provenance() -> None:
    runs = load_runs()
    assert [len(fitting(runs)), len(runs)] == [7, 15]
    for r in runs:
        model_step(r, GRAPH)((), [(128.0, 0.0)])  # the layout exists in the catalogue and passes its checks
        assert r.path.startswith("results/") and len(r.commit) == 40 and r.phases
    # every MoE run is a check: nothing is fitted on a shape whose step the dense runs do not show
    assert {r.role for r in runs if get_model(r.model).moe} == {"check"}
    # and the MoE checks reach the batches a server runs at (over 200 sequences decoding), not only batch 8 and below
    moe = [r for r in runs if get_model(r.model).moe]
    assert max(len(active_contexts(r, r.steps_per_burst * p.first_burst)) for r in moe for p in r.phases) > 200


def test_the_model_stays_in_the_band_docs_model_md_states() -> None:
    # docs/model.md, "Against published vLLM runs": every dense decode phase and every first token within 15% of the
    # run's, every MoE decode phase within 0.75-1.20 (Mixtral-8x22B at TP8, batch 1-2, is 0.77-0.82: the one miss
    # below 0.80, stated there). A change to the step-time model that leaves this band must update that section.
    for r in load_runs():
        for c in compare(r, model_step(r, GRAPH), FIRST_TOKEN):
            lo, hi = (0.75, 1.2) if c.kind == "decode" and get_model(r.model).moe else (0.85, 1.15)
            assert lo <= c.ratio <= hi, (r.gpu, r.model, r.tp, c.figure, c.ratio)


def test_the_first_token_cost_is_the_fit_of_the_fit_runs_and_predicts_every_other() -> None:
    runs = load_runs()
    fit = fitting(runs)
    fitted = fit_first_token(fit, GRAPH)
    assert fitted.base_s == pytest.approx(FIRST_TOKEN.base_s, abs=5e-4)
    assert fitted.per_gpu_s == pytest.approx(FIRST_TOKEN.per_gpu_s, abs=5e-5)
    # left out of the fit in turn, each fit run's TTFT is predicted within 10% ...
    timed = [r for r in fit if r.ttft_s is not None]
    assert len(timed) == 5
    for i, held in enumerate(timed):
        cost = fit_first_token([r for j, r in enumerate(timed) if j != i], GRAPH)
        (ttft,) = [c for c in compare(held, model_step(held, GRAPH), cost) if c.kind == "ttft"]
        assert 0.9 <= ttft.ratio <= 1.1, (held.gpu, held.tp, cost, ttft.ratio)
    # ... and the check runs (TP2, an 8B on H100), which no fit sees, within 5%
    checks = [c for r in runs if r.role == "check" for c in compare(r, model_step(r, GRAPH), FIRST_TOKEN)
              if c.kind == "ttft"]
    assert len(checks) == 2 and all(0.95 <= c.ratio <= 1.05 for c in checks), [c.ratio for c in checks]
    with pytest.raises(InputError, match="two GPU counts"):
        fit_first_token([r for r in timed if r.tp == 4], GRAPH)


def _rms(x: Sequence[float]) -> float:
    return math.sqrt(sum(v * v for v in x) / len(x))


@pytest.mark.slow
def test_the_graph_step_costs_are_the_fit_of_the_published_runs() -> None:
    # GRAPH is at the least-squares minimum of the fit runs' decode log errors: a fit from elsewhere does no better.
    runs = fitting(load_runs())
    fitted = fit_step_costs(runs, StepCosts(8e-6, 4e-5, 1.5e-3))
    assert _rms(decode_log_errors(runs, GRAPH)) <= _rms(decode_log_errors(runs, fitted)) + 2e-3
    assert _rms(decode_log_errors(runs, GRAPH)) < 0.5 * _rms(decode_log_errors(runs, StepCosts(8.6e-6, 4e-5, 1.5e-3)))


@pytest.mark.slow
def test_a_fit_without_one_layout_predicts_that_layout() -> None:
    # Leave one fit run out: the costs fitted on the other six price the held-out run's decode within 15%.
    runs = fitting(load_runs())
    for i, held in enumerate(runs):
        costs = fit_step_costs([r for j, r in enumerate(runs) if j != i], GRAPH)
        ratios = [math.exp(e) for e in decode_log_errors([held], costs)]
        assert all(0.85 <= x <= 1.15 for x in ratios), (held.gpu, held.model, held.tp, costs, ratios)
