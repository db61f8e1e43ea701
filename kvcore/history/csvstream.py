"""Streaming CSV input with bounded memory: one line in memory at a time, numbers kept in chunked float64 columns.

:func:`csv_rows` yields ``(line number, cells)`` of a text file without reading it whole: the file is read in binary
one line at a time (at most :data:`MAX_LINE_BYTES`), each line decoded as UTF-8 on its own (so an error names the
line), split the way ``str.splitlines`` splits, and parsed by :mod:`csv`. :class:`FloatColumn` collects numbers in
fixed-size numpy chunks, so memory grows with the numbers kept (8 bytes each), not with the file's text.

Every problem with the file itself is an :class:`~kvcore.errors.InputError` naming the file (and the line): a
directory, a FIFO, a device or a socket (only regular files are opened, so nothing blocks), no permission, a line that is not UTF-8, a NUL byte (a binary file), a line longer than
:data:`MAX_LINE_BYTES`, a CSV field over the :mod:`csv` size limit. A missing file stays :class:`FileNotFoundError`
(the CLI reports it as ``<path>: no such file``).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator
from typing import BinaryIO
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kvcore.errors import InputError
from kvcore.regular_file import FileProblem, open_regular

FloatArray = npt.NDArray[np.float64]

MAX_LINE_BYTES = 1 << 20
"""Longest line read (bytes, 1 MiB). A trace line is tens of bytes; a longer one means a binary file or a file
without newlines, which would otherwise be read into memory whole."""

CHUNK = 1 << 14
"""Values per chunk of a :class:`FloatColumn` (16,384 x 8 bytes = 128 KiB; as pending Python floats about 0.5 MiB):
large enough that the per-chunk overhead is negligible, small enough that the values in transit are no real
memory."""

BLOCK_BYTES = 1 << 18
"""Bytes read at a time (256 KiB): whole lines of one block are decoded and split together."""


class FloatColumn:
    """A float64 column in one numpy buffer that grows by doubling; :meth:`array` hands the buffer over, trimmed.

    Values wait in the Python list :attr:`pending` (``append`` is then one C call); the caller moves them into the
    buffer with :meth:`flush` once there are :data:`CHUNK` of them. The buffer grows with ``ndarray.resize``, i.e.
    ``realloc``, which for large blocks remaps pages instead of copying them, and pages not yet written are not
    resident: the memory used is about 8 bytes per value kept, plus one chunk's worth of Python floats."""

    def __init__(self) -> None:
        self._buffer: FloatArray = np.empty(CHUNK, dtype=np.float64)
        self._used = 0
        self.pending: list[float] = []
        self.append = self.pending.append

    def flush(self) -> None:
        """Move the pending values into the buffer."""
        n = len(self.pending)
        if not n:
            return
        if self._used + n > self._buffer.size:
            self._buffer.resize(max(2 * self._buffer.size, self._used + n), refcheck=False)
        self._buffer[self._used:self._used + n] = self.pending
        self._used += n
        self.pending.clear()

    def __len__(self) -> int:
        return self._used + len(self.pending)

    def array(self) -> FloatArray:
        """The values appended so far as one float64 array (the column's buffer; the column starts afresh)."""
        self.flush()
        out = self._buffer
        out.resize(self._used, refcheck=False)
        self._buffer, self._used = np.empty(CHUNK, dtype=np.float64), 0
        return out


class _Lines:
    """The decoded lines of a file, one at a time; ``lineno`` is the number of the last line handed out.

    Reads :data:`BLOCK_BYTES` at a time and decodes only whole lines (up to the last newline of what was read), so a
    multi-byte character is never split and the text in memory is one block's."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = path.name
        self.lineno = 0

    def _open(self) -> BinaryIO:
        """The file, opened only if it is a regular file (:func:`kvcore.regular_file.open_regular`: a FIFO, a
        device such as ``/dev/zero`` or a socket is refused at once instead of blocking or never ending)."""
        if self.path.is_dir():
            raise InputError(self.name, "is a directory, not a file")
        try:
            fd, _ = open_regular(self.path)
        except FileNotFoundError:
            raise
        except FileProblem as exc:
            raise InputError(self.name, str(exc).replace("cannot be opened", "cannot be read")) from None
        return os.fdopen(fd, "rb")

    def _decode(self, data: bytes) -> str:
        """``data`` (whole lines) as text; an error names the line of the first NUL or non-UTF-8 byte."""
        nul = data.find(b"\x00")
        if nul >= 0:
            line = self.lineno + data.count(b"\n", 0, nul) + 1
            raise InputError(f"{self.name} line {line}", "contains a NUL byte: a binary file, not a CSV text file")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = self.lineno + data.count(b"\n", 0, exc.start) + 1
            column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
            raise InputError(f"{self.name} line {line}",
                             f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at byte {column} of the line)") from None

    def __iter__(self) -> Iterator[str]:
        with self._open() as handle:
            carry = b""
            while True:
                try:
                    block = handle.read(BLOCK_BYTES)
                except OSError as exc:  # e.g. EISDIR where open() succeeds on a directory, or an I/O error
                    raise InputError(self.name, f"cannot be read ({exc.strerror or exc})") from None
                data = carry + block
                cut = data.rfind(b"\n") + 1 if block else len(data)
                carry = data[cut:]
                if len(carry) > MAX_LINE_BYTES:
                    line = self.lineno + data.count(b"\n", 0, cut) + 1
                    raise InputError(f"{self.name} line {line}",
                                     f"is longer than {MAX_LINE_BYTES} bytes: not a text trace")
                if cut:
                    for piece in self._decode(data[:cut]).splitlines():
                        self.lineno += 1
                        yield piece.removeprefix("\ufeff") if self.lineno == 1 else piece  # a byte-order mark
                if not block:
                    return


def csv_rows(path: str | Path) -> Iterator[tuple[int, list[str]]]:
    """``(line number, cells)`` for every line of a CSV file (1-based; a blank line gives ``[]``), streamed."""
    lines = _Lines(Path(path))
    reader = csv.reader(lines)
    while True:
        before = lines.lineno
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise InputError(f"{lines.name} line {lines.lineno}", f"is not valid CSV ({exc})") from None
        if lines.lineno != before + 1:  # the lines reach csv without their ends, so it would glue "5<newline>6" to 56
            raise InputError(f"{lines.name} line {before + 1}",
                             "has a quoted field that spans lines (a line break inside quotes); a trace row is one line")
        yield lines.lineno, row
