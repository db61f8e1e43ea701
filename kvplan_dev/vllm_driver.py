"""The one driver of vLLM 0.33's real scheduler on CPU, for the parity tier and the plugin tests (dev/test tooling).

It runs **inside the vLLM environment**: the overlay of :mod:`kvplan_dev.vllm_overlay` (vLLM with kvplan and
kvplan-dev installed on top, as a user installs the plugins), never in kvplan's venv, and never imports the engine
model. Two ways in, one module, one model directory (:func:`kvplan_dev.vllm_cpu.write_model_dir`: ``config.json``
only; ``skip_tokenizer_init``, the CPU device):

- ``python -m kvplan_dev.vllm_driver < cases.json > results.json``: **scheduler steps** (:func:`run_case`), for
  the parity tier (:mod:`kvplan_dev.parity`, ``tests/vllm/test_parity.py``), which compares the answers with the
  vLLM engine model in ``kvcore.sim.engine``;
- ``python -m kvplan_dev.vllm_driver engine scenario.json``: **the engine loop** (:func:`run_variant`), vLLM's
  ``EngineCore`` in process with kvplan's token-fabricating executor, for the plugin tests
  (``tests/vllm/test_plugin_engine_loop.py``) and ``benchmarks/vllm_gate_overhead.py``, through
  :func:`kvplan_dev.vllm_overlay.run_engine_driver`.

Scheduler steps
---------------
A ``KVCacheConfig`` with one ``FullAttentionSpec`` group of ``num_blocks`` blocks, requests with
``SamplingParams(max_tokens=L, min_tokens=L, ignore_eos=True)``, and a fabricated ``ModelRunnerOutput`` with one
token for every scheduled request whose (re)computation reached the end of its known tokens. Step ``s`` (0, 1, 2,
...) is: add the requests whose ``arrival_step`` is ``s`` (in input order), ``schedule()``, then
``update_from_output()``. Nothing else runs between steps.

Token ids: request ``j`` of class ``c`` with shared prefix length ``prefix`` has the prompt
``[PREFIX_BASE + c] * min(prefix, P) + [UNIQUE_BASE + j] * (P - min(prefix, P))`` and generates
``UNIQUE_BASE + j`` at every step, so with prefix caching on only the class prefix is shared and a preempted request
can find its own blocks again; two requests never collide otherwise.

The reservation gate (``"gate": true``): kvplan's shipped scheduler class
``kvplan_vllm.scheduler.ReservationScheduler`` (the synchronous one; ``--scheduler-cls`` in a real deployment)
instead of vLLM's ``Scheduler``, reading a reservation file written for the case (classes ``c0``, ``c1``, ... with
``case["reserve"]``, through ``KVPLAN_RESERVATIONS_FILE``), each request's class in
``SamplingParams.extra_args["kvplan_class"]`` as kvplan's plugin reads it.

Input (stdin): ``{"cases": [case, ...]}``; a case is ``{"id", "block_size", "num_blocks", "max_model_len",
"watermark", "max_num_seqs", "max_num_batched_tokens", "policy", "prefix_caching", "gate", "reserve": [y per class],
"requests": [{"arrival_step", "prompt", "output", "cls", "priority", "prefix"}]}`` (requests sorted by arrival;
``max_model_len`` defaults to the longest request + 8).
Output (stdout, one JSON object): ``{"vllm": version, "cases": [{"id", "steps", "error", "requests": [{"admit_step",
"first_token_step", "finish_step", "preemptions", "recomputed", "cached", "max_gap_steps"}]}]}``. ``admit_step`` is
the first step that scheduled the request, ``finish_step`` the step whose output finished it; a token sampled by
step ``s`` exists at the end of it, time ``s + 1``. Progress goes to stderr.

The engine loop
---------------
Scenario (JSON): ``workdir``, ``out``, ``engine`` (num_blocks, block_size, max_model_len, max_num_seqs,
max_num_batched_tokens, prefix_caching, policy), ``reservations`` (file content or null), ``file_updates``
(``[{"step": s, "content": str | null, "kind": ...}]``, written ConfigMap-style before engine-loop iteration
``s``; null removes the file; ``kind`` ``"bytes"`` takes base64 content, ``"fifo"`` / ``"dev-zero"`` put a FIFO or
a symlink to ``/dev/zero`` at the path; after each update the driver waits until the gated scheduler's reader
thread has checked the file, ``ReservationSource.sync``, so the update takes effect at iteration ``s`` whatever the
machine's speed), ``requests`` (``[{"id", "prompt": [token ids], "max_tokens", "arrival_step", "xargs",
"priority"}]``), ``variants`` (``[{"name", "scheduler_cls", "async"}]``, optionally ``"reservations"`` to start that
variant with another file content or none, and ``"reservations_kind"`` as ``kind`` above), ``max_steps``, ``record_attempts`` (default true; false for timing
runs); the result goes to ``out`` (vLLM logs to stdout).

The clock is the engine loop's iteration (one ``EngineCore.step_fn`` call; it schedules at most once; requests
arrive at ``arrival_step`` iterations). Result per variant: per request the iterations that admitted it, the one
whose outputs finished it, preemptions and output tokens; every admission attempt (a WAITING/PREEMPTED request
reaching ``allocate_slots``) with the raw vLLM state at that moment (free blocks, cached tokens, evictable cache
hits, every running request's prompt, generated tokens and allocated blocks) and whether the allocation was
granted; the plugin's log lines. Observation only: the wrappers installed here record and forward, they decide
nothing.
"""


from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kvplan_dev.vllm_cpu import write_model_dir

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

PREFIX_BASE = 10
UNIQUE_BASE = 1000


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
    model_dir = str(write_model_dir(Path(tempfile.mkdtemp(prefix="kvplan-vllm-model-")),
                                    max_position_embeddings=max_len, vocab_size=1 << 20))
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


def run_cases() -> int:
    """Scheduler steps: the cases on stdin, the answers on stdout (module docstring)."""
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
        # A hostile entry put there earlier is swapped back to the kubelet's key link in one rename.
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
    unknown = _unknown_class_counts()
    core.shutdown()
    logging.getLogger("vllm.kvplan").removeHandler(capture)
    return {
        "requests": per_req, "attempts": attempts, "schedule_calls": clock["schedules"], "iterations": clock["i"],
        "complete": unfinished == 0, "refusals": refusals, "log": capture.lines,
        "async_loop": core.batch_queue is not None, "scheduler": type(sched).__name__, "seconds": seconds,
        "gate_seconds": gate_time["seconds"], "gate_calls": gate_time["calls"], "unknown_class_requests": unknown,
    }


def _unknown_class_counts() -> dict[str, float]:
    """The plugin's counter of requests naming no known class, per channel, so far in this process (cumulative over
    the variants run in it); empty where the plugin is not installed."""
    try:
        from prometheus_client import REGISTRY

        from kvplan_vllm.metrics import CHANNEL_LABEL, UNKNOWN_CLASS_REQUESTS
    except ImportError:
        return {}
    return {ch: float(REGISTRY.get_sample_value(UNKNOWN_CLASS_REQUESTS, {CHANNEL_LABEL: ch}) or 0.0)
            for ch in ("vllm_xargs", "priority")}


def run_scenario(path: Path) -> None:
    """The engine loop: every variant of the scenario at ``path``, the result to its ``out`` (module docstring)."""
    scenario = json.loads(path.read_text())
    model_dir = write_model_dir(Path(scenario["workdir"]) / "model",
                                max_position_embeddings=scenario["engine"]["max_model_len"])
    results = {v["name"]: run_variant(scenario, v, model_dir) for v in scenario["variants"]}
    Path(scenario["out"]).write_text(json.dumps(results))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["engine"] and len(args) == 2:
        run_scenario(Path(args[1]))
        return 0
    if not args:
        return run_cases()
    print("usage: python -m kvplan_dev.vllm_driver < cases.json | python -m kvplan_dev.vllm_driver engine "
          "scenario.json", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
