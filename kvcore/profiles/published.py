"""The step-time model against published end-to-end vLLM runs: the same requests, replayed step by step.

Each run in ``kvcore/data/profiling/published_vllm_runs.json`` sent its prompts at once to one vLLM server (one
layout), which prefilled them in one step and then decoded in bursts of ``steps_per_burst`` steps (vLLM's
multi-step scheduling: a streamed chunk, one inter-token latency sample, per burst). Decode step s (s = 0, 1, ...)
samples token s + 2 of every request whose output has at least s + 2 tokens; such a request then holds its prompt
plus s + 1 tokens of context. So a burst's batch and contexts follow from the prompt and output lengths alone, and
the model prices each step of a measured phase exactly as the run scheduled it:

    modelled TTFT  = step_time(no decoders; one prefill chunk (prompt, 0) per request)
                     + the server's first-token cost (FirstTokenCost.seconds(GPUs))                    (s)
    modelled phase = mean over the phase's steps s of step_time(contexts of the requests active at s)  (s)

against the run's median TTFT and its phase's median inter-token latency over ``steps_per_burst`` (s per step).

A run's ``role`` says what it is for: the ``fit`` runs are what :func:`fit_step_costs` fits the graph-step costs
(:class:`~kvcore.profiles.steptime.StepCosts`) to (least squares on the decode phases' log(modelled / measured), every
other coefficient as vidur's fit gives it) and :func:`fit_first_token` the server's first-token cost to; the
``check`` runs (other layouts, other GPUs, MoE) are never fitted on, only compared. A run whose first token the model
cannot stand for (``ttft_ms`` null, docs in the data's README) has decode phases only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from kvcore.errors import InputError
from kvcore.profiles.gpus import CATALOGUE
from kvcore.profiles.models import get_model
from kvcore.profiles.steptime import FirstTokenCost, StepCosts, layout, step_time

RUNS_FILE = Path(__file__).resolve().parents[1] / "data" / "profiling" / "published_vllm_runs.json"

ROLES = ("fit", "check")
StepFn = Callable[[Sequence[float], Sequence[tuple[float, float]]], float]
"""(decode contexts, prefill (tokens, context before) chunks) -> seconds of one step."""


@dataclass(frozen=True)
class Phase:
    first_burst: int
    last_burst: int
    measured_s: float
    """Median inter-token latency of the phase's bursts over the steps per burst (s per step)."""


@dataclass(frozen=True)
class Run:
    gpu: str
    model: str
    tp: int
    role: str
    path: str
    commit: str
    date: str
    input_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    ttft_s: float | None
    phases: tuple[Phase, ...]
    steps_per_burst: int


@dataclass(frozen=True)
class Compared:
    kind: str
    """``ttft`` or ``decode``."""
    figure: str
    batch: str
    """The batch sizes the figure's steps ran at ("10" for the prefill), as a range."""
    modelled_s: float
    measured_s: float

    @property
    def ratio(self) -> float:
        return self.modelled_s / self.measured_s


def load_runs(path: Path = RUNS_FILE) -> list[Run]:
    """The vendored runs; a file whose prompts or outputs do not add up to its recorded totals is refused."""
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    k = int(doc["steps_per_burst"])
    runs = []
    for i, r in enumerate(doc["runs"]):
        ins, outs = tuple(int(x) for x in r["input_lens"]), tuple(int(x) for x in r["output_lens"])
        if sum(ins) != r["total_input_tokens"] or sum(outs) != r["total_output_tokens"] or len(ins) != len(outs):
            raise InputError(f"runs[{i}]", "prompt or output lengths do not add up to the run's recorded totals")
        if r.get("role") not in ROLES:
            raise InputError(f"runs[{i}].role", f"must be one of {', '.join(ROLES)}, not {r.get('role')!r}")
        phases = tuple(Phase(int(p["bursts"][0]), int(p["bursts"][1]), float(p["step_ms"]) * 1e-3)
                       for p in r["phases"])
        ttft = None if r["ttft_ms"] is None else float(r["ttft_ms"]) * 1e-3
        runs.append(Run(r["gpu"], r["model"], int(r["tp"]), r["role"], r["path"], r["commit"], r["date"], ins, outs,
                        ttft, phases, k))
    return runs


def active_contexts(run: Run, step: int) -> list[float]:
    """Contexts (tokens) of the requests decode step ``step`` (from 0) samples for."""
    return [float(i + step + 1) for i, o in zip(run.input_lens, run.output_lens) if o >= step + 2]


def fitting(runs: Sequence[Run]) -> list[Run]:
    """The runs the step-time model's published-run figures are fitted on."""
    return [r for r in runs if r.role == "fit"]


def prefill_step(run: Run, step_s: StepFn) -> float:
    """Seconds of the run's one prefill step of all its prompts."""
    return step_s((), [(float(i), 0.0) for i in run.input_lens])


def compare(run: Run, step_s: StepFn, first_token: FirstTokenCost | None = None) -> list[Compared]:
    """The run's TTFT (when it has one: the prefill step plus ``first_token``'s share) and each decode phase,
    modelled by ``step_s`` against measured."""
    out = []
    if run.ttft_s is not None:
        server = first_token.seconds(run.tp) if first_token is not None else 0.0
        out.append(Compared("ttft", "ttft", str(len(run.input_lens)), prefill_step(run, step_s) + server, run.ttft_s))
    for ph in run.phases:
        steps = range(ph.first_burst * run.steps_per_burst, (ph.last_burst + 1) * run.steps_per_burst)
        batches, total = [], 0.0
        for s in steps:
            ctx = active_contexts(run, s)
            if not ctx:
                raise InputError("phases", f"{run.path}: no request is decoding at step {s}")
            batches.append(len(ctx))
            total += step_s(ctx, ())
        lo, hi = min(batches), max(batches)
        out.append(Compared("decode", f"decode bursts {ph.first_burst}-{ph.last_burst}",
                            f"{lo}" if lo == hi else f"{lo}-{hi}", total / len(steps), ph.measured_s))
    return out


def model_step(run: Run, costs: StepCosts) -> StepFn:
    """The step-time model of the run's layout, with graph-step costs ``costs``."""
    lay = layout(CATALOGUE[run.gpu], get_model(run.model), run.tp, 1, costs=costs)
    return lambda ctx, prefill: step_time(lay, list(ctx), list(prefill))


def decode_log_errors(runs: Sequence[Run], costs: StepCosts) -> list[float]:
    """log(modelled / measured) of every decode phase of ``runs``."""
    return [float(np.log(c.ratio)) for r in runs for c in compare(r, model_step(r, costs))
            if c.kind == "decode"]


def fit_step_costs(runs: Sequence[Run], start: StepCosts) -> StepCosts:
    """The graph-step costs (within 0-20 us, 0-100 us, 0-5 ms and a compute share of 0-3) that minimise the decode
    phases' squared log errors, from ``start``; the solver's iterations are capped, so the fit takes the same steps on
    any machine."""
    scale = np.array([1e-6, 1e-5, 1e-3, 1.0])
    res = least_squares(lambda x: decode_log_errors(runs, StepCosts(*(float(v) for v in x * scale))),
                        np.array([start.kernel_s, start.allreduce_s, start.cpu_s, start.compute_share]) / scale,
                        bounds=([0.0, 0.0, 0.0, 0.0], [20.0, 10.0, 5.0, 3.0]), max_nfev=200)
    return StepCosts(*(float(v) for v in res.x * scale))


def fit_first_token(runs: Sequence[Run], costs: StepCosts) -> FirstTokenCost:
    """The server's first-token cost ``base + per_gpu * GPUs`` that fits, by least squares, what ``runs``' measured
    TTFTs hold beyond their modelled prefill step (runs without a TTFT are left out)."""
    pts = [(float(r.tp), r.ttft_s - prefill_step(r, model_step(r, costs))) for r in runs if r.ttft_s is not None]
    if len({g for g, _ in pts}) < 2:
        raise InputError("runs", "fitting the first-token cost needs TTFTs of at least two GPU counts")
    per_gpu, base = np.polyfit([g for g, _ in pts], [gap for _, gap in pts], 1)
    return FirstTokenCost(base_s=float(base), per_gpu_s=float(per_gpu))
