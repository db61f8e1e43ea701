"""Reading the reservation file while vLLM runs: re-read when it changes, keep the last good values otherwise.

A ConfigMap mounted as a volume is updated by the kubelet with a symlink swap (``reservations.json ->
..data/reservations.json``, ``..data -> ..<timestamp>``), so the file's identity (device, inode, size, mtime, all
following symlinks) changes with every update. :meth:`ReservationSource.tick` costs one counter increment per
scheduler step and one ``stat`` every ``check_every`` steps; the file is read only when its identity changed.

A missing, unreadable or invalid file keeps the last good values (or none, before the first good file) and is
logged once per file version, never once per step.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from kvcore import NO_RESERVATIONS, Reservations, ReservationsError, parse_reservations

#: Environment variable naming the file; the operator mounts the state ConfigMap here.
ENV_FILE = "KVPLAN_RESERVATIONS_FILE"
DEFAULT_FILE = "/etc/kvplan/reservations.json"
#: Environment variable: scheduler steps between two ``stat`` calls.
ENV_CHECK_STEPS = "KVPLAN_RESERVATIONS_CHECK_STEPS"
#: 16 steps is well under a second of decoding on a GPU (20-100 steps/s), and a ``stat`` every 16 steps is noise
#: next to a step (microseconds against milliseconds).
DEFAULT_CHECK_STEPS = 16

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
        self._state = SourceState(NO_RESERVATIONS, None, 0, None)
        self.problems_logged = 0

    @property
    def current(self) -> Reservations:
        """The reservations in force (the last good file, or none)."""
        return self._state.reservations

    @property
    def state(self) -> SourceState:
        return self._state

    def tick(self) -> bool:
        """Once per scheduler step: every ``check_every`` steps, :meth:`check`. True if new values took effect."""
        self._steps += 1
        if self._steps < self.check_every:
            return False
        self._steps = 0
        return self.check()

    def _identity(self) -> _Identity | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def check(self) -> bool:
        """Re-read the file if its identity changed. True if new values took effect."""
        ident = self._identity()
        if ident == self._seen:
            return False
        self._seen = ident
        if ident is None:
            return self._problem(f"{self.path}: missing or unreadable")
        try:
            text = self.path.read_bytes()
        except OSError as exc:
            return self._problem(f"{self.path}: cannot be read ({exc.strerror or exc})")
        try:
            res = parse_reservations(text)
        except ReservationsError as exc:
            return self._problem(f"{self.path}: {exc}")
        previous = self._state
        self._state = SourceState(res, ident, previous.version + 1, None)
        self.log.info("kvplan: reservations loaded from %s: %s", self.path, res.describe())
        return True

    def _problem(self, message: str) -> bool:
        """Log once (this file version), keep what is in force."""
        kept = ("keeping the last good values (" + self._state.reservations.describe() + ")"
                if self._state.loaded_from is not None else "no reservations in force (vLLM's own admission)")
        self._state = SourceState(self._state.reservations, self._state.loaded_from, self._state.version, message)
        self.problems_logged += 1
        self.log.warning("kvplan: reservation file problem: %s; %s", message, kept)
        return False
