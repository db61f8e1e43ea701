"""What the reservation file costs an engine step, whatever the file (issue 26 item 7): the plugin's step path
(:meth:`kvplan_vllm.source.ReservationSource.tick`) and the reader thread's competition for the interpreter while
it reads and parses a new version.

A step here is a fixed amount of pure-Python work (about 1 ms; the engine's scheduler step is Python too) plus one
``tick()``; the step holds the interpreter throughout, which is the worst case for a reader thread (on a GPU a
step also waits on the device with the interpreter released, and the reader then costs nothing). Before every
``--every``-th step the file is replaced kubelet-style with a new version of one kind (outside the timed step), so
the reader reads and parses a new version at every check: far more often than any kubelet updates a ConfigMap.

Two figures per kind. The step's wall time (p50, p99, max; ``+p50`` against the same loop on an unchanging file
in the same run) shows the whole effect but carries the machine's scheduling noise. The reader's **slices**: the
thread CPU time the reader runs between two of its sleeps (recorded by wrapping the source module's own sleep and
refresh), i.e. the longest it can keep the engine's thread waiting for the interpreter at a time; ``tick()`` alone
is timed too. The garbage collector's passes that run on the reader thread are inside its slices, and are also
reported alone (``gc max ms``). As in vLLM's engine core, the heap built at start-up is frozen first
(``gc.freeze()``), so a pass scans only what was allocated since.

Usage: ``python benchmarks/vllm_reader_step_cost.py [--steps 3000] [--every 16]``. Prints a table and one JSON
line. Needs no vLLM (the source is pure).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from kvcore.classification import PromptLengthRule
from kvcore.reservation_file import MAX_CLASSES, Reservations, render_reservations
from kvplan_dev.mounted_configmap import write_configmap_volume
import kvplan_vllm.source as source_module
from kvplan_vllm.source import ReservationSource

KEY = "reservations.json"


def largest_valid(version: int) -> str:
    """The largest file the operator writes: 256 classes of 40-character names, a priority and a rule each."""
    names = [f"c{i:03d}-" + "x" * 35 for i in range(MAX_CLASSES)]
    return render_reservations(Reservations(
        {k: version + i for i, k in enumerate(names)}, names[0], {i: k for i, k in enumerate(names)},
        (*(PromptLengthRule(100 + i, k) for i, k in enumerate(names[:-1])), PromptLengthRule(None, names[-1])),
        plan=f"v{version}"))


def classes_30000(version: int) -> str:
    return json.dumps({"format": "kvplan.reservations.v1", "defaultClass": "c0", "plan": f"v{version}",
                       "classes": {f"c{i}": {"reserveTokens": i} for i in range(30_000)}})


KINDS: dict[str, Callable[[int], str | bytes]] = {
    "largest-valid (256 classes, 64 KB)": largest_valid,
    "30,000 classes (0.92 MiB)": classes_30000,
    "nested 120,000 deep": lambda v: "[" * (120_000 - v % 2),
    "4,000 values": lambda v: json.dumps({"promptLengthRules": [0] * (4000 - v % 2)}),
    "truncated": lambda v: largest_valid(v)[: 30_000 + v % 2],
    "non-UTF-8": lambda v: b"\xff" * (1000 + v % 2),
    "NaN / negative / wrong types": lambda v: largest_valid(v).replace("\"reserveTokens\": 1", "\"reserveTokens\": "
                                                                       + ("NaN" if v % 2 else "-1")),
}
SPECIAL = ("FIFO", "symlink to /dev/zero")


def calibrate(target_s: float) -> int:
    n = 1000
    while True:
        t0 = time.perf_counter()
        _work(n)
        if time.perf_counter() - t0 >= target_s / 4:
            return int(n * target_s / (time.perf_counter() - t0))
        n *= 2


def _work(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


class ReaderSlices:
    """The reader thread's CPU time between two of its sleeps (the longest it holds the interpreter at a time),
    recorded by wrapping the source module's own sleep (``_pause``, which its slicer calls) and refresh; thread CPU
    time, so time the reader spends preempted by the machine's load does not count."""

    def __init__(self) -> None:
        self.slices: list[float] = []
        self.collections: list[float] = []  # the garbage collector's passes run on the reader thread, seconds
        self._start = 0.0
        self._reader = 0
        self._gc_start = 0.0

    def install(self) -> None:
        inner_pause, inner_refresh = source_module._pause, ReservationSource._refresh
        me = self

        def pause() -> None:
            if threading.get_ident() == me._reader:
                me.slices.append(time.thread_time() - me._start)
            inner_pause()
            me._start = time.thread_time()

        def refresh(self: ReservationSource, p: Callable[[], None]) -> None:
            on_reader = isinstance(p, source_module._Slices)  # the reader thread, not check() or longest_stretch
            if on_reader:
                me._reader, me._start = threading.get_ident(), time.thread_time()
            try:
                inner_refresh(self, p)
            finally:
                if on_reader:
                    me.slices.append(time.thread_time() - me._start)

        def collecting(phase: str, info: dict[str, int]) -> None:
            if threading.get_ident() != me._reader:
                return
            if phase == "start":
                me._gc_start = time.thread_time()
            else:
                me.collections.append(time.thread_time() - me._gc_start)

        source_module._pause = pause
        ReservationSource._refresh = refresh  # type: ignore[method-assign]
        gc.callbacks.append(collecting)

    def take(self) -> tuple[list[float], list[float]]:
        out, self.slices = self.slices, []
        collected, self.collections = self.collections, []
        return out, collected


def place(volume: Path, version: int, make: Callable[[int], str | bytes] | None, special: str | None) -> None:
    """Version ``version`` of the file kind at the path (kubelet-style for a file, a swap for a FIFO or symlink)."""
    if make is not None:
        write_configmap_volume(volume, {KEY: make(version)})
    elif special is not None:
        tmp = volume / f".tmp{version}"
        if special == "FIFO":
            os.mkfifo(tmp)
        else:
            tmp.symlink_to("/dev/zero")
        os.replace(tmp, volume / KEY)


def longest_stretch(volume: Path, make: Callable[[int], str | bytes] | None, special: str | None,
                    runs: int = 21) -> dict[str, float]:
    """The longest stretch of one read and parse with no yield point in it: the reader's refresh run with a
    ``pause`` that records the thread CPU time since its last call and never sleeps, once per new version, on this
    thread with nothing competing. The median over ``runs`` versions of each run's longest stretch is the work's
    own figure (a stretch's length is set by the code, not by the load: the median drops the runs a preemption or an
    interrupt inflated); the reader can hold the interpreter for at most :data:`~kvplan_vllm.source.SLICE_S` plus
    this at a time."""
    write_configmap_volume(volume, {KEY: largest_valid(0)})
    source = ReservationSource(volume / KEY)
    source.check()
    longest: list[float] = []
    for version in range(1, runs + 1):
        if make is not None or special is not None:
            place(volume, version, make, special)
        stretches: list[float] = []
        last = [time.thread_time()]

        def pause() -> None:
            now = time.thread_time()
            stretches.append(now - last[0])
            last[0] = time.thread_time()

        last[0] = time.thread_time()
        source._refresh(pause)
        stretches.append(time.thread_time() - last[0])
        longest.append(max(stretches))
    source.close()
    longest.sort()
    return {"stretch_median_ms": 1e3 * statistics.median(longest), "stretch_max_ms": 1e3 * longest[-1]}


def run(volume: Path, steps: int, every: int, units: int, make: Callable[[int], str | bytes] | None,
        special: str | None, slices: ReaderSlices) -> dict[str, Any]:
    path = volume / KEY
    write_configmap_volume(volume, {KEY: largest_valid(0)})
    source = ReservationSource(path, check_every=every)
    source.check()
    source.start()
    durations = []
    for step in range(steps):
        if step % every == 0 and step:
            place(volume, step // every, make, special)
        t0 = time.perf_counter()
        source.tick()
        _work(units)
        durations.append(time.perf_counter() - t0)
    source.sync(timeout=None)
    problems = source.problems_logged
    source.close()
    durations.sort()
    held, collected = slices.take()
    return {"p50_ms": 1e3 * statistics.median(durations), "p99_ms": 1e3 * durations[int(0.99 * len(durations))],
            "max_ms": 1e3 * durations[-1], "versions": steps // every, "problems_logged": problems,
            "reader_slice_max_ms": 1e3 * max(held, default=0.0),
            "reader_slice_p99_ms": 1e3 * sorted(held)[int(0.99 * len(held))] if held else 0.0,
            "reader_gc_passes": len(collected), "reader_gc_max_ms": 1e3 * max(collected, default=0.0)}


def tick_cost(every: int, n: int = 1_000_000) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        source = ReservationSource(Path(tmp) / "none.json", check_every=every)
        source.check()
        t0 = time.perf_counter()
        for _ in range(n):
            source.tick()
        elapsed = time.perf_counter() - t0
        source.close()
    return elapsed / n * 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--every", type=int, default=16, help="steps between two file versions (and checks)")
    parser.add_argument("--step-ms", type=float, default=1.0, help="Python work per step, ms")
    args = parser.parse_args()
    units = calibrate(args.step_ms / 1e3)
    logging.getLogger("vllm.kvplan").addHandler(logging.NullHandler())
    logging.getLogger("vllm.kvplan").propagate = False
    slices = ReaderSlices()
    slices.install()
    # As vLLM 0.33's EngineCore does once it has started (vllm/utils/gc_utils.py freeze_gc_heap, called from
    # EngineCore.__init__): the start-up heap is frozen, so a collection scans only what was allocated since.
    gc.collect(0)
    gc.collect(1)
    gc.collect(2)
    gc.freeze()
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="kvplan-reader-bench-") as tmp:
        cases: list[tuple[str, Callable[[int], str | bytes] | None, str | None]] = [("unchanging file", None, None)]
        cases += [(k, f, None) for k, f in KINDS.items()] + [(k, None, k) for k in SPECIAL]
        cases += [("unchanging file (again)", None, None)]
        for i, (name, make, special) in enumerate(cases):
            volume = Path(tmp) / f"v{i}"
            rows[name] = run(volume, args.steps, args.every, units, make, special, slices)
            rows[name] |= longest_stretch(Path(tmp) / f"s{i}", make, special)
    base = rows["unchanging file"]
    print(f"{'file at the path':38} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'+p50 ms':>8} "
          f"{'slice p99 ms':>13} {'slice max ms':>13} {'gc max ms':>10} {'stretch ms':>11}")
    for name, r in rows.items():
        r["added_p50_ms"] = r["p50_ms"] - base["p50_ms"]
        print(f"{name:38} {r['p50_ms']:8.3f} {r['p99_ms']:8.3f} {r['max_ms']:8.3f} {r['added_p50_ms']:8.3f} "
              f"{r['reader_slice_p99_ms']:13.3f} {r['reader_slice_max_ms']:13.3f} {r['reader_gc_max_ms']:10.3f} "
              f"{r['stretch_median_ms']:11.3f}")
    worst = max(r["stretch_median_ms"] for r in rows.values())
    print(f"longest stretch without a yield point (median of 21 versions), worst kind: {worst:.3f} ms; a reader "
          f"slice is at most SLICE_S ({1e3 * source_module.SLICE_S:g} ms) plus that: "
          f"{worst + 1e3 * source_module.SLICE_S:.3f} ms")
    ns = tick_cost(args.every)
    print(f"tick() alone: {ns:.0f} ns per step (check every {args.every} steps)")
    print(json.dumps({"steps": args.steps, "every": args.every, "step_ms": args.step_ms, "tick_ns": ns,
                      "rows": rows, "python": sys.version.split()[0], "load": os.getloadavg()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
