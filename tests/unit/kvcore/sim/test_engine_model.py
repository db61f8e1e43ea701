"""The vLLM engine model (kvcore.sim.engine) on small cases whose every step is worked out by hand in the comments:
decode timing, chunked prefill, the watermark, the fcfs and priority victims, no admission in a preempting step,
prefix-cache self-hits after preemption, and kvplan's gate. Each case runs through both the step-by-step reference
and the fast model; every step lasts exactly 1 s (StepTiming(1, 0, 0)), so times are step numbers."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kvcore.errors import InputError
from kvcore.sim.engine import EngineConfig, EngineOutcomes, GroupEngine, Jobs, StepTiming, run_fast, run_reference

S = 1_000_000_000


@dataclass(frozen=True)
class Req:
    step: int
    prompt: int
    output: int
    prio: int = 0
    reserve: int = 0


def run(reqs: list[Req], *, model: str, num_blocks: int, block_size: int, **engine: object) -> EngineOutcomes:
    cfg = EngineConfig(block_size=block_size, num_blocks=num_blocks, **engine)  # type: ignore[arg-type]
    n = len(reqs)
    jobs = Jobs(arrival_ns=[r.step * S for r in reqs], prompt=[r.prompt for r in reqs],
                output=[r.output for r in reqs], cls=[0] * n, priority=[r.prio for r in reqs], prefix=[0] * n,
                reserve=[r.reserve for r in reqs], group=[0] * n,
                groups=(GroupEngine(1, num_blocks, cfg, StepTiming(1.0, 0.0, 0.0)),))
    return run_reference(jobs) if model == "reference" else run_fast(jobs)


def steps(values: object) -> list[int]:
    return [v // S for v in values]  # type: ignore[attr-defined]


MODELS = pytest.mark.parametrize("model", ["reference", "fast"])


@MODELS
def test_one_request_decodes_one_token_per_step(model: str) -> None:
    # step 0 prefills 20 tokens and samples token 1; tokens 2..5 at steps 1..4
    o = run([Req(0, 20, 5)], model=model, num_blocks=10, block_size=16)
    assert steps(o.admit_ns) == [0] and steps(o.first_token_ns) == [1]
    assert steps(o.finish_step_ns) == [4] and steps(o.finish_ns) == [5]
    assert steps(o.max_gap_ns) == [1] and list(o.preemptions) == [0] and list(o.steps) == [5]


@MODELS
def test_chunked_prefill(model: str) -> None:
    # budget 32 tokens: the 100-token prompt takes steps 0..3 (32+32+32+4); the first token ends step 3
    o = run([Req(0, 100, 2)], model=model, num_blocks=20, block_size=16, max_num_seqs=1, max_num_batched_tokens=32)
    assert steps(o.first_token_ns) == [4] and steps(o.finish_step_ns) == [4]


@MODELS
@pytest.mark.parametrize(("watermark", "admit_b", "preempted"), [(0.0, 1, True), (0.2, 90, False)],
                         ids=["no-watermark", "watermark"])
def test_watermark_holds_blocks_back_only_while_something_runs(model: str, watermark: float, admit_b: int,
                                                                preempted: bool) -> None:
    # 10 usable blocks of 16 (num_blocks 11, one is vLLM's null block); W = 0.2 keeps int(0.2 * 11) = 2 free.
    # A (64 + 90 tokens) is admitted alone at step 0: no watermark with nothing running. At step 1 A holds
    # ceil(65 / 16) = 5 blocks, 5 are free; B needs 4, plus 2 with the watermark: refused until A finishes at
    # step 89 and B is admitted alone at step 90. Without the watermark B enters at step 1 and at step 17 the two
    # need 6 + 5 > 10 blocks: a preemption.
    o = run([Req(0, 64, 90), Req(1, 64, 90)], model=model, num_blocks=11, block_size=16, watermark=watermark)
    assert steps(o.admit_ns)[1] == admit_b
    assert (o.preemptions.sum() > 0) == preempted


@MODELS
def test_fcfs_preempts_the_last_admitted(model: str) -> None:
    # 4 usable blocks of 4 tokens. A and B (4-token prompts, 12 outputs: at most 15 tokens, 4 blocks) enter at
    # step 0 (1 block each); at step 1 each takes a 2nd block (free 0). At step 5 A needs its 3rd block: the victim
    # is running[-1] = B, which frees 2 blocks; A takes one. B (9 known tokens -> 3 blocks) cannot return until A
    # finishes at step 11; at step 12 B recomputes tokens 0..8 (8 of them computed before: its high-water mark),
    # samples its 6th token and needs 6 more: last token at step 18. Its longest gap: end of step 4 -> end of 12.
    o = run([Req(0, 4, 12), Req(0, 4, 12)], model=model, num_blocks=5, block_size=4, prefix_caching=False)
    assert list(o.preemptions) == [0, 1]
    assert steps(o.finish_step_ns) == [11, 18]
    assert list(o.recomputed) == [0, 8]
    assert steps(o.max_gap_ns) == [1, 8]


@MODELS
def test_priority_preempts_the_largest_priority_even_when_it_needs_the_block(model: str) -> None:
    # Same memory and requests, but A has priority 1 (worse) and B 0: at step 5 A needs the block and is itself
    # the largest (priority, arrival), so it preempts itself; B goes on to step 11, A returns at 12 and ends at 18.
    o = run([Req(0, 4, 12, prio=1), Req(0, 4, 12, prio=0)], model=model, num_blocks=5, block_size=4,
            policy="priority", prefix_caching=False)
    assert list(o.preemptions) == [1, 0]
    assert steps(o.finish_step_ns) == [18, 11]


@MODELS
def test_no_admission_in_a_step_that_preempted(model: str) -> None:
    # Priority, 5 usable blocks of 4. A (prio 0, 4 + 12) and V (prio 2, 8 + 8) enter at step 0 (1 + 2 blocks), take
    # one more each at step 1 (free 0). C (prio 1, 4 + 2) arrives at step 3 and waits. At step 5 A needs a 3rd block;
    # the victim is V (largest priority) which frees 3; A takes 1, 2 stay free. C is now the queue's head and fits,
    # but nothing is admitted in a step that preempted: C enters at step 6.
    o = run([Req(0, 4, 12, prio=0), Req(0, 8, 8, prio=2), Req(3, 4, 2, prio=1)], model=model, num_blocks=6,
            block_size=4, policy="priority", prefix_caching=False)
    assert list(o.preemptions) == [0, 1, 0]
    assert steps(o.admit_ns)[2] == 6


@MODELS
@pytest.mark.parametrize(("caching", "recomputed"), [(False, 8), (True, 4)], ids=["no-cache", "prefix-cache"])
def test_preempted_request_finds_its_own_blocks_again(model: str, caching: bool, recomputed: int) -> None:
    # 4 usable blocks of 4. A (4 + 8) and B (4 + 12) enter at step 0 and hold 2 blocks each from step 1. At step 5
    # A needs a 3rd: B is preempted. Its 2 full blocks were hashed; freed tail first to the back of the free queue,
    # so A's new block evicts B's block 1 and block 0 stays cached. A ends at step 7 (its uncached tail block goes
    # to the front of the queue, its 2 full blocks to the back); at step 8 B returns: with the prefix cache it finds
    # block 0 (4 tokens) and recomputes 4 of its 8 computed tokens, without it all 8.
    o = run([Req(0, 4, 8), Req(0, 4, 12)], model=model, num_blocks=5, block_size=4, prefix_caching=caching)
    assert list(o.preemptions) == [0, 1]
    assert list(o.recomputed) == [0, recomputed]
    assert steps(o.admit_ns) == [0, 0]


@MODELS
@pytest.mark.parametrize(("admission", "reserve", "admit_b"), [("vllm", 100, 1), ("gate", 0, 1), ("gate", 100, 50)],
                         ids=["stock", "gate-y0", "gate-y100"])
def test_gate_holds_the_reservation_of_running_requests(model: str, admission: str, reserve: int,
                                                         admit_b: int) -> None:
    # 10 usable blocks of 16. With y = 100 a request's reserved footprint is 16 + 100 tokens = 8 blocks. A enters
    # at step 0 (free 10 >= 8). At step 1 A holds 2 blocks and still claims 6; B's own claim is 8: 14 > 8 free,
    # so B waits until A finishes (step 49) and enters at step 50. With y = 0 the gate adds nothing.
    o = run([Req(0, 16, 50, reserve=reserve), Req(1, 16, 50, reserve=reserve)], model=model, num_blocks=11,
            block_size=16, admission=admission)
    assert steps(o.admit_ns)[1] == admit_b


def test_engine_config_checks() -> None:
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        EngineConfig(max_num_seqs=64, max_num_batched_tokens=32)
    with pytest.raises(ValueError):
        EngineConfig(watermark=1.0)
    with pytest.raises(InputError, match="engine.num_blocks"):
        EngineConfig(block_size=16).blocks_for(20)
    assert EngineConfig(block_size=16).blocks_for(1000) == 62
    assert EngineConfig(watermark=0.1).watermark_blocks(57) == 5
    with pytest.raises(InputError, match="timing.t0_s"):
        StepTiming(0.0, 0.0, 0.0)
