"""The shared world of ``test_reserve_rule.py`` and the tests that reuse it: reservations that pay (kvcore.rules.reserve): without memory pressure the rule reserves nothing; under pressure."""

from __future__ import annotations

import math
from pathlib import Path
import numpy as np
import pytest
from kvcore.errors import InputError
from kvcore.rules.classes import KnobClass, replay
from kvcore.rules.replay_set import ReplaySet
from kvcore.rules.reserve import MIN_GAIN, choose_reserves, class_rho, engine_rho, reserves_for_plan
from kvcore.sim import SimGroup, SimPolicy
from kvcore.sim.engine import EngineConfig, simulate_engine


NO_TARGETS = {"ttft_slo_s": math.inf, "tpot_slo_s": math.inf}
"""The latency targets off. These worlds are past saturation (P99 e2e near a minute), where reservations lose some
requests within 2 s / 0.1 s and the rule then reserves nothing; tests of the cost side turn the targets off."""


def classes(traces_dir: Path, rho: tuple[float, float] = (10.0, 10.0)) -> list[KnobClass]:
    data = np.loadtxt(traces_dir / "burstgpt_first7d_gpt4_conv.csv", delimiter=",", skiprows=1)
    inp, out = data[:2500, 1], data[:2500, 2]
    short = inp <= np.median(inp)
    return [KnobClass.build("short", 1.5, inp[short], out[short], float(np.quantile(out[short], 0.9)), rho[0]),
            KnobClass.build("long", 1.5, inp[~short], out[~short], float(np.quantile(out[~short], 0.9)), rho[1])]


def group(kv: int) -> SimGroup:
    return SimGroup(name="g", replicas=2, kv_capacity_tokens=kv, step_time_base_s=0.03, step_time_per_seq_s=0.0004,
                    prefill_tokens_per_s=8000)
