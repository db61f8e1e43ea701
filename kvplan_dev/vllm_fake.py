"""A vLLM 0.33 executor that fabricates tokens instead of running a model, so a whole ``vllm serve`` (API server,
engine core, scheduler, stat loggers, ``/metrics``) runs on a machine without a GPU.

Use it with ``--distributed-executor-backend kvplan_dev.vllm_fake.TokenFabricatingExecutor`` plus
``--skip-tokenizer-init --enforce-eager --num-gpu-blocks-override N`` and ``VLLM_TARGET_DEVICE=cpu``, on a model
directory that holds only a small ``config.json`` (:func:`kvplan_dev.vllm_cpu.write_model_dir`). Prompts are token ids.

What it fabricates, like vLLM's own model runner: a request scheduled in a step gets one sampled token when,
after the step, its computed tokens reach all its known tokens (prompt plus the tokens sampled so far); a step
that computes only part of a prompt (chunked prefill) samples nothing. The token id is always
:data:`FABRICATED_TOKEN_ID`; requests say how long to run with ``max_tokens`` and ``ignore_eos``. Everything else
(KV blocks, admission, preemption, stop checks, output processing) is vLLM's own code.

Three switches for tests, by environment variable (read in the engine-core process):

- ``KVPLAN_FAKE_STEP_LOG=<path>``: append one JSON line per executed step: the step's index, the requests
  admitted (new), resumed after preemption, their scheduled tokens and those finished since the last step;
- ``KVPLAN_FAKE_STEP_CLOCK=<json>``: make each step last as long as the step of the layout it names would take
  (:mod:`kvplan_dev.twin.step_clock`, kvcore's measured step-time model, or a given law), counting the engine's own
  work in it, for the twin's pods;
- ``KVPLAN_FAKE_ASYNC_SCHEDULING=1``: turn async scheduling back on. vLLM's CPU platform forces it off
  (``vllm/platforms/cpu.py``); a GPU platform leaves it on, and then the engine core runs its batch-queue loop
  (``step_with_batch_queue``) with an ``AsyncScheduler``. The engine core reads the flag after building the
  executor, so setting it here gives the GPU loop on CPU.

Dev/test tooling: this module imports vLLM and is used only inside a vLLM environment (never by kvcore or the
operator).
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import torch
from vllm.v1.attention.backends.utils import record_kv_cache_layout
from vllm.v1.core.sched.output import GrammarOutput, SchedulerOutput
from vllm.v1.executor.abstract import Executor
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheSpec
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, DraftTokenIds, ModelRunnerOutput
from vllm.v1.worker.worker_base import CompilationTimes

if TYPE_CHECKING:
    from kvplan_dev.twin.step_clock import StepClock

#: The token every fabricated step samples (any id below the model's vocabulary size; never an EOS that matters,
#: since requests set ``ignore_eos``).
FABRICATED_TOKEN_ID = 7
#: KV layout of the one fabricated attention layer (tiny: the memory is never touched), as in write_model_dir.
_NUM_KV_HEADS = 1
_HEAD_SIZE = 64
#: Bytes reported as free for the KV cache; ``--num-gpu-blocks-override`` sets the real block count.
_AVAILABLE_BYTES = 1 << 34
ENV_STEP_LOG = "KVPLAN_FAKE_STEP_LOG"
ENV_ASYNC = "KVPLAN_FAKE_ASYNC_SCHEDULING"
ENV_CLOCK = "KVPLAN_FAKE_STEP_CLOCK"
"""The same name as :data:`kvplan_dev.twin.step_clock.ENV` (imported only when set: it pulls in kvcore)."""


@dataclass
class _ReqState:
    """What the fabricating runner knows of one request: its prompt length, tokens computed into KV and tokens
    known (prompt plus sampled)."""

    prompt: int
    computed: int
    known: int


class TokenFabricator:
    """The model-runner half: ``SchedulerOutput`` in, ``ModelRunnerOutput`` out, one token per request whose known
    tokens are all computed after the step."""

    def __init__(self, token_id: int = FABRICATED_TOKEN_ID) -> None:
        self.token_id = token_id
        self.requests: dict[str, _ReqState] = {}
        self.decode_contexts: list[float] = []
        """The last step's decoding sequences, each by its context (tokens), for the step clock."""
        self.prefill_chunks: list[tuple[float, float]] = []
        """The last step's prefill chunks: (tokens, context before the chunk)."""

    def forget(self, finished: set[str]) -> None:
        """Drop finished requests."""
        for req_id in finished:
            self.requests.pop(req_id, None)

    def run(self, out: SchedulerOutput) -> ModelRunnerOutput:
        """Advance every scheduled request by its scheduled tokens and sample where a request is caught up."""
        self.forget(out.finished_req_ids)
        for new in out.scheduled_new_reqs:
            prompt = len(new.prompt_token_ids or [])
            self.requests[new.req_id] = _ReqState(prompt=prompt, computed=new.num_computed_tokens, known=prompt)
        cached = out.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            if req_id in cached.resumed_req_ids:
                # A resumed (preempted) request recomputes from what the scheduler says is cached; its known
                # tokens are its prompt plus the outputs the scheduler has recorded (stale in-flight samples the
                # scheduler dropped are dropped here too).
                state = self.requests[req_id]
                state.computed = cached.num_computed_tokens[i]
                state.known = state.prompt + cached.num_output_tokens[i]
        req_ids: list[str] = []
        sampled: list[list[int]] = []
        self.decode_contexts, self.prefill_chunks = [], []
        for req_id, num in out.num_scheduled_tokens.items():
            state = self.requests[req_id]
            if num == 1 and state.computed >= state.prompt:
                self.decode_contexts.append(float(state.computed))
            else:
                self.prefill_chunks.append((float(num), float(state.computed)))
            state.computed += num
            tokens: list[int] = []
            if state.computed >= state.known:
                tokens = [self.token_id]
                state.known += 1
            req_ids.append(req_id)
            sampled.append(tokens)
        return ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={r: i for i, r in enumerate(req_ids)},
            sampled_token_ids=sampled,
        )


class _FakeWorker:
    """The worker RPCs the engine core calls during start-up, answered without a device."""

    def __init__(self, executor: "TokenFabricatingExecutor") -> None:
        self.executor = executor

    def get_kv_cache_spec(self) -> dict[str, KVCacheSpec]:
        block_size = self.executor.cache_config.block_size or 16
        return {
            "model.layers.0.self_attn.attn": FullAttentionSpec(
                block_size=block_size, num_kv_heads=_NUM_KV_HEADS, head_size=_HEAD_SIZE, dtype=torch.float16
            )
        }

    def get_supported_kv_cache_layouts(self) -> list[str]:
        return ["NHD"]

    def set_kv_cache_layout(self, layout: str, cp_kv_cache_interleave_size: int) -> None:
        record_kv_cache_layout(self.executor.cache_config, layout)
        self.executor.parallel_config.cp_kv_cache_interleave_size = cp_kv_cache_interleave_size

    def determine_available_memory(self) -> int:
        return _AVAILABLE_BYTES

    def initialize_from_config(self, kv_cache_config: Any) -> None:
        return None

    def compile_or_warm_up_model(self) -> CompilationTimes:
        return CompilationTimes(0.0, 0.0)

    def get_supported_tasks(self) -> tuple[str, ...]:
        return ("generate",)

    def supports_draft_weight_updates(self) -> bool:
        return False

    def check_health(self) -> None:
        return None

    def update_max_model_len(self, max_model_len: int) -> None:
        return None

    def take_draft_token_ids(self) -> DraftTokenIds | None:
        return None

    def __getattr__(self, name: str) -> Callable[..., None]:
        # Housekeeping RPCs (synchronize_device, reset caches, shutdown, ...) have nothing to do here.
        def noop(*args: Any, **kwargs: Any) -> None:
            return None

        return noop


def _done(value: Any) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_result(value)
    return future


class TokenFabricatingExecutor(Executor):
    """An ``Executor`` for ``--distributed-executor-backend``: no workers, no device, tokens fabricated by
    :class:`TokenFabricator`. Supports async scheduling (its futures are already resolved), so vLLM's default
    async engine loop and the ``AsyncScheduler`` path run as they would on a GPU."""

    uses_ray = False
    supports_pp = False

    def _init_executor(self) -> None:
        self._worker = _FakeWorker(self)
        self._fabricator = TokenFabricator()
        self._pending: list[tuple[SchedulerOutput, float]] = []
        """Each step handed to the executor and not yet sampled, with when it was handed over (monotonic s)."""
        self._steps = 0
        self._step_log = os.environ.get(ENV_STEP_LOG) or None
        self._clock: StepClock | None = None
        self._last_end: float | None = None
        """When the previous step's output was returned (monotonic seconds)."""
        if os.environ.get(ENV_CLOCK):
            from kvplan_dev.twin.step_clock import ClockSpec, StepClock

            self._clock = StepClock(ClockSpec.from_env(os.environ[ENV_CLOCK]))
        if os.environ.get(ENV_ASYNC) == "1":
            self.vllm_config.scheduler_config.async_scheduling = True

    @classmethod
    def supports_async_scheduling(cls) -> bool:
        return True

    def collective_rpc(  # type: ignore[override]
        self,
        method: str | Callable[..., Any],
        timeout: float | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        non_block: bool = False,
    ) -> Any:
        if isinstance(method, str):
            fn = getattr(self._worker, method)
        else:
            def fn(*a: Any, **k: Any) -> Any:
                return method(self._worker, *a, **k)
        result = [fn(*args, **(kwargs or {}))]
        return _done(result) if non_block else result

    def execute_model(  # type: ignore[override]
        self, scheduler_output: SchedulerOutput, non_block: bool = False
    ) -> Any:
        # Like the GPU runner: an empty step returns an empty output at once; otherwise execute_model returns None
        # and sample_tokens returns the step's output.
        if scheduler_output.total_num_scheduled_tokens == 0:
            self._fabricator.forget(scheduler_output.finished_req_ids)
            self._steps += 1
            return _done(EMPTY_MODEL_RUNNER_OUTPUT) if non_block else EMPTY_MODEL_RUNNER_OUTPUT
        self._pending.append((scheduler_output, time.monotonic()))
        if self._step_log is not None and scheduler_output.total_num_scheduled_tokens > 0:
            self._log_step(scheduler_output)
        self._steps += 1
        return _done(None) if non_block else None

    def _log_step(self, out: SchedulerOutput) -> None:
        record = {
            "step": self._steps,
            "new": [r.req_id for r in out.scheduled_new_reqs],
            "resumed": sorted(out.scheduled_cached_reqs.resumed_req_ids),
            "scheduled": dict(out.num_scheduled_tokens),
            "finished": sorted(out.finished_req_ids),
        }
        with open(self._step_log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")

    def sample_tokens(  # type: ignore[override]
        self, grammar_output: GrammarOutput | None, non_block: bool = False
    ) -> Any:
        step, began = self._pending.pop(0)
        output = self._fabricator.run(step)
        if self._clock is not None:  # the step takes as long as the layout's would (the twin's pods)
            self._wait_out(began, self._clock.seconds(self._fabricator.decode_contexts,
                                                      self._fabricator.prefill_chunks))
        return _done(output) if non_block else output

    def _wait_out(self, began: float, seconds: float) -> None:
        """Return ``seconds`` after the step began: after the previous step's output when the engine went straight
        on (the engine core's own work between steps, its scheduling and output handling, is inside the step, as
        it is on a GPU), else after the step was handed over. Sleeping to that deadline, instead of for
        ``seconds`` after the work, keeps each step at the clock's length however loaded the machine is, as long
        as the engine's work fits in it."""
        if self._last_end is not None and began - self._last_end < seconds:
            began = self._last_end
        delay = began + seconds - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        self._last_end = time.monotonic()

    def take_draft_token_ids(self) -> DraftTokenIds | None:
        return None

    def check_health(self) -> None:
        return None

    def shutdown(self) -> None:
        return None
