"""Runs vLLM 0.33's own ``EngineCore`` in this process, on CPU, with a given scheduler class and kvplan's
token-fabricating executor, and reports what happened (dev/test tooling, run in a vLLM environment by
:func:`kvplan_dev.vllm_overlay.run_engine_driver`): ``python -m kvplan_dev.vllm_engine_driver scenario.json`` writes
the result to the scenario's ``out`` path (vLLM logs to stdout).

Scenario (JSON): ``workdir``, ``engine`` (num_blocks, block_size, max_model_len, max_num_seqs,
max_num_batched_tokens, prefix_caching, policy), ``reservations`` (file content or null), ``file_updates``
(``[{"step": s, "content": str | null, "kind": ...}]``, written ConfigMap-style before engine-loop iteration
``s``; null removes the file; ``kind`` ``"bytes"`` takes base64 content, ``"fifo"`` / ``"dev-zero"`` put a FIFO or
a symlink to ``/dev/zero`` at the path; after each update the driver waits until the gated scheduler's reader
thread has checked the file, ``ReservationSource.sync``, so the update takes effect at iteration ``s`` whatever the
machine's speed), ``requests`` (``[{"id", "prompt": [token ids], "max_tokens", "arrival_step", "xargs",
"priority"}]``),
``variants`` (``[{"name", "scheduler_cls", "async"}]``, optionally ``"reservations"`` to start that variant with
another file content or none, and ``"reservations_kind"`` as ``kind`` above), ``max_steps``, ``record_attempts`` (default true; false for timing runs).

The clock is the engine loop's iteration (one ``EngineCore.step_fn`` call; it schedules at most once; requests
arrive at ``arrival_step`` iterations). Result per variant: per request the iterations that admitted it, the one
whose outputs finished it, preemptions and output
tokens; every admission attempt (a WAITING/PREEMPTED request reaching ``allocate_slots``) with the raw vLLM
state at that moment (free blocks, cached tokens, evictable cache hits, every running request's prompt, generated
tokens and allocated blocks) and whether the allocation was granted; the plugin's log lines. Observation only:
the wrappers installed here record and forward, they decide nothing.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


def _allocated(sched: Any, req_id: str) -> int:
    return sum(len(m.req_to_blocks.get(req_id, ())) for m in sched.kv_cache_manager.coordinator.single_type_managers)


def _generated(req: Any) -> int:
    return int(req.num_output_tokens) + int(getattr(req, "num_output_placeholders", 0))


def place_file(volume: Path, content: str | None, kind: str = "content") -> None:
    """Put one version of ``reservations.json`` into ``volume`` (see the module docstring for ``kind``)."""
    from kvplan_dev.mounted_configmap import write_configmap_volume

    target = volume / "reservations.json"
    if kind in ("fifo", "dev-zero"):
        volume.mkdir(parents=True, exist_ok=True)
        tmp = volume / "..hostile_tmp"
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        if kind == "fifo":
            os.mkfifo(tmp)
        else:
            tmp.symlink_to("/dev/zero")
        os.replace(tmp, target)  # atomic, like the kubelet's swap
    elif content is None:
        if target.is_symlink() or target.exists():
            target.unlink()
    else:
        if target.is_symlink() and os.readlink(target) != "..data/reservations.json":
            target.unlink()  # a hostile symlink put there earlier: the kubelet's key link comes back
        data = base64.b64decode(content) if kind == "bytes" else content
        write_configmap_volume(volume, {"reservations.json": data})


def run_variant(scenario: dict[str, Any], variant: dict[str, Any], model_dir: Path) -> dict[str, Any]:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.sampling_params import SamplingParams
    from vllm.v1.engine import EngineCoreRequest
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.request import RequestStatus

    from kvplan_dev.vllm_fake import TokenFabricatingExecutor

    eng = scenario["engine"]
    volume = Path(scenario["workdir"]) / variant["name"] / "volume"
    initial = variant["reservations"] if "reservations" in variant else scenario.get("reservations")
    kind = variant.get("reservations_kind", "content")
    if initial is not None or kind != "content":
        place_file(volume, initial, kind)
    os.environ["KVPLAN_RESERVATIONS_FILE"] = str(volume / "reservations.json")
    os.environ["KVPLAN_RESERVATIONS_CHECK_STEPS"] = "1"
    args = EngineArgs(
        model=str(model_dir), skip_tokenizer_init=True, enforce_eager=True, seed=0,
        num_gpu_blocks_override=eng["num_blocks"], block_size=eng["block_size"], max_model_len=eng["max_model_len"],
        max_num_seqs=eng["max_num_seqs"], max_num_batched_tokens=eng["max_num_batched_tokens"],
        enable_prefix_caching=eng["prefix_caching"], scheduling_policy=eng.get("policy", "fcfs"),
        distributed_executor_backend=TokenFabricatingExecutor, scheduler_cls=variant["scheduler_cls"],
    )
    cfg = args.create_engine_config()
    # vLLM's CPU platform turns async scheduling off; a GPU leaves it on. Turn it back on for the async variants so
    # EngineCore runs its batch-queue loop (step_with_batch_queue), as on a GPU.
    cfg.scheduler_config.async_scheduling = bool(variant["async"])
    # After the config (building it re-applies vLLM's logging configuration), before the scheduler exists.
    capture = _Capture()
    logging.getLogger("vllm.kvplan").addHandler(capture)
    core = EngineCore(cfg, executor_class=TokenFabricatingExecutor, log_stats=False)
    sched = core.scheduler

    # The clock is the engine loop's iteration (one EngineCore.step_fn call, which schedules at most once).
    clock = {"i": 0, "schedules": 0}
    per_req: dict[str, dict[str, Any]] = {
        r["id"]: {"admitted": [], "finished": None, "preemptions": 0, "tokens": 0} for r in scenario["requests"]
    }
    attempts: list[dict[str, Any]] = []

    inner_schedule = sched.schedule

    def schedule(*a: Any, **k: Any) -> Any:
        out = inner_schedule(*a, **k)
        fresh = {r.req_id for r in out.scheduled_new_reqs} | set(out.scheduled_cached_reqs.resumed_req_ids)
        for r in sched.running:
            if r.request_id in fresh:
                per_req[r.request_id]["admitted"].append(clock["i"])
        clock["schedules"] += 1
        return out

    sched.schedule = schedule

    inner_preempt = sched._preempt_request

    def preempt(request: Any, *a: Any, **k: Any) -> Any:
        per_req[request.request_id]["preemptions"] += 1
        return inner_preempt(request, *a, **k)

    sched._preempt_request = preempt

    manager = sched.kv_cache_manager
    inner_allocate = manager.allocate_slots
    record_attempts = bool(scenario.get("record_attempts", True))

    def allocate(request: Any, *a: Any, **k: Any) -> Any:
        if request.status not in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
            return inner_allocate(request, *a, **k)
        hit = k.get("new_computed_blocks")
        record = {
            "call": clock["i"], "req": request.request_id, "status": request.status.name,
            "prompt": int(request.num_prompt_tokens), "generated": _generated(request),
            "cached": int(request.num_computed_tokens) + int(k.get("num_new_computed_tokens", 0))
            + int(k.get("num_external_computed_tokens", 0)),
            "evictable_hit": sum(1 for g in (hit.blocks if hit is not None else ()) for b in g
                                 if b.ref_cnt == 0 and not getattr(b, "is_null", False)),
            "free": int(manager.block_pool.get_num_free_blocks()),
            "running": [[r.request_id, int(r.num_prompt_tokens), _generated(r), _allocated(sched, r.request_id)]
                        for r in sched.running],
        }
        result = inner_allocate(request, *a, **k)
        record["granted"] = result is not None
        attempts.append(record)
        return result

    if record_attempts:
        manager.allocate_slots = allocate

    gate_time = {"seconds": 0.0, "calls": 0}
    if hasattr(sched, "kvplan_admits"):
        inner_admits = sched.kvplan_admits

        def admits(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return inner_admits(*a, **k)
            finally:
                gate_time["seconds"] += time.perf_counter() - t0
                gate_time["calls"] += 1

        sched.kvplan_admits = admits

    began = time.perf_counter()
    pending = sorted(scenario["requests"], key=lambda r: (r["arrival_step"], r["id"]))
    updates = sorted(scenario.get("file_updates", []), key=lambda u: u["step"])
    max_steps = int(scenario.get("max_steps", 100000))
    unfinished = len(pending)
    while unfinished and clock["i"] < max_steps:
        while updates and updates[0]["step"] <= clock["i"]:
            update = updates.pop(0)
            place_file(volume, update["content"], update.get("kind", "content"))
            if hasattr(sched, "kvplan_source") and not sched.kvplan_source.sync(timeout=600):
                raise RuntimeError("the reservation reader did not check the file within 600 s")
        while pending and pending[0]["arrival_step"] <= clock["i"]:
            r = pending.pop(0)
            params = SamplingParams(max_tokens=r["max_tokens"], min_tokens=r["max_tokens"], ignore_eos=True,
                                    extra_args=r.get("xargs"))
            req = EngineCoreRequest(
                request_id=r["id"], prompt_token_ids=list(r["prompt"]), mm_features=None, sampling_params=params,
                pooling_params=None, arrival_time=float(r["arrival_step"]), lora_request=None, cache_salt=None,
                data_parallel_rank=None, priority=int(r.get("priority", 0)),
            )
            core.add_request(*core.preprocess_add_request(req))
        outputs, _ = core.step_fn()
        for eco in (outputs or {}).values():
            for o in eco.outputs:
                per_req[o.request_id]["tokens"] += len(o.new_token_ids)
                if o.finish_reason is not None:
                    per_req[o.request_id]["finished"] = clock["i"]
                    unfinished -= 1
        clock["i"] += 1
    seconds = time.perf_counter() - began
    refusals = int(getattr(sched, "kvplan_refusals", 0))
    core.shutdown()
    logging.getLogger("vllm.kvplan").removeHandler(capture)
    return {
        "requests": per_req, "attempts": attempts, "schedule_calls": clock["schedules"], "iterations": clock["i"],
        "complete": unfinished == 0, "refusals": refusals, "log": capture.lines,
        "async_loop": core.batch_queue is not None, "scheduler": type(sched).__name__, "seconds": seconds,
        "gate_seconds": gate_time["seconds"], "gate_calls": gate_time["calls"],
    }


def main() -> None:
    from kvplan_dev.vllm_cpu import write_model_dir

    scenario = json.loads(Path(sys.argv[1]).read_text())
    model_dir = write_model_dir(Path(scenario["workdir"]) / "model",
                                max_position_embeddings=scenario["engine"]["max_model_len"])
    results = {v["name"]: run_variant(scenario, v, model_dir) for v in scenario["variants"]}
    Path(scenario["out"]).write_text(json.dumps(results))


if __name__ == "__main__":
    main()
