"""Parity of kvcore's vLLM engine model with vLLM 0.33 itself: the same seeded cases through vLLM's own V1
``Scheduler`` (driven on CPU by :mod:`kvplan_dev.vllm_driver`, the one driver, in the overlay on the cached vLLM venv) and through both engine models
(:func:`kvcore.sim.engine.run_reference`, :func:`~kvcore.sim.engine.run_fast`), compared request by request.

Two groups of seeded random cases:

- ``stock``: vLLM's scheduler as shipped. Prompt and output lengths (short, long, chunked), block sizes 1..32,
  block counts from just enough for the largest request to 4x that, watermark 0..0.3, ``max_num_seqs`` 1..16,
  ``max_num_batched_tokens`` from ``max_num_seqs`` to 2048, ``fcfs`` and ``priority`` (priorities 0..3), arrivals
  spread over steps (bursts and gaps), prefix caching on and off with shared class prefixes.
- ``gate``: the same space through kvplan's shipped scheduler class ``kvplan_vllm.scheduler.ReservationScheduler``
  (per-class y from a reservation file; vLLM with kvplan installed on top, :mod:`kvplan_dev.vllm_overlay`).

Per request, ``admit_step`` (first step that scheduled it), ``preemptions`` and ``finish_step`` must be identical;
``first_token_step``, the longest gap, recomputed and prefix-cached tokens are compared too and reported. The
result is one JSON object ``{"cases": N, "identical": M, "mismatches": [...], "vllm": "0.33.0", ...}``.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from kvcore import EngineConfig, GroupEngine, Jobs, StepTiming, run_fast, run_reference
from kvcore import capped_reserve
from kvplan_dev.vllm_env import VLLM_VERSION, ensure_vllm_env
from kvplan_dev.vllm_overlay import make_overlay

REPO = Path(__file__).resolve().parent.parent
DRIVER = "kvplan_dev.vllm_driver"
"""The one driver of vLLM's scheduler (the plugin tests use it too), run as ``python -m`` in the overlay."""
S = 1_000_000_000
REQUIRED = ("admit_step", "preemptions", "finish_step")
"""Fields that must be identical; the others in :data:`COMPARED` are compared and reported as well."""
COMPARED = REQUIRED + ("first_token_step", "max_gap_steps", "recomputed", "cached")


def random_case(seed: int, *, gate: bool) -> dict[str, Any]:
    """One seeded case in the driver's format (module docstring for the space it covers)."""
    rnd = random.Random(seed)
    bs = rnd.choice([1, 2, 4, 8, 16, 16, 32])
    n = rnd.randint(5, 50)
    policy = rnd.choice(["fcfs", "priority"])
    n_cls = rnd.randint(1, 3)
    prefix = [rnd.choice([0, bs * rnd.randint(1, 6), rnd.randint(1, 200)]) for _ in range(n_cls)]
    long_prompts = rnd.random() < 0.3
    reqs, step = [], 0
    for _ in range(n):
        step += rnd.choice([0, 0, 0, 1, 2, 3, 8])
        c = rnd.randrange(n_cls)
        reqs.append({"arrival_step": step, "prompt": rnd.randint(1, 600 if long_prompts else 150),
                     "output": rnd.randint(1, rnd.choice([10, 60, 200])), "cls": c,
                     "priority": rnd.randint(0, 3) if policy == "priority" else 0,
                     "prefix": prefix[c] if rnd.random() < 0.7 else 0})
    reserve = [rnd.choice([0, rnd.randint(1, 100), rnd.randint(1, 300)]) for _ in range(n_cls)]
    need = max(-(-(r["prompt"] + max(r["output"] - 1, reserve[r["cls"]] if gate else 0)) // bs) for r in reqs)
    seqs = rnd.randint(1, 16)
    return {"id": f"{'gate' if gate else 'stock'}-{seed}", "block_size": bs,
            "max_model_len": max(r["prompt"] + r["output"] for r in reqs) + 8,
            "num_blocks": need + 1 + rnd.randint(0, 3 * need), "watermark": rnd.choice([0.0, 0.0, 0.01, 0.05, 0.1, 0.3]),
            "max_num_seqs": seqs, "max_num_batched_tokens": max(seqs, rnd.choice([seqs, 16, 48, 128, 512, 2048])),
            "policy": policy, "prefix_caching": rnd.random() < 0.5, "gate": gate, "reserve": reserve,
            "requests": reqs}


def case_jobs(case: dict[str, Any]) -> Jobs:
    """The engine models' input for one driver case: one replica, every step 1 s, arrival step s at time s."""
    engine = EngineConfig(block_size=case["block_size"], num_blocks=case["num_blocks"], watermark=case["watermark"],
                          max_num_seqs=case["max_num_seqs"], max_num_batched_tokens=case["max_num_batched_tokens"],
                          policy=case["policy"], prefix_caching=case["prefix_caching"],
                          admission="gate" if case["gate"] else "vllm", max_model_len=case["max_model_len"])
    reqs = case["requests"]
    capacity = min(case["max_model_len"], (case["num_blocks"] - 1) * case["block_size"])
    return Jobs(arrival_ns=[r["arrival_step"] * S for r in reqs], prompt=[r["prompt"] for r in reqs],
                output=[r["output"] for r in reqs], cls=[r["cls"] for r in reqs],
                priority=[r["priority"] for r in reqs], prefix=[r["prefix"] for r in reqs],
                reserve=[capped_reserve(case["reserve"][r["cls"]], r["prompt"], capacity) for r in reqs],
                group=[0] * len(reqs),
                groups=(GroupEngine(1, case["num_blocks"], engine, StepTiming(1.0, 0.0, 0.0)),))


def model_results(case: dict[str, Any], *, fast: bool) -> list[dict[str, int]]:
    """The engine model's per-request answers in the driver's units (steps)."""
    o = (run_fast if fast else run_reference)(case_jobs(case))
    return [{"admit_step": int(o.admit_ns[j]) // S, "preemptions": int(o.preemptions[j]),
             "finish_step": int(o.finish_step_ns[j]) // S, "first_token_step": int(o.first_token_ns[j]) // S - 1,
             "max_gap_steps": int(o.max_gap_ns[j]) // S, "recomputed": int(o.recomputed[j]),
             "cached": int(o.cached[j])} for j in range(len(case["requests"]))]


def compare(case: dict[str, Any], vllm: dict[str, Any]) -> dict[str, Any] | None:
    """None when vLLM and both models agree on every compared field; else the first differences."""
    if vllm.get("error"):
        return {"case": case["id"], "error": vllm["error"]}
    diffs = []
    for label, fast in (("reference", False), ("fast", True)):
        for j, (want, got) in enumerate(zip(vllm["requests"], model_results(case, fast=fast))):
            for key in COMPARED:
                if want[key] != got[key]:
                    diffs.append({"model": label, "request": j, "field": key, "vllm": want[key], "model_value": got[key],
                                  "required": key in REQUIRED})
    if not diffs:
        return None
    return {"case": case["id"], "differences": len(diffs), "first": diffs[:5]}


def run_driver(python: Path, cases: list[dict[str, Any]], progress: Callable[[str], None]) -> dict[str, Any]:
    """Run the driver in the vLLM venv on ``cases``; relays its progress lines."""
    env = {"PYTHONSAFEPATH": "1", "PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "VLLM_LOGGING_LEVEL": "ERROR",
           "VLLM_TARGET_DEVICE": "cpu", "TOKENIZERS_PARALLELISM": "false"}
    with tempfile.TemporaryDirectory(prefix="kvplan-parity-") as tmp:
        spec, answer = Path(tmp) / "cases.json", Path(tmp) / "answers.json"
        spec.write_text(json.dumps({"cases": cases}))
        with spec.open() as stdin, answer.open("w") as stdout:
            proc = subprocess.Popen([str(python), "-m", DRIVER], stdin=stdin, stdout=stdout, stderr=subprocess.PIPE,
                                    text=True, cwd=tmp, env=env)
            assert proc.stderr is not None
            lines = []
            for line in proc.stderr:
                lines.append(line)
                if line.startswith("[vllm-driver]"):
                    progress(line.rstrip())
            if proc.wait() != 0:
                raise RuntimeError(f"the vLLM driver exited {proc.returncode}:\n{''.join(lines[-40:])}")
        result: dict[str, Any] = json.loads(answer.read_text())
    return result


def run_parity(stock_cases: int = 200, gate_cases: int = 60, seed: int = 0,
               progress: Callable[[str], None] = print) -> dict[str, Any]:
    """The whole parity run; returns the report (module docstring)."""
    started = time.monotonic()
    base = ensure_vllm_env(progress=progress)
    cases = [random_case(seed + i, gate=False) for i in range(stock_cases)]
    cases += [random_case(seed + 100_000 + i, gate=True) for i in range(gate_cases)]
    progress(f"[parity] {len(cases)} cases through vLLM {VLLM_VERSION}'s scheduler on CPU ...")
    with tempfile.TemporaryDirectory(prefix="kvplan-parity-overlay-") as tmp:
        python = make_overlay(Path(base), Path(tmp), REPO)  # vLLM + kvplan's plugin, the way a user installs it
        answer = run_driver(python, cases, progress)
    by_id = {c["id"]: c for c in answer["cases"]}
    mismatches, groups = [], {"stock": [0, 0], "gate": [0, 0]}
    for case in cases:
        group = groups["gate" if case["gate"] else "stock"]
        group[0] += 1
        bad = compare(case, by_id[case["id"]])
        if bad is None:
            group[1] += 1
        else:
            mismatches.append(bad)
    identical = sum(g[1] for g in groups.values())
    return {"cases": len(cases), "identical": identical, "mismatches": mismatches, "vllm": answer["vllm"],
            "groups": {k: {"cases": v[0], "identical": v[1]} for k, v in groups.items()},
            "gate_impl": "kvplan_vllm.scheduler.ReservationScheduler",
            "steps": sum(c["steps"] for c in answer["cases"]), "seconds": round(time.monotonic() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="kvcore's vLLM engine model against vLLM 0.33's own scheduler")
    parser.add_argument("--cases", type=int, default=200, help="stock-scheduler cases (default 200)")
    parser.add_argument("--gate-cases", type=int, default=60, help="reservation-gate cases (default 60)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    report = run_parity(args.cases, args.gate_cases, args.seed, progress=lambda m: print(m, file=sys.stderr,
                                                                                         flush=True))
    print(json.dumps(report))
    return 0 if report["identical"] == report["cases"] else 1


if __name__ == "__main__":
    sys.exit(main())
