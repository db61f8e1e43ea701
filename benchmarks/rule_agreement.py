"""The engine-model rules as the operator runs them (fast) against the rules as designed (full), on the same cases:
what each chooses, what the choice is worth, and what it costs.

Cases: every vendored trace at loads 0.7 and 0.9 in the setting of ``kvcore evaluate --engine vllm``
(``benchmarks/engine_results.py``: 2 replicas of llama-70b TP4 with 100,000 KV tokens each, 2 classes by prompt
length, rho 10), plus multi-class groups under memory pressure: the groups of ``kvcore bench fleet``'s instance at
15 classes x 4 groups (seeds 0-3), planned, with their KV capacity cut to 1/8 so that they preempt (groups that
still do not preempt are left out; they cost both rules nothing but stock's runs).

- **knobs**: ``choose_knobs(search="full")`` (every candidate on every replay) against the default search
  (:mod:`kvcore.rules.knob_search`), both on 2 replays of 2,000 requests: the choice must be the same.
- **reservations**: the rule as designed (``search="full"``, 2 replays of 3,000 requests, its own replays) against
  the operator's (``search="fast"``, 2 replays of 2,000 requests shared with the knob rule). Both choices are then
  priced on **fresh replays** (2 x 3,000 requests, seeds 100 and 101, never seen by either) with the rule's own cost
  J (token slots per request, :mod:`kvcore.rules.reserve`): the gain of a choice is J(0) - J(y), and the fast rule's
  share of the full rule's gain says what the shortcut loses (100%: as good; above: better on fresh data).
- work: requests simulated; CPU seconds (``time.process_time``), both rules in the same run.

    python benchmarks/rule_agreement.py [--traces-dir DIR] [--json PATH] [--no-fleet]
    python benchmarks/rule_agreement.py --from-json PATH    # the tables again, from a run's --json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from kvcore import EngineFleet, EngineSetup
from kvcore import KnobClass
from kvcore import choose_knobs, plan_groups
from kvcore import ReplaySet
from kvcore import ReserveChoice, choose_reserves, class_rho
from kvcore import GroupReplays
from kvcore import SimGroup
from kvcore import load_trace

REPO = Path(__file__).resolve().parents[1]


def cases(traces_dir: Path, fleet: bool) -> list[tuple[str, SimGroup, list[KnobClass], Any]]:
    out = []
    for f in sorted(traces_dir.glob("*.csv")):
        setup = EngineSetup(load_trace(f), EngineFleet())
        for load in (0.7, 0.9):
            times = None if setup.arrival_all is None else setup.arrival_all[: setup.half]
            out.append((f"{f.stem} @{load:g}", setup.group, setup.knob_classes(load, setup.reserves(10.0), 10.0),
                        times))
    if fleet:
        from kvcore import plan
        from kvcore import generate_fleet

        for seed in (0, 1, 2, 3):
            inst = generate_fleet(15, 4, 12, 2000, seed=seed)
            for group, classes in plan_groups(plan(inst), inst):
                g = group.model_copy(update={"kv_capacity_tokens": max(1, group.kv_capacity_tokens // 8)})
                probe = GroupReplays(g, classes)
                if sum(probe.stock(k).preemptions for k in range(2)):
                    out.append((f"fleet s{seed} {group.name} ({len(classes)} classes, KV/8)", g, classes, None))
    return out


def fresh_gain(g: SimGroup, classes: list[KnobClass], times: Any, choice: ReserveChoice) -> float:
    rs = ReplaySet(g, classes, requests=3000, seed=100, arrivals_s=times)
    ys = tuple(choice.reserves[c.name] for c in classes)
    rho = class_rho(classes)
    return float((rs.costs(tuple(0 for _ in classes), rho) - rs.costs(ys, rho)).mean())


def run(name: str, g: SimGroup, classes: list[KnobClass], times: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"case": name, "classes": len(classes)}
    t0 = time.process_time()
    kfull = choose_knobs(g, classes, arrivals_s=times, search="full")
    t1 = time.process_time()
    shared = GroupReplays(g, classes, arrivals_s=times)
    kfast = choose_knobs(g, classes, shared=shared)
    t2 = time.process_time()
    rfull = choose_reserves(g, classes, requests=3000, arrivals_s=times, search="full")
    t3 = time.process_time()
    rfast = choose_reserves(g, classes, replays=ReplaySet(g, classes, shared=shared))
    t4 = time.process_time()
    knob = (kfull.watermark, kfull.max_num_seqs, kfull.scheduling_policy)
    row.update(knobs_full=list(knob), knobs_same=knob == (kfast.watermark, kfast.max_num_seqs,
                                                          kfast.scheduling_policy),
               knobs_work=[kfull.work, kfast.work], knobs_cpu=[t1 - t0, t2 - t1],
               reserves_full=rfull.reserves, reserves_fast=rfast.reserves,
               reserves_same=rfull.reserves == rfast.reserves, reserves_work=[rfull.work, rfast.work],
               reserves_cpu=[t3 - t2, t4 - t3], reason_fast=rfast.reason)
    gains = [fresh_gain(g, classes, times, c) for c in (rfull, rfast)]
    row["fresh_gain"] = gains
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--traces-dir", type=Path, default=REPO / "kvcore" / "data" / "traces")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--no-fleet", action="store_true", help="only the vendored traces' 2-class cases")
    ap.add_argument("--from-json", type=Path, default=None, help="print the tables of an earlier run's --json")
    args = ap.parse_args(argv)
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        report(saved["rows"], saved["meta"])
        return 0
    started = time.perf_counter()
    rows = []
    for name, g, classes, times in cases(args.traces_dir, not args.no_fleet):
        rows.append(run(name, g, classes, times))
        r = rows[-1]
        print(f"{name}: knobs {'same' if r['knobs_same'] else 'DIFFERENT'}, reserves "
              f"{'same' if r['reserves_same'] else 'different'}", file=sys.stderr, flush=True)
    meta = (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.machine()}, Python "
            f"{platform.python_version()}, {time.perf_counter() - started:.0f} s wall")
    report(rows, meta)
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


def report(rows: list[dict[str, Any]], meta: str) -> None:
    print(meta)
    print("| case | knobs (full) | knobs fast = full | knob work full / fast (CPU s) | reservations full | "
          "reservations fast | fresh gain full / fast (token slots/req) | reservation work full / fast (CPU s) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        w, s, p = r["knobs_full"]
        print(f"| {r['case']} | w={w if w is not None else '-'} s={s} {p} | {'yes' if r['knobs_same'] else '**no**'} "
              f"| {r['knobs_work'][0]:,} / {r['knobs_work'][1]:,} ({r['knobs_cpu'][0]:.2f} / {r['knobs_cpu'][1]:.2f}) "
              f"| {_ys(r['reserves_full'])} | {_ys(r['reserves_fast'])} | {r['fresh_gain'][0]:.1f} / "
              f"{r['fresh_gain'][1]:.1f} | {r['reserves_work'][0]:,} / {r['reserves_work'][1]:,} "
              f"({r['reserves_cpu'][0]:.2f} / {r['reserves_cpu'][1]:.2f}) |")
    n = len(rows)
    same_k = sum(r["knobs_same"] for r in rows)
    same_r = sum(r["reserves_same"] for r in rows)
    paying = [r for r in rows if r["fresh_gain"][0] > 1.0]
    share = [r["fresh_gain"][1] / r["fresh_gain"][0] for r in paying]
    kw = np.array([r["knobs_work"] for r in rows], dtype=float).sum(axis=0)
    rw = np.array([r["reserves_work"] for r in rows], dtype=float).sum(axis=0)
    kc = np.array([r["knobs_cpu"] for r in rows]).sum(axis=0)
    rc = np.array([r["reserves_cpu"] for r in rows]).sum(axis=0)
    print(f"\nknobs: same choice on {same_k} of {n}; work {kw[0]:,.0f} -> {kw[1]:,.0f} simulated requests "
          f"({kw[0] / kw[1]:.1f}x), CPU {kc[0]:.1f} -> {kc[1]:.1f} s")
    print(f"reservations: same choice on {same_r} of {n}; where the full rule's choice gains > 1 token slot/request "
          f"on fresh replays ({len(paying)} cases) the fast one gets {min(share, default=1):.0%}-"
          f"{max(share, default=1):.0%} of it (median {float(np.median(share)) if share else 1:.0%}); "
          f"work {rw[0]:,.0f} -> {rw[1]:,.0f} ({rw[0] / max(rw[1], 1):.1f}x), CPU {rc[0]:.1f} -> {rc[1]:.1f} s")


def _ys(ys: dict[str, int]) -> str:
    if not any(ys.values()):
        return "0"
    return "/".join(str(v) for v in ys.values()) if len(ys) <= 3 else " ".join(
        f"{k}:{v}" for k, v in ys.items() if v)


if __name__ == "__main__":
    sys.exit(main())
