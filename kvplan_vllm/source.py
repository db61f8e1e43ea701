"""Reading the reservation file while vLLM runs: re-read when it changes, keep the last good values otherwise, and
never on the engine's step.

A ConfigMap mounted as a volume is updated by the kubelet with a symlink swap (``reservations.json ->
..data/reservations.json``, ``..data -> ..<timestamp>``), so the file's identity (device, inode, size, mtime, all
following symlinks) changes with every update.

The step path (:meth:`ReservationSource.tick`, once per scheduler step) touches no file: it counts, every
``check_every`` steps hands a check request to the source's reader thread (a lock and a notify), and adopts the
values the reader last published (one attribute compare), so new values take effect at a step boundary. The reader
thread ``stat``s the path and reads it only when its identity changed, and only as a regular file of at most
:data:`kvcore.reservation_file.MAX_BYTES` bytes (:mod:`kvcore.regular_file`: a FIFO, a device, a directory or
a socket is refused without blocking); the parse is bounded (:func:`kvcore.reservation_file.parse_reservations`)
and offers a yield point every few microseconds of work; the reader sleeps at the first one after :data:`SLICE_S` of
its own CPU time (:class:`_Slices`), so the engine's thread is never kept waiting long for the interpreter. :meth:`check` does
the same read synchronously (at start-up, before the first step, and in tests).

A missing, unreadable or invalid file keeps the last good values (or none, before the first good file) and is
logged once per file version, never once per step. Nothing the file holds can make :meth:`tick` or :meth:`check`
raise.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kvcore import (MAX_RESERVATION_FILE_BYTES as MAX_BYTES, NO_RESERVATIONS, FileProblem, Reservations,
                    ReservationsError, parse_reservations, path_identity, read_regular_file)

#: Environment variable naming the file; the operator mounts the state ConfigMap here.
ENV_FILE = "KVPLAN_RESERVATIONS_FILE"
DEFAULT_FILE = "/etc/kvplan/reservations.json"
#: Environment variable: scheduler steps between two ``stat`` calls.
ENV_CHECK_STEPS = "KVPLAN_RESERVATIONS_CHECK_STEPS"
#: 16 steps is well under a second of decoding on a GPU (20-100 steps/s), and a ``stat`` every 16 steps is noise
#: next to a step (microseconds against milliseconds).
DEFAULT_CHECK_STEPS = 16
#: Seconds the reader thread sleeps between two slices of a read and parse (the engine's thread takes the
#: interpreter meanwhile).
PAUSE_S = 0.0002
#: Thread CPU seconds the reader runs before it sleeps: the parse offers a pause every few microseconds of work
#: (:func:`kvcore.bounded_json.load_bounded_json`), and :class:`_Slices` takes one once this much has run, so the
#: engine's thread waits for the interpreter at most about this long at a time (``benchmarks/vllm_reader_step_cost.py``).
SLICE_S = 0.0002

_Identity = tuple[int, int, int, int]

#: A child of vLLM's ``vllm`` logger, so the plugins' lines go wherever vLLM's go, with its format.
logger = logging.getLogger("vllm.kvplan")


@dataclass(frozen=True)
class SourceState:
    """What the source holds: the values in force, where they came from and the last problem seen."""

    reservations: Reservations
    loaded_from: _Identity | None
    version: int
    problem: str | None


def check_steps_from_env(environ: dict[str, str] | None = None) -> int:
    """``KVPLAN_RESERVATIONS_CHECK_STEPS`` (an integer >= 1), else the default; a bad value is logged and ignored."""
    env = os.environ if environ is None else environ
    raw = env.get(ENV_CHECK_STEPS)
    if raw is None:
        return DEFAULT_CHECK_STEPS
    try:
        value = int(raw)
        if value >= 1:
            return value
    except ValueError:
        pass
    logger.warning("kvplan: %s=%r is not an integer >= 1; using %d", ENV_CHECK_STEPS, raw, DEFAULT_CHECK_STEPS)
    return DEFAULT_CHECK_STEPS


class ReservationSource:
    """The reservation file behind one plugin instance. ``current`` is always usable."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, check_every: int | None = None,
                 log: logging.Logger = logger) -> None:
        self.path = Path(path if path is not None else os.environ.get(ENV_FILE, DEFAULT_FILE))
        self.check_every = check_every if check_every is not None else check_steps_from_env()
        if self.check_every < 1:
            raise ValueError(f"check_every: must be >= 1, got {self.check_every}")
        self.log = log
        self._steps = 0
        self._seen: _Identity | None | str = "never"
        #: In force (adopted on the step path) and the reader's latest (written by whoever reads the file).
        self._state = SourceState(NO_RESERVATIONS, None, 0, None)
        self._published = self._state
        self.problems_logged = 0
        self._read_lock = threading.Lock()  # one read at a time (the reader thread, or check())
        self._cond = threading.Condition()
        self._requested = 0   # check requests handed to the reader thread
        self._served = 0      # the last request the reader thread has finished
        self._closed = False
        self._thread: threading.Thread | None = None
        self._reader_failed = False

    @property
    def current(self) -> Reservations:
        """The reservations in force (the last good file, or none)."""
        return self._state.reservations

    @property
    def state(self) -> SourceState:
        return self._state

    # -- the step path: no file access -----------------------------------------------------------------------
    def tick(self) -> bool:
        """Once per scheduler step: every ``check_every`` steps, ask the reader thread to check the file; adopt what
        it last published. True if new values took effect."""
        self._steps += 1
        if self._steps >= self.check_every:
            self._steps = 0
            self._request()
        return self._adopt()

    def _adopt(self) -> bool:
        published = self._published
        if published is self._state:
            return False
        changed = published.version != self._state.version
        self._state = published
        return changed

    def _request(self) -> int:
        with self._cond:
            if self._thread is None and not self._closed:
                self._start_locked()
            self._requested += 1
            self._cond.notify_all()
            return self._requested

    # -- the reader thread ------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the reader thread now (it is otherwise started by the first check request)."""
        with self._cond:
            if self._thread is None and not self._closed:
                self._start_locked()

    def _start_locked(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kvplan-reservations", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._served >= self._requested and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                ticket = self._requested
            self._refresh_guarded(pause=_Slices())
            with self._cond:
                self._served = ticket
                self._cond.notify_all()

    def sync(self, timeout: float | None = None) -> bool:
        """Ask the reader thread for a check and wait until it has done it (tests and tools: a condition to wait
        for, not a clock). The values apply from the next :meth:`tick`. False if ``timeout`` passed first."""
        ticket = self._request()
        with self._cond:
            return self._cond.wait_for(lambda: self._served >= ticket or self._closed, timeout)

    def close(self) -> None:
        """Stop the reader thread (the values in force stay)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # -- reading (the reader thread, or check()) ----------------------------------------------------------------
    def check(self) -> bool:
        """Re-read the file now, in this thread, if its identity changed; adopt the result. True if new values took
        effect. Used at start-up (before any step) and in tests; never raises."""
        self._refresh_guarded(pause=_no_pause)
        return self._adopt()

    def _refresh_guarded(self, *, pause: Callable[[], None]) -> None:
        try:
            with self._read_lock:
                self._refresh(pause)
        except Exception:  # noqa: BLE001 - a bug here must not stop the reader or reach vLLM; say so once
            if not self._reader_failed:
                self._reader_failed = True
                self.log.exception("kvplan: reservation reader error on %s; keeping the values in force",
                                   self.path)

    def _refresh(self, pause: Callable[[], None]) -> None:
        ident = path_identity(self.path)
        if ident == self._seen:
            return
        self._seen = ident
        if ident is None:
            self._problem(f"{self.path}: missing or unreadable")
            return
        try:
            read_ident, text = read_regular_file(self.path, MAX_BYTES)
        except FileProblem as exc:
            self._problem(f"{self.path}: {exc}")
            return
        self._seen = read_ident  # what was read, if the path was swapped between the stat and the open
        pause()
        try:
            res = parse_reservations(text, pause=pause)
        except ReservationsError as exc:
            self._problem(f"{self.path}: {exc}")
            return
        previous = self._published
        self._published = SourceState(res, read_ident, previous.version + 1, None)
        self.log.info("kvplan: reservations loaded from %s: %s", self.path, res.describe())

    def _problem(self, message: str) -> None:
        """Log once (this file version), keep what is in force."""
        last = self._published
        kept = ("keeping the last good values (" + last.reservations.describe() + ")"
                if last.loaded_from is not None else "no reservations in force (vLLM's own admission)")
        self._published = SourceState(last.reservations, last.loaded_from, last.version, message)
        self.problems_logged += 1
        self.log.warning("kvplan: reservation file problem: %s; %s", message, kept)


def _pause() -> None:
    """Yield the interpreter to the engine's thread for :data:`PAUSE_S`."""
    time.sleep(PAUSE_S)


class _Slices:
    """The reader thread's ``pause``: sleeps (:func:`_pause`) once :data:`SLICE_S` of thread CPU time has run since
    the last sleep, and otherwise returns at once (a ``thread_time`` call)."""

    def __init__(self) -> None:
        self._start = time.thread_time()

    def __call__(self) -> None:
        if time.thread_time() - self._start >= SLICE_S:
            _pause()
            self._start = time.thread_time()


def _no_pause() -> None:
    return None
