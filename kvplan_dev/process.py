"""Processes this package starts and later stops by PID, never by name.

A :class:`ProcessRecord` carries the PID plus the kernel start time from ``/proc/<pid>/stat``, so a record written
to disk (``kvplan-dev cluster up`` exits and ``cluster down`` runs later) cannot kill a recycled PID. Children run
in their own session so a Ctrl-C in the terminal does not reach them half-way; they are stopped with SIGTERM, then
SIGKILL after a grace period.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_ticks(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (start time in clock ticks since boot); None if the PID is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


@dataclass(frozen=True)
class ProcessRecord:
    """A started process as it is written to the state file."""

    name: str
    pid: int
    start_ticks: int
    argv: tuple[str, ...]
    log: str

    def alive(self) -> bool:
        """True while the same process (PID and start time) exists and is not a zombie."""
        return _start_ticks(self.pid) == self.start_ticks

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        data = asdict(self)
        data["argv"] = list(self.argv)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ProcessRecord":
        """Inverse of :meth:`to_json`."""
        return cls(str(data["name"]), int(data["pid"]), int(data["start_ticks"]), tuple(data["argv"]), str(data["log"]))


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class ManagedProcess:
    """A child process with its log file; ``stop()`` ends exactly this PID."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None,
                 die_with_parent: bool = True) -> None:
        """``die_with_parent``: the kernel sends the child SIGTERM when the thread that started it ends, e.g. when a
        killed pytest never ran its teardown (so start long-lived servers from the main thread);
        ``kvplan-dev cluster up`` turns it off so the servers outlive the command."""
        self.name = name
        self.log_path = log_path
        log = log_path.open("ab")
        try:
            self.popen: subprocess.Popen[bytes] | None = subprocess.Popen(
                list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=env, preexec_fn=_die_with_parent if die_with_parent else None,
            )
        finally:
            log.close()
        ticks = _start_ticks(self.popen.pid)
        self.record = ProcessRecord(name, self.popen.pid, ticks if ticks is not None else -1, tuple(argv), str(log_path))

    def poll(self) -> int | None:
        """The exit status if it ended, else None."""
        return self.popen.poll() if self.popen is not None else None

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of its log, for error messages."""
        return log_tail(Path(self.record.log), lines)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM, wait up to ``grace_s`` seconds, then SIGKILL; reaps the child."""
        if self.popen is None:
            return
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=grace_s)
        self.popen = None

    def detach(self) -> ProcessRecord:
        """Forget the Popen handle (the process keeps running); return the record to stop it later."""
        self.popen = None
        return self.record


def stop_record(record: ProcessRecord, grace_s: float = 10.0) -> bool:
    """Stop a process known only by its record (not our child any more). True if it was running."""
    if not record.alive():
        return False
    os.kill(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not record.alive():
            return True
        time.sleep(0.1)
    if record.alive():
        os.kill(record.pid, signal.SIGKILL)
        deadline = time.monotonic() + grace_s
        while record.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
    return True


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a text file ('' if missing)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def wait_until(
    check: Callable[[], bool], *, timeout_s: float, what: str, proc: ManagedProcess | None = None, every_s: float = 0.2
) -> None:
    """Poll ``check`` until it returns True; raise RuntimeError naming ``what`` (with the log tail) on timeout
    or if ``proc`` exits first."""
    deadline = time.monotonic() + timeout_s
    last_error = ""
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(
                f"{what}: process {proc.name} exited with {proc.poll()} before it was ready; log "
                f"{proc.record.log}:\n{proc.log_tail()}"
            )
        try:
            if check():
                return
        except Exception as exc:  # noqa: BLE001 - a failed probe is retried until the deadline
            last_error = f"{type(exc).__name__}: {exc}"
        time.sleep(every_s)
    tail = f"; log {proc.record.log}:\n{proc.log_tail()}" if proc is not None else ""
    raise RuntimeError(f"{what}: not ready after {timeout_s:.0f} s (last probe: {last_error or 'not ready'}){tail}")


def live_children(parent: int | None = None) -> list[tuple[int, str]]:
    """(pid, command name) of every non-zombie process whose parent is ``parent`` (default: this process)."""
    parent = os.getpid() if parent is None else parent
    found: list[tuple[int, str]] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[1]) == parent:
            found.append((int(entry.name), name))
    return found
