"""The fast vLLM engine model against the step-by-step reference (kvcore.sim.engine): on seeded random instances
they must agree exactly on every per-request outcome (replica, admission, first token, finish, longest gap,
preemptions, recomputed and cached tokens) and on the steps run, both with every step lasting 1 s (the parity tier's
clock) and with profile-like step times on several replicas. The instances cover block sizes 1..32, tight and loose
memory, the watermark, small token budgets (chunked prefill), fcfs and priority, prefix caching with shared class
prefixes, and kvplan's gate. Then simulate_engine end to end on a trace-like workload, fast against reference."""

from __future__ import annotations

import numpy as np
import pytest

from kvcore.sim import SimGroup, SimPolicy, Workload
from kvcore.sim.engine import EngineConfig, GroupEngine, Jobs, StepTiming, run_fast, run_reference, simulate_engine

FIELDS = ("replica", "admit_ns", "first_token_ns", "finish_ns", "finish_step_ns", "max_gap_ns", "preemptions",
          "recomputed", "cached", "steps")


def random_jobs(seed: int, *, big: bool, timed: bool, curved: bool = False, context: bool = False) -> Jobs:
    rng = np.random.default_rng(seed)
    bs = int(rng.choice([1, 2, 4, 8, 16, 32] if not big else [8, 16, 32]))
    n = int(rng.integers(5, 60) if not big else rng.integers(150, 500))
    n_cls = int(rng.integers(1, 4))
    prefix = [int(rng.choice([0, bs * int(rng.integers(1, 8)), int(rng.integers(1, 300))])) for _ in range(n_cls)]
    cls = rng.integers(0, n_cls, size=n)
    if big:
        prompt = np.minimum(np.exp(rng.normal(5.0, 1.2, size=n)).astype(int) + 1, 3000)
        output = np.minimum(np.exp(rng.normal(4.5, 1.2, size=n)).astype(int) + 1, 3000)
    else:
        prompt = rng.integers(1, int(rng.choice([150, 600])), size=n)
        output = rng.integers(1, int(rng.choice([10, 60, 200])), size=n)
    gate = bool(rng.random() < 0.4)
    reserve = [int(rng.choice([0, rng.integers(1, 100), rng.integers(1, 600)])) for _ in range(n_cls)]
    y = np.array(reserve)[cls] if gate else np.zeros(n, dtype=int)
    need = int((-(-(prompt + np.maximum(output - 1, y)) // bs)).max())
    num_blocks = need + 1 + int(rng.integers(0, 3 * need))
    seqs = int(rng.integers(1, 17) if not big else rng.choice([8, 32, 256]))
    engine = EngineConfig(
        block_size=bs, num_blocks=num_blocks, watermark=float(rng.choice([0.0, 0.0, 0.01, 0.05, 0.1, 0.3])),
        max_num_seqs=seqs, max_num_batched_tokens=max(seqs, int(rng.choice([seqs, 16, 48, 128, 512, 2048]))),
        policy="priority" if rng.random() < 0.5 else "fcfs", prefix_caching=bool(rng.random() < 0.6),
        admission="gate" if gate else "vllm",
    )
    if timed:
        gaps = np.where(rng.random(n) < 0.8, rng.exponential(0.03, size=n), 0.0)
        arrival = np.rint(np.cumsum(gaps) * 1e9).astype(np.int64)
        timing, replicas = StepTiming(0.02, 0.001, 0.0002), int(rng.integers(1, 4))
        if curved:  # a measured-model-like decode curve: flat, then rising, through a few knots
            knots = tuple((b, 0.02 + 0.0004 * max(0, b - 4) + 0.0001 * b) for b in (1, 2, 4, 8, 16))
            timing = StepTiming(0.02, 0.001, 0.0002, knots)
        if context:  # a KV read per context token: whole, odd and sub-nanosecond picoseconds, and a heavy one
            c = float(rng.choice([1e-9, 37.123e-9, 0.3e-9, 2.5e-6])) * (1.0 + float(rng.random()))
            timing = StepTiming(timing.t0_s, timing.t1_s, timing.prefill_s_per_token, timing.decode_knots, c)
    else:
        arrival = np.cumsum(rng.choice([0, 0, 0, 1, 2, 3, 8], size=n)) * 1_000_000_000
        timing, replicas = StepTiming(1.0, 0.0, 0.0), 1
    has_prefix = rng.random(n) < 0.7
    return Jobs(arrival_ns=arrival.tolist(), prompt=prompt.tolist(), output=output.tolist(), cls=cls.tolist(),
                priority=(rng.integers(0, 4, size=n) if engine.policy == "priority" else np.zeros(n, int)).tolist(),
                prefix=np.where(has_prefix, np.array(prefix)[cls], 0).tolist(), reserve=np.array(reserve)[cls].tolist(),
                group=[0] * n, groups=(GroupEngine(replicas, num_blocks, engine, timing),))


def assert_same(jobs: Jobs) -> None:
    ref, fast = run_reference(jobs), run_fast(jobs)
    for name in FIELDS:
        a, b = getattr(ref, name), getattr(fast, name)
        bad = np.flatnonzero(a != b)
        assert bad.size == 0, f"{name} differs at requests {bad[:5].tolist()}: reference {a[bad[:5]].tolist()}, " \
                              f"fast {b[bad[:5]].tolist()}"


@pytest.mark.parametrize("seed", range(60))
def test_small_instances_step_clock(seed: int) -> None:
    assert_same(random_jobs(seed, big=False, timed=False))


@pytest.mark.parametrize("seed", range(60))
def test_small_instances_timed_replicas(seed: int) -> None:
    assert_same(random_jobs(1000 + seed, big=False, timed=True))


@pytest.mark.parametrize("seed", range(40))
def test_small_instances_curved_decode_times(seed: int) -> None:
    # the decode curve of a measured profile (StepTiming.decode_knots) instead of a line, past its last knot too
    jobs = random_jobs(3000 + seed, big=False, timed=True, curved=True)
    assert jobs.groups[0].timing.decode_knots
    assert_same(jobs)


@pytest.mark.parametrize("seed", range(60))
def test_small_instances_context_dependent_steps(seed: int) -> None:
    # every step's duration grows with its requests' context (StepTiming.context_s_per_token): the fast model's runs
    # sum those steps with floor_sum and invert time to steps for arrivals; the reference adds them one by one
    jobs = random_jobs(5000 + seed, big=False, timed=True, curved=bool(seed % 2), context=True)
    assert jobs.groups[0].timing.context_ps > 0
    assert_same(jobs)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_larger_instances_context_dependent_steps(seed: int) -> None:
    assert_same(random_jobs(6000 + seed, big=True, timed=True, curved=bool(seed % 2), context=True))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
def test_larger_instances(seed: int) -> None:
    jobs = random_jobs(2000 + seed, big=True, timed=bool(seed % 2))
    assert_same(jobs)


@pytest.mark.slow
def test_simulate_engine_fast_equals_reference(traces_dir: object) -> None:
    from pathlib import Path

    data = np.loadtxt(Path(str(traces_dir)) / "azure2023_conv.csv", delimiter=",", skiprows=1, max_rows=1500)
    rng = np.random.default_rng(7)
    rows = rng.integers(0, data.shape[0], size=600)
    inp, out = data[rows, 1], np.minimum(data[rows, 2], 2000)
    cls = (inp > np.median(inp)).astype(int)
    arrival = np.cumsum(rng.exponential(1 / 12.0, size=600))
    workload = Workload.from_arrays(arrival, cls, inp, np.maximum(out, 1), n_classes=2)
    groups = [SimGroup(name="a", replicas=2, kv_capacity_tokens=12_000, step_time_base_s=0.03,
                       step_time_per_seq_s=0.0005, prefill_tokens_per_s=8000),
              SimGroup(name="b", replicas=1, kv_capacity_tokens=20_000, step_time_base_s=0.02,
                       step_time_per_seq_s=0.0003, prefill_tokens_per_s=16000)]
    policy = SimPolicy.from_arrays([200, 100], [[0.6, 0.4], [0.3, 0.7]], prefix_fraction=[[0.5, 0.5], [0.2, 0.0]],
                                   prefix_tokens=[64, 200])
    engines = [EngineConfig(watermark=0.02), EngineConfig(admission="gate", policy="priority", class_priority=(1, 0))]
    fast = simulate_engine(workload, groups, policy, rng=np.random.default_rng(3), engine=engines,
                           keep_requests=True)
    ref = simulate_engine(workload, groups, policy, rng=np.random.default_rng(3), engine=engines, reference=True,
                          keep_requests=True)
    assert fast.preemptions > 0 and fast.cached_prompt_tokens > 0  # the case exercises both
    assert fast.model_dump(exclude={"simulator"}) == ref.model_dump(exclude={"simulator"})
    assert fast.outcomes is not None and ref.outcomes is not None
    for name in FIELDS:
        assert np.array_equal(getattr(fast.outcomes, name), getattr(ref.outcomes, name)), name
