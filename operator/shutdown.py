"""A prompt stop on SIGTERM (issue 26): kopf waits for the handlers in flight before it runs its cleanup, and a
handler blocked in a slow Prometheus request kept the process alive as long as the server trickled. So the operator
takes SIGTERM and SIGINT itself once kopf is up: :func:`kvplan_operator.deadline.stop_all` cuts every request in
flight at once (each reconcile then ends as ``OperatorStopping``, writing nothing), and kopf's stop flag starts its
usual shutdown, which now finds its handlers finishing.

kopf installs its own signal handlers while it starts its tasks; :func:`run` installs these after kopf's startup
handlers ran (``started``, set by :func:`kvplan_operator.handlers.configure`), which is after that point.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from .deadline import stop_all


def on_signal(stop: asyncio.Event) -> None:
    stop_all()
    stop.set()


async def run(operator: Callable[..., Coroutine[Any, Any, Any]], started: threading.Event, **kwargs: Any) -> None:
    """``operator(stop_flag=..., **kwargs)`` (kopf.operator), with the signal handling above."""
    stop = asyncio.Event()
    task = asyncio.create_task(operator(stop_flag=stop, **kwargs))
    while not started.is_set() and not task.done():
        await asyncio.sleep(0.05)
    if not task.done():
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, stop)
    await task
