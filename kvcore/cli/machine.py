"""What this machine can give the planner: the CLI's side of :mod:`kvcore.planner.limits` (the planning core reads
nothing from the system; the CLI passes the figure in).

The memory a plan may use is :data:`MEMORY_SHARE` of the smaller of the physical memory and the cgroup limit (a
container's ``memory.max`` in cgroup v2, ``memory.limit_in_bytes`` in v1), so a plan the CLI starts is not killed
for memory and leaves room for the rest of the process and the machine.
"""

from __future__ import annotations

import os
from pathlib import Path

MEMORY_SHARE = 0.8
"""Share of the machine's (or container's) memory a plan may use."""
CGROUP_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def machine_memory() -> tuple[float, str]:
    """(bytes, where the figure came from): physical memory, or the cgroup limit when it is smaller."""
    best, what = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")), "physical memory"
    for name in CGROUP_FILES:
        try:
            text = Path(name).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text.isdigit() and 0 < int(text) < best:
            best, what = float(text), f"cgroup limit ({name})"
    return best, what


def memory_limit() -> float:
    """Bytes a plan started from the CLI may use: :data:`MEMORY_SHARE` of :func:`machine_memory`."""
    return MEMORY_SHARE * machine_memory()[0]
