"""The CLI bad-input campaign (issue 12): every case of ``cli_cases.py`` / ``cli_cases_plan.py`` (``kvcore reserve``,
``plan``, ``evaluate``, ``bench scale`` and ``kvplan-dev cluster up`` / ``demo``) must end with exit status 2, nothing
on stdout, and exactly one line on stderr, ``<prog>: error: <field>: <message>``, naming the expected field; never a
traceback.

No wall-clock assertion: each case runs in a fork of ``cli_fork_server.py`` under a CPU-time limit (60 CPU seconds:
a case that is still working then is killed, and fails here as a hang) and an address-space limit (a case that
tries to expand its input in memory fails with a MemoryError). Each case must also stay under a CPU and peak-RSS
budget far below those limits, measured by ``wait4``: refusals are immediate. The control case (the valid base
instance plans, exit 0) shows that each plan case fails because of its one change. The count of cases is checked
so the campaign cannot shrink silently.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_cases import Case, bench_cases, dev_cases, evaluate_cases, reserve_cases
from cli_cases_plan import base_case, plan_cases

HERE = Path(__file__).resolve().parent
CASES: list[Case] = [*reserve_cases(), *evaluate_cases(), *bench_cases(), *dev_cases(), *plan_cases()]
CPU_BUDGET_S = 20.0
"""CPU seconds a case may use (the fork server kills at 60). The slowest cases read a million-line file."""
RSS_BUDGET_BYTES = 1024**3
"""Peak RSS a case may add to the server's (a 34 MiB file, a million lines, 10,000 classes: all refused cheaply)."""


class ForkServer:
    """The running ``cli_fork_server.py``: one request, one reply, in order."""

    def __init__(self, log: Path) -> None:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "PYTHONSAFEPATH": "1", "KVPLAN_RUN_DIR": str(log.parent / "run")}
        self.log = log
        self.proc = subprocess.Popen([sys.executable, str(HERE / "cli_fork_server.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=log.open("w"), text=True, env=env)
        assert self.proc.stdout is not None and self.proc.stdin is not None
        first = self.proc.stdout.readline()
        if first.strip() != "ready":
            pytest.fail(f"fork server did not start: {first!r}; log: {log.read_text()[-2000:]}")

    def run(self, program: str, argv: list[str], cwd: Path) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"program": program, "argv": argv, "cwd": str(cwd)}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            pytest.fail(f"fork server died; log: {self.log.read_text()[-2000:]}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    srv = ForkServer(tmp_path_factory.mktemp("fork-server") / "server.log")
    yield srv
    srv.close()


def _materialise(case: Case, where: Path) -> tuple[list[str], str]:
    """Write the case's files into ``where``; its argv and expected field with ``@name`` replaced by paths."""
    for name, content in case.files.items():
        path = where / name
        if callable(content):
            content(path)
        else:
            path.write_bytes(content)

    def sub(word: str) -> str:
        return str(where / word[1:]) if word.startswith("@") else word

    return [sub(w) for w in case.argv], sub(case.field)


def _run(server: ForkServer, case: Case, tmp_path: Path) -> tuple[dict[str, Any], str]:
    argv, field = _materialise(case, tmp_path)
    return server.run(case.program, argv, tmp_path), field


def test_case_ids_are_unique_and_the_campaign_is_complete() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    assert len(CASES) >= 1150
    # every command of both CLIs that reads user input is in the campaign
    assert {c.prog for c in CASES} >= {"kvcore reserve", "kvcore plan", "kvcore evaluate", "kvcore bench scale",
                                        "kvplan-dev cluster up", "kvplan-dev demo"}


@pytest.mark.slow
def test_the_base_instance_plans(server: ForkServer, tmp_path: Path) -> None:
    reply, _ = _run(server, base_case(), tmp_path)
    assert reply["status"] == 0, reply["stderr"]


#: Cases that read a million-line file or plan 10,000 classes: seconds each, so `make test-fast` leaves them out.
HEAVY = ("million-lines", "10000-classes")


@pytest.mark.timeout(300)  # a guard for a deadlock, not the assertion: CPU time is limited by the server
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=[pytest.mark.slow] if any(h in c.id for h in HEAVY)
                                               else []) for c in CASES])
def test_bad_input_is_one_line_naming_the_field(server: ForkServer, tmp_path: Path, case: Case) -> None:
    reply, field = _run(server, case, tmp_path)
    err = reply["stderr"]
    assert reply["signal"] is None, f"killed by signal {reply['signal']} after {reply['cpu_s']:.1f} CPU s: {err[-500:]}"
    assert "Traceback" not in err, err[-3000:]
    assert reply["status"] == 2, f"exit {reply['status']}; stdout {reply['stdout'][-300:]!r}; stderr {err[-500:]!r}"
    assert reply["stdout"] == ""
    lines = err.splitlines()
    assert len(lines) == 1, err[-1000:]
    prefix = f"{case.prog}: error: "
    assert lines[0].startswith(prefix), lines[0]
    assert lines[0][len(prefix):].startswith(field), f"expected field {field!r} first: {lines[0]}"
    assert len(lines[0]) < 1200, f"{len(lines[0])} characters"
    assert reply["cpu_s"] < CPU_BUDGET_S, f"{reply['cpu_s']:.1f} CPU s"
    added = (reply["maxrss_kib"] - reply["server_rss_kib"]) * 1024
    assert added < RSS_BUDGET_BYTES, f"peak RSS grew by {added / 1e6:.0f} MB"
