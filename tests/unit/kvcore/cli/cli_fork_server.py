"""A fork server for the CLI bad-input campaign (``test_cli_bad_input.py``): runs ``kvcore`` / ``kvplan-dev``
``main(argv)`` in a forked child under WORK limits, not wall-clock ones.

Started once per test module as ``python tests/unit/kvcore/cli/cli_fork_server.py`` (numpy's BLAS pinned to one thread, so the
server has no threads to lose in a fork). It imports both CLIs and what their commands import lazily, prints
``ready``, then serves one JSON request per
line on stdin and answers one JSON line on stdout:

    {"program": "kvcore" | "kvplan-dev", "argv": [...], "cwd": DIR}
    -> {"status": exit code | null, "signal": number | null, "stdout": ..., "stderr": ...,
        "cpu_s": ..., "maxrss_kib": ..., "server_rss_kib": ...}

Each request runs in a fresh fork with ``RLIMIT_CPU`` = :data:`CPU_LIMIT_S` CPU seconds (a run that keeps working
past it is killed by SIGXCPU: a hang, counted as such, whatever the machine's load) and ``RLIMIT_AS`` = the
server's address space plus :data:`EXTRA_MEMORY_BYTES` (a run that tries to expand its input into memory gets a
MemoryError, shown as a traceback, instead of eating the machine). Exit status, output, CPU time and peak RSS come
back from ``wait4``. An exception that escapes ``main`` is printed as a traceback and exits 70, so the campaign sees
it exactly as a user would.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import signal
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

from kvcore.cli import main as kvcore_main
from kvplan_dev.cli import main as kvplan_dev_main

CPU_LIMIT_S = 60
"""CPU seconds one case may use (the campaign's cases take well under one)."""
WALL_SAFETY_S = 240
"""Wall-clock seconds after which a blocked case is killed by SIGALRM: a safety net for hangs that use no CPU,
never an assertion on speed (no case comes near it)."""
EXTRA_MEMORY_BYTES = 2 * 1024**3
"""Address space one case may add to the server's."""

MAINS = {"kvcore": kvcore_main, "kvplan-dev": kvplan_dev_main}


def _vm_bytes(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{key} not in /proc/self/status")


def _child(request: dict[str, Any], out: Path, err: Path, address_space: int) -> None:
    code = 70
    try:
        # A case blocked without using CPU (a FIFO opened for reading waits for a writer forever) is not stopped by
        # RLIMIT_CPU: SIGALRM ends it after a generous wall-clock safety net, and the campaign sees the signal.
        signal.alarm(WALL_SAFETY_S)
        resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_S, CPU_LIMIT_S + 5))
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        os.chdir(request["cwd"])
        for fd, path in ((1, out), (2, err)):
            handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(handle, fd)
            os.close(handle)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - fd 0 is the null device now
        sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
        try:
            code = int(MAINS[request["program"]](request["argv"]))
        except SystemExit as exc:  # argparse's exit
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 - what escapes main is what a user would see: print it
            traceback.print_exc()
            code = 70
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def warm_up() -> None:
    """Import, before any fork, everything the commands import lazily, so no case pays for imports."""
    import kvcore.cli
    import kvplan_dev.cli

    kvcore.cli.build_parser()
    kvplan_dev.cli.parser()
    for name in ("yaml", "kvcore.cli.instance_file", "kvcore.planner", "kvcore.planner.exact", "kvcore.evaluate",
                 "kvcore.evaluate.report", "kvplan_dev.demo", "kvplan_dev.prom"):
        importlib.import_module(name)


def serve() -> None:
    warm_up()
    address_space = _vm_bytes("VmSize") + EXTRA_MEMORY_BYTES
    reply = sys.stdout
    reply.write("ready\n")
    reply.flush()
    with tempfile.TemporaryDirectory(prefix="kvplan-cli-cases-") as tmp:
        out, err = Path(tmp) / "out", Path(tmp) / "err"
        for line in sys.stdin:
            request = json.loads(line)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(request, out, err, address_space)
            _, status, usage = os.wait4(pid, 0)
            answer = {
                "status": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                "stdout": out.read_text(encoding="utf-8", errors="backslashreplace"),
                "stderr": err.read_text(encoding="utf-8", errors="backslashreplace"),
                "cpu_s": usage.ru_utime + usage.ru_stime,
                "maxrss_kib": usage.ru_maxrss,
                "server_rss_kib": _vm_bytes("VmRSS") // 1024,
            }
            reply.write(json.dumps(answer) + "\n")
            reply.flush()


if __name__ == "__main__":
    serve()
