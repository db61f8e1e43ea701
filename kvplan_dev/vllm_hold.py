"""Test tooling: schedulers that hold a burst of requests until all of it has reached the waiting queue, so a test
against a real ``vllm serve`` sees the burst scheduled in one step whatever the machine's speed (HTTP requests
reach the engine over several steps otherwise).

``KVPLAN_HOLD_FILE=<path>``: while the file starts with an integer N (then anything, e.g. a burst number: it is
re-read when its inode, size or mtime change) and fewer than N requests wait, the scheduler runs its step in
vLLM's own ``PAUSED_ALL`` state (nothing scheduled, nothing admitted); once N wait, the hold is released for good
(until the file changes again). The scheduling decisions themselves are the wrapped class's: the hold only picks
the step at which a burst is first looked at.

Use ``--scheduler-cls kvplan_dev.vllm_hold.HeldAsyncReservationScheduler`` (or the other classes below).
"""

from __future__ import annotations

import os
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.interface import PauseState
from vllm.v1.core.sched.scheduler import Scheduler

from kvplan_vllm.scheduler import AsyncReservationScheduler, ReservationScheduler

ENV_HOLD_FILE = "KVPLAN_HOLD_FILE"


class BurstHold:
    """Mixin (before a vLLM ``Scheduler`` class): hold admissions until the announced burst is queued."""

    waiting: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._hold_path = os.environ.get(ENV_HOLD_FILE) or None
        self._hold_seen: tuple[int, int, int] | None = None
        self._hold_target: int | None = None

    def _hold_refresh(self) -> None:
        if self._hold_path is None:
            return
        try:
            st = os.stat(self._hold_path)
        except OSError:
            return
        ident = (st.st_ino, st.st_size, st.st_mtime_ns)
        if ident == self._hold_seen:
            return
        try:
            with open(self._hold_path, encoding="utf-8") as fh:
                target = int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            return  # caught mid-write: read it again next step
        self._hold_seen = ident
        self._hold_target = target

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        self._hold_refresh()
        if self._hold_target is not None:
            if len(self.waiting) < self._hold_target:
                previous = self.pause_state  # type: ignore[attr-defined]
                self.set_pause_state(PauseState.PAUSED_ALL)  # type: ignore[attr-defined]
                try:
                    return super().schedule(*args, **kwargs)  # type: ignore[misc]
                finally:
                    self.set_pause_state(previous)  # type: ignore[attr-defined]
            self._hold_target = None
        return super().schedule(*args, **kwargs)  # type: ignore[misc]


class HeldReservationScheduler(BurstHold, ReservationScheduler):
    """kvplan's synchronous gated scheduler behind a burst hold."""


class HeldAsyncReservationScheduler(BurstHold, AsyncReservationScheduler):
    """kvplan's async gated scheduler behind a burst hold."""


class HeldScheduler(BurstHold, Scheduler):
    """vLLM's stock scheduler behind a burst hold (the comparison)."""


class HeldAsyncScheduler(BurstHold, AsyncScheduler):
    """vLLM's stock async scheduler behind a burst hold."""
