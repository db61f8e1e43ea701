"""The one definition of load in kvcore's evaluation: offered requests/s over the saturation rate measured in the
vLLM engine model.

The saturation rate of a group on a set of requests is the rate at which it finishes them while its queue never
empties: every request (the set repeated until there are at least :data:`MIN_SATURATION_REQUESTS`, so that the
batch is full for most of the run even on a short trace) arrives at once, vLLM's defaults serve them (prefill,
chunking, KV growth and preemption all included), and the rate is counted between the 10th and the 90th percentile
of finish times, so neither the first admissions nor the drain of the last long requests (a queue no longer full)
count. Load = arrival rate / this rate. ``kvcore evaluate --engine vllm`` (its loads and ``--slo-capacity``),
``--simulate`` and the benchmarks read it through :func:`kvcore.evaluate.engine.capacity_rps`.

A finite replay can run above load 1 for a while before its queue has grown long, so a low SLO share (90%) can be
met at a load above 1.
"""

from __future__ import annotations

import math

import numpy as np

from kvcore.errors import InputError
from kvcore.sim import SimGroup, SimPolicy, Workload
from kvcore.sim.engine import EngineConfig, simulate_engine
from kvcore.sim.engine.config import NS_PER_S

MIN_SATURATION_REQUESTS = 4096
"""Requests the measurement runs at least (the set tiled): 8x the 2 x 256 sequences a default 2-replica group runs
at once, so the 10-90% window sees a full batch."""


def saturation_rps(group: SimGroup, inputs: np.ndarray, outputs: np.ndarray, *, engine: EngineConfig | None = None,
                   seed: int = 0) -> float:
    """Requests/s ``group`` finishes with a queue that never empties (module docstring)."""
    inp = np.maximum(np.rint(np.asarray(inputs, dtype=np.float64)), 0).astype(np.int64)
    out = np.maximum(np.rint(np.asarray(outputs, dtype=np.float64)), 1).astype(np.int64)
    if out.size == 0:
        raise InputError("trace", "has no request to measure the saturation rate on")
    reps = max(1, math.ceil(MIN_SATURATION_REQUESTS / out.size))
    inp, out = np.tile(inp, reps), np.tile(out, reps)
    now = Workload.from_arrays(np.zeros(out.size), np.zeros(out.size, dtype=np.int64), inp, out, n_classes=1)
    policy = SimPolicy.from_arrays([0.0], np.ones((1, 1)), cp=1.0, cw=1.0)
    res = simulate_engine(now, [group], policy, rng=np.random.default_rng(seed), engine=engine, keep_requests=True)
    assert res.outcomes is not None
    done = np.sort(res.outcomes.finish_ns[res.outcomes.finish_ns >= 0])
    if done.size == 0:
        raise InputError("trace", "no request fits one replica's KV memory: nothing can be served")
    a, b = int(0.1 * done.size), int(0.9 * done.size) - 1
    if b <= a or done[b] <= done[a]:
        return float(done.size) / (float(max(done[-1], 1)) / NS_PER_S)
    return float(b - a) / (float(done[b] - done[a]) / NS_PER_S)
