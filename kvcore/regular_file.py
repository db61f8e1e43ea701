"""Open or read a path only if it is a regular file, never blocking on what the path points at.

A path given by a user or mounted by someone else can be anything. A FIFO blocks ``open()`` until a writer
appears; a symlink to ``/dev/zero`` or ``/dev/urandom`` never ends; a directory, a socket or a device is not a
file. :func:`open_regular` opens with ``O_NONBLOCK`` (a FIFO opens at once) and checks with ``fstat`` on the open
descriptor (no race with a swap of the path) that it is a regular file; :func:`read_regular_file` also bounds the
size and reads at most ``max_bytes + 1`` bytes (a file that grows while read is refused too). Symlinks are followed
(the kubelet's ConfigMap volumes are symlink chains). Standard library only: the CLI's inputs
(:mod:`kvcore.history.csvstream`, :mod:`kvcore.cli.yaml_guard`) and kvplan's vLLM plugin (``kvplan_vllm.source``) use it.
Refusals are :class:`FileProblem` (the message says why, without the path); a missing file is
:class:`FileNotFoundError` from :func:`open_regular` and a :class:`FileProblem` from :func:`read_regular_file`.
"""

from __future__ import annotations

import errno
import os
import stat

Identity = tuple[int, int, int, int]
"""(device, inode, size, mtime in ns): changes with every kubelet update of a mounted ConfigMap."""

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class FileProblem(Exception):
    """The path cannot be read as a bounded regular file; the message says why (without the path)."""


class FileTooLarge(FileProblem):
    """A regular file larger than the bound; ``size`` is its size in bytes."""

    def __init__(self, size: int, message: str) -> None:
        super().__init__(message)
        self.size = size


def identity_of(st: os.stat_result) -> Identity:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def path_identity(path: str | os.PathLike[str]) -> Identity | None:
    """The identity of what ``path`` points at (following symlinks), or None when it cannot be stat'ed.
    ``stat`` never opens the file, so it does not block on a FIFO."""
    try:
        return identity_of(os.stat(path))
    except (OSError, ValueError):
        return None


def kind_of(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str | os.PathLike[str]) -> tuple[int, os.stat_result]:
    """``(descriptor, its fstat)`` of the regular file at ``path``, opened read-only; the caller closes it.
    :class:`FileNotFoundError` when nothing is there, :class:`FileProblem` for anything else that is wrong."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise FileProblem("not a regular file (a socket or a device without a reader)") from None
        if exc.errno == errno.ELOOP:
            raise FileProblem("cannot be opened (a loop of symlinks)") from None
        raise FileProblem(f"cannot be opened ({exc.strerror or exc})") from None
    except ValueError as exc:  # a NUL byte in the path
        raise FileProblem(f"cannot be opened ({exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileProblem(f"not a regular file ({kind_of(st.st_mode)}); refused without reading it")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_regular_file(path: str | os.PathLike[str], max_bytes: int) -> tuple[Identity, bytes]:
    """``(identity, content)`` of the regular file at ``path``, at most ``max_bytes`` bytes."""
    try:
        fd, st = open_regular(path)
    except FileNotFoundError:
        raise FileProblem("missing or unreadable (no such file)") from None
    try:
        if st.st_size > max_bytes:
            raise FileTooLarge(st.st_size, f"{st.st_size:,} bytes, more than the {max_bytes:,} allowed; refused "
                                           "without reading it")
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise FileTooLarge(size, f"grew past {max_bytes:,} bytes while being read")
        return identity_of(st), b"".join(chunks)
    except OSError as exc:
        raise FileProblem(f"cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
