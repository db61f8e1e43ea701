"""The one definition of load (kvcore.evaluate.saturation): on a group whose steady throughput is known in closed
form (one-second steps, a full batch of equal requests) the measured saturation rate is that throughput; it falls
when prompts must be prefilled, and when KV memory caps the batch; a short trace is tiled so the batch is full;
capacity_rps is the same measurement; nothing that fits is an input error."""

from __future__ import annotations

import numpy as np
import pytest

from kvcore.errors import InputError
from kvcore.evaluate.engine import capacity_rps
from kvcore.evaluate.saturation import saturation_rps
from kvcore.sim import SimGroup


def _group(kv: int = 10_000_000, prefill: float = 1e9, replicas: int = 2) -> SimGroup:
    return SimGroup(name="g", replicas=replicas, kv_capacity_tokens=kv, step_time_base_s=1.0,
                    step_time_per_seq_s=0.0, prefill_tokens_per_s=prefill)


@pytest.mark.parametrize("replicas", [1, 2], ids=["one-replica", "two-replicas"])
def test_full_batch_closed_form(replicas: int) -> None:
    # 256 requests per replica decode together; one token per second each; 21 tokens (the first with the prompt)
    n = 2048
    rate = saturation_rps(_group(replicas=replicas), np.ones(n), np.full(n, 21.0))
    assert rate == pytest.approx(replicas * 256 / 21, rel=0.1)


@pytest.mark.slow
def test_prefill_and_memory_lower_it() -> None:
    n = 1024
    free = saturation_rps(_group(), np.full(n, 1000.0), np.full(n, 20.0))
    prefilled = saturation_rps(_group(prefill=2000.0), np.full(n, 1000.0), np.full(n, 20.0))
    tight = saturation_rps(_group(kv=16 * 66 * 16), np.full(n, 1000.0), np.full(n, 20.0))  # 16 requests a replica
    assert prefilled < free and tight < free


def test_short_trace_is_tiled() -> None:
    a = saturation_rps(_group(), np.ones(8), np.full(8, 21.0))
    assert a == pytest.approx(2 * 256 / 21, rel=0.1)  # 8 requests alone would never fill a batch


@pytest.mark.slow
def test_capacity_rps_is_the_measurement() -> None:
    inp, out = np.full(300, 200.0), np.full(300, 50.0)
    assert capacity_rps(_group(prefill=4400.0), inp, out) == saturation_rps(_group(prefill=4400.0), inp, out)


def test_nothing_fits() -> None:
    with pytest.raises(InputError, match="trace"):
        saturation_rps(_group(kv=64), np.full(10, 500.0), np.full(10, 10.0))
