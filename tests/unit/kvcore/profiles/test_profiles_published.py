"""The step-time model against published vLLM runs: the replay of a run's steps (batches and contexts from its prompt
and output lengths), the vendored file's own checks, and the band docs/model.md states for the model's error."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import pytest

from kvcore.errors import InputError
from kvcore.profiles.gpus import CATALOGUE
from kvcore.profiles.models import get_model
from kvcore.profiles.published import RUNS_FILE, Phase, Run, compare, load_runs
from kvcore.profiles.steptime import layout, step_time


def _run(phases: tuple[Phase, ...]) -> Run:
    return Run("A100-80GB", "llama-8b", 1, "p", "c", "d", (5, 7), (12, 35), 0.5, phases, 10)


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


def test_every_vendored_run_is_a_catalogue_layout_with_provenance() -> None:
    runs = load_runs()
    assert len(runs) == 5
    for r in runs:
        layout(CATALOGUE[r.gpu], get_model(r.model), r.tp, 1)
        assert r.path.startswith("results/") and len(r.commit) == 40 and r.phases


def test_the_model_stays_in_the_band_docs_model_md_states() -> None:
    # docs/model.md, "Against published vLLM runs": every figure within 0.5x-1.6x of the run's. A change to the
    # step-time model that leaves this band must update that section.
    for r in load_runs():
        lay = layout(CATALOGUE[r.gpu], get_model(r.model), r.tp, 1)
        for c in compare(r, lambda d, p: step_time(lay, list(d), list(p))):
            assert 0.5 <= c.ratio <= 1.6, (r.gpu, r.model, r.tp, c.figure, c.ratio)
            assert math.isfinite(c.modelled_s) and c.modelled_s > 0
