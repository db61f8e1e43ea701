"""``kvcore evaluate --observe``: train every policy on what the operator would see, not on the raw lengths.

The operator reads output lengths from a Prometheus histogram: per history window, how many requests fell in each
bucket of the exporter's layout. ``--observe LAYOUT`` replays exactly that: each window of every plan's history
is binned into :data:`kvcore.history.series.LAYOUTS` ``[LAYOUT](L_max)`` (plus ``+Inf``, closed at L_max, the evaluation's
max_model_len) and read back through :func:`kvcore.history.bucket_model.bucket_samples` with the chosen within-bucket model,
as :func:`kvcore.history.traces.histogram_to_samples` does for the operator. Costs are still measured on the raw test
outputs. ``raw`` (the default) leaves the histories as they are.

Layouts: ``vllm`` (vLLM's 1-2-5 buckets of ``vllm:request_generation_tokens``), ``powers-of-4`` (the Envoy AI
Gateway's), ``kvplan`` (kvplan's plugin, buckets at most 10 % wide).
"""

from __future__ import annotations

from dataclasses import replace

from kvcore.history.buckets import bin_lengths
from kvcore.history.bucket_model import DEFAULT_MODEL, bucket_samples, check_model
from kvcore.errors import InputError
from kvcore.evaluate.protocols import Episode
from kvcore.history.samples import History
from kvcore.history.series import LAYOUTS

OBSERVE: tuple[str, ...] = ("raw", *LAYOUTS)
"""What ``--observe`` accepts: raw samples, or one of the bucket layouts by name."""


def check_observe(observe: str) -> str:
    """``observe`` if known; :class:`InputError` listing the choices otherwise."""
    if observe not in OBSERVE:
        raise InputError("observe", f"unknown observation {observe!r}", hint="one of " + ", ".join(OBSERVE))
    return observe


def binned_history(history: History, layout: str, *, lmax: float, model: str = DEFAULT_MODEL) -> History:
    """Every window of ``history`` (raw lengths) as the bucket counts of ``layout`` read back by ``model``."""
    bounds = LAYOUTS[check_observe(layout)](int(lmax))
    m = check_model(model, "bucket_model")
    return History(tuple(
        bucket_samples(bin_lengths(w.values, bounds, max_model_len=lmax), m, field=f"{layout}[{i}]")
        for i, w in enumerate(history.windows)
    ))


def observe_episodes(episodes: list[Episode], observe: str, *, lmax: float,
                     model: str = DEFAULT_MODEL) -> list[Episode]:
    """``episodes`` with their histories as ``observe`` shows them (unchanged for ``raw``). A history shared by
    several episodes (a rolling re-plan that reused an empty window's predecessor) is binned once."""
    check_observe(observe)
    if observe == "raw":
        return episodes
    done: dict[int, History] = {}
    out = []
    for ep in episodes:
        key = id(ep.history)
        if key not in done:
            done[key] = binned_history(ep.history, observe, lmax=lmax, model=model)
        out.append(replace(ep, history=done[key]))
    return out
