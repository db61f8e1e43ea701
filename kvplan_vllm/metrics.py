"""The plugin's own counters outside the per-class series (:mod:`kvplan_vllm.stats`): requests whose class
channel named something no rule of the reservation file knows, which were given the fleet default.

One counter object per process (prometheus_client's default registry), registered on first use. The name avoids
``vllm:``, which vLLM unregisters. The scheduler runs in vLLM's engine-core process: its counts reach the API
server's ``/metrics`` only where that process shares Prometheus' multiprocess directory
(``PROMETHEUS_MULTIPROC_DIR``); each unknown value is also logged once (:mod:`kvplan_vllm.scheduler`).
"""

from __future__ import annotations

import threading

from prometheus_client import Counter

#: Requests given the fleet default because their class channel named no known class, by channel.
UNKNOWN_CLASS_REQUESTS = "kvplan_unknown_class_requests_total"
CHANNEL_LABEL = "channel"

_LOCK = threading.Lock()
_COUNTERS: dict[str, Counter] = {}


def unknown_class_counter() -> Counter:
    """The process's counter :data:`UNKNOWN_CLASS_REQUESTS` (label :data:`CHANNEL_LABEL`)."""
    with _LOCK:
        if UNKNOWN_CLASS_REQUESTS not in _COUNTERS:
            _COUNTERS[UNKNOWN_CLASS_REQUESTS] = Counter(
                UNKNOWN_CLASS_REQUESTS.removesuffix("_total"),
                "Requests whose class channel named no class of the reservation file; given the fleet default.",
                (CHANNEL_LABEL,))
        return _COUNTERS[UNKNOWN_CLASS_REQUESTS]
