"""Write files the way the kubelet updates a ConfigMap mounted as a volume, for tests of readers that must follow
such updates (kvplan's vLLM plugins read the reservation file this way).

The kubelet's atomic writer keeps the payload in a timestamped directory, points ``..data`` at it and exposes each
key as a symlink ``<key> -> ..data/<key>``; an update writes a new timestamped directory, swaps ``..data`` with a
rename (atomic) and removes the old directory. A reader that opened the old file keeps reading the old content;
``stat(<key>)`` (following symlinks) sees a new inode after the swap.
"""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path
from typing import Mapping

_DATA = "..data"
_counter = itertools.count()


def write_configmap_volume(volume: Path, files: Mapping[str, str | bytes]) -> None:
    """Replace the whole payload of ``volume`` with ``files`` (key -> content), kubelet style."""
    volume.mkdir(parents=True, exist_ok=True)
    stamp = volume / f"..{os.getpid()}_{next(_counter):06d}"
    stamp.mkdir()
    for key, content in files.items():
        data = content.encode("utf-8") if isinstance(content, str) else content
        (stamp / key).write_bytes(data)
    old = os.readlink(volume / _DATA) if (volume / _DATA).is_symlink() else None
    tmp_link = volume / "..data_tmp"
    if tmp_link.is_symlink():
        tmp_link.unlink()
    tmp_link.symlink_to(stamp.name)
    os.replace(tmp_link, volume / _DATA)
    for key in files:
        link, want = volume / key, f"{_DATA}/{key}"
        if not (link.is_symlink() and os.readlink(link) == want):
            # Swapped in with one rename, so a reader never finds the key missing (whatever stood there before:
            # nothing, a plain file, a FIFO, a symlink elsewhere).
            tmp_key = volume / f"..{key}_tmp"
            if tmp_key.is_symlink() or tmp_key.exists():
                tmp_key.unlink()
            tmp_key.symlink_to(want)
            os.replace(tmp_key, link)
    if old is not None and old != stamp.name:
        shutil.rmtree(volume / old, ignore_errors=True)


def remove_configmap_key(volume: Path, key: str) -> None:
    """Drop ``key`` from the payload (its symlink then dangles, as when a key leaves the ConfigMap)."""
    current = {p.name: p.read_bytes() for p in (volume / _DATA).iterdir() if p.name != key}
    write_configmap_volume(volume, current)
