"""Unit tests of kvplan_dev.process, the PID bookkeeping behind "stop exactly what we started": records survive a
JSON round trip, stop() and stop_record() end exactly their PID, live_children() sees a running child, and a child
started with die_with_parent is gone once its parent dies without cleaning up. Uses only `sleep` and Python."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from kvplan_dev.process import ManagedProcess, ProcessRecord, live_children, stop_record


def _wait_dead(record: ProcessRecord, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not record.alive():
            return True
        time.sleep(0.05)
    return False


def test_stop_ends_exactly_its_pid_and_children_are_listed(tmp_path: Path) -> None:
    first = ManagedProcess("sleep-a", ["sleep", "30"], tmp_path / "a.log")
    second = ManagedProcess("sleep-b", ["sleep", "30"], tmp_path / "b.log")
    try:
        pids = {pid for pid, _ in live_children()}
        assert {first.record.pid, second.record.pid} <= pids
        first.stop()
        assert not first.record.alive()
        assert second.record.alive()
    finally:
        first.stop()
        second.stop()
    assert not second.record.alive()


def test_record_round_trip_and_stop_by_record(tmp_path: Path) -> None:
    proc = ManagedProcess("sleep", ["sleep", "30"], tmp_path / "s.log", die_with_parent=False)
    record = ProcessRecord.from_json(proc.record.to_json())
    assert record == proc.record and record.start_ticks > 0
    # A record with the same PID but another start time is a different (recycled) process: never signalled.
    stranger = ProcessRecord(record.name, record.pid, record.start_ticks + 1, record.argv, record.log)
    assert not stranger.alive() and stop_record(stranger) is False
    assert record.alive()
    assert stop_record(record) is True
    if proc.popen is not None:
        proc.popen.wait(timeout=10)  # reap our own child, so it is not left a zombie
    assert not record.alive()


def test_die_with_parent_cleans_up_after_a_killed_parent(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import os, sys
        from pathlib import Path
        from kvplan_dev.process import ManagedProcess
        proc = ManagedProcess("orphan", ["sleep", "30"], Path({str(tmp_path / 'o.log')!r}))
        print(proc.record.pid, proc.record.start_ticks, flush=True)
        os._exit(0)  # no teardown, like a SIGKILLed pytest
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    pid, ticks = (int(x) for x in out.stdout.split())
    orphan = ProcessRecord("orphan", pid, ticks, ("sleep", "30"), "")
    assert _wait_dead(orphan), f"pid {pid} still running after its parent died"
