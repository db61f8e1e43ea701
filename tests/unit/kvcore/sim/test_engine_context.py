"""Context-dependent step times in the vLLM engine model (issue 22, part 3 downstream): the exact run sums the fast
model relies on, each against brute force, and a lone request's clock against its steps added one by one."""

from __future__ import annotations

import numpy as np
import pytest

from kvcore.errors import InputError
from kvcore.sim.engine import EngineConfig, GroupEngine, Jobs, StepTiming, run_fast, run_reference
from kvcore.sim.engine.config import floor_sum
from kvcore.sim.engine.fast_state import StepHistory


def test_floor_sum_against_brute_force() -> None:
    rng = np.random.default_rng(11)
    for _ in range(3000):
        n, m = int(rng.integers(0, 300)), int(rng.integers(1, 5000))
        a, b = int(rng.integers(0, 10**int(rng.integers(1, 9)))), int(rng.integers(0, 10**int(rng.integers(1, 9))))
        assert floor_sum(n, m, a, b) == sum((a * i + b) // m for i in range(n)), (n, m, a, b)


def test_history_elapsed_and_inversion_against_brute_force() -> None:
    rng = np.random.default_rng(12)
    for _ in range(400):
        # steps of milliseconds, and of 1 ns (where the floors matter more than the step: the bisection's case)
        dt = 1 if rng.random() < 0.3 else int(rng.integers(1, 5_000_000))
        a = int(rng.integers(1, 10**int(rng.integers(1, 8))))
        b = a + 500 + int(rng.integers(0, 10**int(rng.integers(1, 9))))
        h = StepHistory()
        h.start_run(10, int(rng.integers(1, 10**7)), dt, a, b)
        steps = [dt + (a * k + b) // 1000 for k in range(400)]
        cum = np.concatenate([[0], np.cumsum(steps)])
        m_max = int(rng.integers(0, 400))
        for m in (0, 1, m_max):
            assert h.elapsed(m) == cum[m]
        for _ in range(5):
            x = int(rng.integers(1, int(cum[-1]) + 2))
            want = next((m for m in range(1, m_max + 1) if cum[m] >= x), -1)
            assert h.first_reaching(x, m_max) == ((want, cum[want]) if want > 0 else (-1, 0)), (dt, a, b, x, m_max)
        h.close_run(10 + 1 + m_max)
        if m_max:
            assert h.duration(10 + m_max) == steps[m_max - 1]
            # the longest step from mid-run on is the run's last one (its context is the largest)
            assert h.longest(10 + max(1, m_max // 2), 10 + m_max) == steps[m_max - 1]


def lone_request(prompt: int, output: int, timing: StepTiming, budget: int) -> Jobs:
    engine = EngineConfig(max_num_seqs=8, max_num_batched_tokens=budget, prefix_caching=False)
    return Jobs(arrival_ns=[0], prompt=[prompt], output=[output], cls=[0], priority=[0], prefix=[0], reserve=[0],
                group=[0], groups=(GroupEngine(1, 4000, engine, timing),))


@pytest.mark.parametrize("context_s", [0.0, 4.1e-8, 7.77e-7])
def test_lone_request_clock_step_by_step(context_s: float) -> None:
    # one request alone: prefill chunks of at most 512 tokens (each reads the context computed so far), then a decode
    # step per further token whose context grows by one; the finish time is those steps summed here directly
    prompt, output, budget = 1300, 300, 512
    timing = StepTiming(0.012, 0.0003, 1.0 / 9000.0, (), context_s)
    t, done = 0, 0
    while done < prompt:
        q = min(budget, prompt - done)
        done += q
        t += max(1, round(1e9 * (0.012 + 0.0003 - round(context_s * 1e12) * 1e-12 * 1024 + (q - 1) / 9000.0)))
        t += (done * round(context_s * 1e12) + 500) // 1000
    first = t
    gaps = []
    for k in range(1, output):
        step = max(1, round(1e9 * (0.012 + 0.0003 - round(context_s * 1e12) * 1e-12 * 1024)))
        step += ((prompt + k) * round(context_s * 1e12) + 500) // 1000
        gaps.append(step)
        t += step
    for run in (run_fast, run_reference):
        out = run(lone_request(prompt, output, timing, budget))
        assert int(out.first_token_ns[0]) == first
        assert int(out.finish_ns[0]) == t
        assert int(out.max_gap_ns[0]) == max(gaps)  # the last decode step: the longest context
    if context_s:
        assert gaps[-1] > gaps[0]


def test_context_term_refused_when_not_a_read_time() -> None:
    with pytest.raises(InputError, match="timing.context_s_per_token"):
        StepTiming(0.01, 0.0, 0.0, (), -1e-9)
    with pytest.raises(InputError, match="timing.context_s_per_token"):
        StepTiming(0.01, 0.0, 0.0, (), 0.5)
    with pytest.raises(InputError, match="timing.context_s_per_token"):
        StepTiming(0.01, 0.0, 0.0, (), float("nan"))
