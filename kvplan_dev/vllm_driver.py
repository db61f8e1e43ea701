"""Drive vLLM 0.33's own V1 ``Scheduler`` on CPU, step by step, on cases given as JSON; print what it did as JSON.

This file runs **inside the vLLM environment** (``kvplan_dev.vllm_env``), not in kvplan's venv: for stock cases it
imports only vLLM, torch (through vLLM) and the standard library; gate cases import kvplan's shipped plugin
(``kvplan_vllm``, installed on top of vLLM by :mod:`kvplan_dev.vllm_overlay`), never the engine model. kvplan's
parity tier starts it as a subprocess
(``python vllm_driver.py < cases.json > results.json``) and compares its answers with the vLLM engine model in
``kvcore.sim.engine``.

How vLLM is driven (DATAPLANE.md, "vLLM on a machine without a GPU"): a model directory holding only a small
``config.json``, ``skip_tokenizer_init=True``, the CPU device, a ``KVCacheConfig`` with one ``FullAttentionSpec``
group of ``num_blocks`` blocks, requests with ``SamplingParams(max_tokens=L, min_tokens=L, ignore_eos=True)``, and
a fabricated ``ModelRunnerOutput`` with one token for every scheduled request whose (re)computation reached the end
of its known tokens. Step ``s`` (0, 1, 2, ...) is: add the requests whose ``arrival_step`` is ``s`` (in input
order), ``schedule()``, then ``update_from_output()``. Nothing else runs between steps.

Token ids: request ``j`` of class ``c`` with shared prefix length ``prefix`` has the prompt
``[PREFIX_BASE + c] * min(prefix, P) + [UNIQUE_BASE + j] * (P - min(prefix, P))`` and generates
``UNIQUE_BASE + j`` at every step, so with prefix caching on only the class prefix is shared and a preempted request
can find its own blocks again; two requests never collide otherwise.

The reservation gate (``"gate": true``): kvplan's shipped scheduler class
``kvplan_vllm.scheduler.ReservationScheduler`` (the synchronous one; ``--scheduler-cls`` in a real deployment)
instead of vLLM's ``Scheduler``, reading a reservation file written for the case (classes ``c0``, ``c1``, ... with
``case["reserve"]``, through ``KVPLAN_RESERVATIONS_FILE``), each request's class in
``SamplingParams.extra_args["kvplan_class"]`` as kvplan's plugin reads it. Gate cases therefore need an interpreter
where kvplan is installed on top of vLLM (:mod:`kvplan_dev.vllm_overlay`); stock cases import vLLM only.

Input (stdin): ``{"cases": [case, ...]}``; a case is ``{"id", "block_size", "num_blocks", "max_model_len",
"watermark", "max_num_seqs", "max_num_batched_tokens", "policy", "prefix_caching", "gate", "reserve": [y per class],
"requests": [{"arrival_step", "prompt", "output", "cls", "priority", "prefix"}]}`` (requests sorted by arrival;
``max_model_len`` defaults to the longest request + 8).
Output (stdout, one JSON object): ``{"vllm": version, "cases": [{"id", "steps", "error", "requests": [{"admit_step",
"first_token_step", "finish_step", "preemptions", "recomputed", "cached", "max_gap_steps"}]}]}``. ``admit_step`` is
the first step that scheduled the request, ``finish_step`` the step whose output finished it; a token sampled by
step ``s`` exists at the end of it, time ``s + 1``. Progress goes to stderr.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

PREFIX_BASE = 10
UNIQUE_BASE = 1000


def _model_dir(max_len: int) -> str:
    path = tempfile.mkdtemp(prefix="kvplan-vllm-model-")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_hidden_layers": 1,
        "vocab_size": 1 << 20,
        "max_position_embeddings": max_len,
        "torch_dtype": "float32",
        "rms_norm_eps": 1e-5,
    }
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as fh:
        json.dump(config, fh)
    return path


def build_scheduler(case: dict[str, Any], model_dir: str, max_len: int) -> Any:
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    block_size = int(case["block_size"])
    num_blocks = int(case["num_blocks"])
    model = ModelConfig(model=model_dir, skip_tokenizer_init=True, max_model_len=max_len, dtype="float32")
    sched = SchedulerConfig(
        max_num_seqs=int(case["max_num_seqs"]),
        max_num_batched_tokens=int(case["max_num_batched_tokens"]),
        max_model_len=max_len,
        enable_chunked_prefill=True,
        policy=case.get("policy", "fcfs"),
        watermark=float(case.get("watermark", 0.0)),
        is_encoder_decoder=False,
    )
    cache = CacheConfig(block_size=block_size, enable_prefix_caching=bool(case.get("prefix_caching", False)))
    cache.num_gpu_blocks = num_blocks
    vllm_config = VllmConfig(model_config=model, scheduler_config=sched, cache_config=cache,
                             device_config=DeviceConfig(device="cpu"))
    kv_config = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer.0"], FullAttentionSpec(
            block_size=block_size, num_kv_heads=1, head_size=16, dtype=torch.float32))],
    )
    scheduler_cls: Any = Scheduler
    if case.get("gate"):
        from kvplan_vllm.scheduler import ReservationScheduler

        scheduler_cls = ReservationScheduler
        os.environ["KVPLAN_RESERVATIONS_FILE"] = reservation_file(case, _reservations_dir())
    scheduler = scheduler_cls(vllm_config=vllm_config, kv_cache_config=kv_config,
                              structured_output_manager=StructuredOutputManager(vllm_config),
                              block_size=block_size, log_stats=False)
    if case.get("gate") and not scheduler.kvplan_source.current.reserve_tokens:
        raise SystemExit(f"case {case['id']}: the plugin did not load its reservation file "
                         f"({scheduler.kvplan_source.state.problem})")
    return scheduler


_RES_DIR: list[str] = []


def _reservations_dir() -> str:
    """One temporary folder for the run's reservation files (the plugin re-reads its file while the case runs)."""
    if not _RES_DIR:
        _RES_DIR.append(tempfile.mkdtemp(prefix="kvplan-reservations-"))
    return _RES_DIR[0]


def reservation_file(case: dict[str, Any], folder: str) -> str:
    """The case's reservations as kvplan's reservation file (``kvplan.reservations.v1``), in ``folder``."""
    path = os.path.join(folder, f"reservations-{case['id']}.json")
    doc = {"format": "kvplan.reservations.v1", "kvplan": "parity/driver", "plan": str(case["id"]), "defaultClass": "c0",
           "classes": {f"c{k}": {"reserveTokens": int(y)} for k, y in enumerate(case["reserve"])}}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    return path


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    """Replay one case step by step; per-request outcomes in input order."""
    from vllm import SamplingParams
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    reqs = case["requests"]
    max_len = int(case.get("max_model_len") or max(int(r["prompt"]) + int(r["output"]) for r in reqs) + 8)
    model_dir = _model_dir(max_len)
    try:
        scheduler = build_scheduler(case, model_dir, max_len)
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)
    hasher = None
    if case.get("prefix_caching"):
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

        hash_fn = get_hash_fn_by_name(scheduler.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        hasher = get_request_block_hasher(int(case["block_size"]), hash_fn)
    n = len(reqs)
    res = [{"admit_step": -1, "first_token_step": -1, "finish_step": -1, "preemptions": 0, "recomputed": 0,
            "cached": 0, "max_gap_steps": 0} for _ in range(n)]
    high = [0] * n
    last_token = [-1] * n
    index = {f"r{j:06d}": j for j in range(n)}
    objects: dict[int, Any] = {}
    pending = 0
    step = 0
    steps_run = 0
    error = None
    while pending < n or scheduler.get_num_unfinished_requests() > 0:
        if scheduler.get_num_unfinished_requests() == 0:
            step = max(step, int(reqs[pending]["arrival_step"]))
        while pending < n and int(reqs[pending]["arrival_step"]) <= step:
            spec = reqs[pending]
            j = pending
            prompt_len, own = int(spec["prompt"]), min(int(spec["prefix"]), int(spec["prompt"]))
            tokens = [PREFIX_BASE + int(spec["cls"])] * own + [UNIQUE_BASE + j] * (prompt_len - own)
            params = SamplingParams(max_tokens=int(spec["output"]), min_tokens=int(spec["output"]), ignore_eos=True,
                                    extra_args={"kvplan_class": f"c{int(spec['cls'])}"})
            request = Request(request_id=f"r{j:06d}", prompt_token_ids=tokens, sampling_params=params,
                              pooling_params=None, arrival_time=float(j), priority=int(spec["priority"]),
                              block_hasher=hasher)
            objects[j] = request
            scheduler.add_request(request)
            pending += 1
        out = scheduler.schedule()
        scheduled = dict(out.num_scheduled_tokens)
        if not scheduled:
            error = f"step {step}: nothing scheduled with {len(scheduler.waiting)} waiting (it would hang)"
            break
        ids, sampled = [], []
        for rid, count in scheduled.items():
            j = index[rid]
            request = objects[j]
            start = request.num_computed_tokens - count
            if res[j]["admit_step"] < 0:
                res[j]["admit_step"] = step
                res[j]["cached"] = start
            res[j]["recomputed"] += max(0, min(start + count, high[j]) - start)
            high[j] = max(high[j], start + count)
            ids.append(rid)
            sampled.append([UNIQUE_BASE + j] if request.num_computed_tokens >= request.num_tokens else [])
        scheduler.update_from_output(out, ModelRunnerOutput(
            req_ids=ids, req_id_to_index={rid: i for i, rid in enumerate(ids)}, sampled_token_ids=sampled))
        steps_run += 1
        for rid, tok in zip(ids, sampled):
            if not tok:
                continue
            j = index[rid]
            if last_token[j] < 0:
                res[j]["first_token_step"] = step
            else:
                res[j]["max_gap_steps"] = max(res[j]["max_gap_steps"], step + 1 - last_token[j])
            last_token[j] = step + 1
            request = objects[j]
            if request.is_finished():
                res[j]["finish_step"] = step
                res[j]["preemptions"] = request.num_preemptions
        step += 1
    for j, request in objects.items():
        res[j]["preemptions"] = request.num_preemptions
    return {"id": case["id"], "steps": steps_run, "error": error, "requests": res}


def main() -> int:
    started = time.monotonic()
    spec = json.load(sys.stdin)
    import vllm

    results = []
    cases = spec["cases"]
    for i, case in enumerate(cases):
        results.append(run_case(case))
        if (i + 1) % 20 == 0 or i + 1 == len(cases):
            print(f"[vllm-driver] {i + 1}/{len(cases)} cases, {time.monotonic() - started:.0f} s", file=sys.stderr,
                  flush=True)
    for folder in _RES_DIR:
        shutil.rmtree(folder, ignore_errors=True)
    json.dump({"vllm": vllm.__version__, "cases": results}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
