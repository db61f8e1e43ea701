"""The shared world of ``test_knob_search.py`` and the tests that reuse it: the knob rule's search (kvcore.rules.knob_search) makes the full table's choice from part of it: on seeded cases."""

from __future__ import annotations

from pathlib import Path
import numpy as np
import pytest
from kvcore.rules.knob_search import peak_running
from kvcore.rules.classes import KnobClass, replay
from kvcore.rules.knobs import choose_knobs
from kvcore.rules.replays import GroupReplays, ReplayStore
from kvcore.sim import SimGroup
from kvcore.sim.engine import EngineConfig, simulate_engine


def classes(traces_dir: Path, rho: tuple[float, float], rate: float = 2.0) -> list[KnobClass]:
    data = np.loadtxt(traces_dir / "burstgpt_first7d_gpt4_conv.csv", delimiter=",", skiprows=1)
    inp, out = data[:3000, 1], data[:3000, 2]
    short = inp <= np.median(inp)
    return [KnobClass.build("short", rate, inp[short], out[short], 300, rho[0]),
            KnobClass.build("long", rate, inp[~short], out[~short], 500, rho[1])]


def group(kv: int) -> SimGroup:
    return SimGroup(name="g", replicas=2, kv_capacity_tokens=kv, step_time_base_s=0.03, step_time_per_seq_s=0.0004,
                    prefill_tokens_per_s=8000)


CASES = [  # (KV tokens per replica, rho short/long, arrival rate per class, knobs in force, vLLM version)
    (2_000_000, (10.0, 10.0), 2.0, None, "0.33.0"),
    (60_000, (10.0, 10.0), 1.5, None, "0.33.0"),
    (30_000, (10.0, 2.0), 1.5, None, "0.33.0"),
    (30_000, (10.0, 2.0), 1.5, (0.0, 256, "fcfs"), "0.33.0"),
    (30_000, (10.0, 2.0), 1.5, (0.05, 256, "fcfs"), "0.33.0"),
    (30_000, (1.0, 100.0), 2.0, (0.0, 64, "priority"), "0.33.0"),
    (20_000, (5.0, 5.0), 1.0, (0.02, 77, "fcfs"), "0.33.0"),
    (20_000, (5.0, 5.0), 1.0, None, "0.32.1"),
    (12_000, (2.0, 50.0), 0.7, (0.1, 256, "fcfs"), "0.33.0"),
    (12_000, (2.0, 50.0), 0.7, None, "0.33.0"),
]
