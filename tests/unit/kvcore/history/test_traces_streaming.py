"""Streaming trace loading (``kvcore.history.csvstream`` under ``kvcore.history.traces.load_trace`` / ``load_lengths``):

1. memory: the tracemalloc peak of loading a generated 200,000-line trace whose lines carry a long ignored column
   (about 47 MB of text) stays below twice the arrays kept plus a fixed 4 MiB, i.e. far below the text: the
   loader does not hold the file (deterministic: tracemalloc counts allocations, not time or RSS);
2. block boundaries: with reads cut down to a few bytes, lines and multi-byte UTF-8 characters split across reads,
   a byte-order mark and CRLF line ends give exactly what a whole-file parse gives;
3. file-level errors name the file and line: NUL byte, non-UTF-8 byte (also past the first read), a line longer
   than the limit, a directory; a missing file stays FileNotFoundError.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import cast

import numpy as np
import pytest

from kvcore.history import csvstream
from kvcore.errors import InputError
from kvcore.history.traces import Trace, load_lengths, load_trace

LINES = 200_000
SLACK = 4 * 1024**2  # bytes in transit: one read block, its decoded lines, one chunk of pending floats per column


def _wide_trace(path: Path, lines: int) -> None:
    note = "x" * 200
    with path.open("w", encoding="utf-8") as handle:
        handle.write("arrival_s,input_tokens,output_tokens,note\n")
        handle.writelines(f"{i * 0.01:.2f},{i % 4000},{(i * 7) % 3000},{note}\n" for i in range(lines))


def _peak(fn: object, *args: object) -> tuple[int, object]:
    tracemalloc.start()
    try:
        result = fn(*args)  # type: ignore[operator]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, result


@pytest.mark.slow
def test_load_trace_peak_is_bounded_by_the_arrays(tmp_path: Path) -> None:
    path = tmp_path / "wide.csv"
    _wide_trace(path, LINES)
    size = path.stat().st_size
    peak, result = _peak(load_trace, path)
    trace = cast(Trace, result)
    assert trace.arrival_s is not None
    arrays = sum(a.nbytes for a in (trace.arrival_s, trace.input_tokens, trace.output_tokens))
    assert arrays == 3 * 8 * LINES
    assert peak <= 2 * arrays + SLACK, f"peak {peak / 1e6:.1f} MB for {arrays / 1e6:.1f} MB of arrays"
    assert peak < size / 2, f"peak {peak / 1e6:.1f} MB for a {size / 1e6:.1f} MB file"
    assert trace.output_tokens[-1] == ((LINES - 1) * 7) % 3000


@pytest.mark.slow
def test_load_lengths_peak_is_bounded_by_the_array(tmp_path: Path) -> None:
    path = tmp_path / "wide.csv"
    _wide_trace(path, LINES)
    peak, values = _peak(load_lengths, path, "input_tokens")
    arrays = values.nbytes  # type: ignore[attr-defined]
    assert arrays == 8 * LINES
    assert peak <= 2 * arrays + SLACK, f"peak {peak / 1e6:.1f} MB for {arrays / 1e6:.1f} MB of array"


@pytest.mark.parametrize("block", [1, 2, 3, 7, 64], ids=lambda b: f"block{b}")
def test_reads_cut_anywhere_give_the_whole_file_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      block: int) -> None:
    # A BOM, CRLF ends, a blank line, an ignored column holding 2- and 4-byte UTF-8 characters.
    text = "\ufeffarrival_s,input_tokens,output_tokens,who\r\n0.5,10,5,é\r\n\r\n1.25,20,7,\U0001F600x\r\n2,30,9,ü\r\n"
    path = tmp_path / "t.csv"
    path.write_bytes(text.encode("utf-8"))
    monkeypatch.setattr(csvstream, "BLOCK_BYTES", block)
    monkeypatch.setattr(csvstream, "CHUNK", 2)
    t = load_trace(path)
    assert t.arrival_s is not None
    assert t.arrival_s.tolist() == [0.5, 1.25, 2.0]
    assert t.input_tokens.tolist() == [10, 20, 30] and t.output_tokens.tolist() == [5, 7, 9]
    assert load_lengths(path, "input_tokens").tolist() == [10, 20, 30]


def test_chunked_columns_match_numpy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    data = rng.integers(0, 10_000, size=(5_000, 3)).astype(np.float64)
    data[:, 0] = np.cumsum(data[:, 0])
    path = tmp_path / "t.csv"
    rows = "".join(f"{a:.0f},{b:.0f},{c:.0f}\n" for a, b, c in data)
    path.write_text("arrival_s,input_tokens,output_tokens\n" + rows)
    monkeypatch.setattr("kvcore.history.traces.CHUNK", 333)  # several chunks and a partial one
    t = load_trace(path)
    assert t.arrival_s is not None
    np.testing.assert_array_equal(np.stack([t.arrival_s, t.input_tokens, t.output_tokens], axis=1), data)


@pytest.mark.parametrize(
    ("content", "block", "field", "needle"),
    [
        pytest.param(b"arrival_s,input_tokens,output_tokens\n0,1,2\n1,\x00,2\n", 64, "t.csv line 3", "NUL byte",
                     id="nul"),
        pytest.param(b"arrival_s,input_tokens,output_tokens\n0,1,2\n1,1,2\n2,1,\xe92\n", 64, "t.csv line 4",
                     "byte 0xe9 at byte 5", id="latin1"),
        pytest.param(b"arrival_s,input_tokens,output_tokens\n0,1,2\n1,1,2\n2,1,\xe92\n", 5, "t.csv line 4",
                     "not UTF-8", id="latin1-later-read"),
        pytest.param(b"arrival_s,input_tokens,output_tokens\n0,1," + b"9" * 100 + b"\n", 16, "t.csv line 2",
                     "longer than 64 bytes", id="long-line"),
        pytest.param(b"\xff\xfea\x00r\x00", 64, "t.csv line 1", "NUL byte", id="utf16"),
    ],
)
def test_file_level_errors_name_the_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes,
                                         block: int, field: str, needle: str) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(content)
    monkeypatch.setattr(csvstream, "BLOCK_BYTES", block)
    monkeypatch.setattr(csvstream, "MAX_LINE_BYTES", 64)
    for load in (load_trace, load_lengths):
        with pytest.raises(InputError) as info:
            load(path)
        assert info.value.field == field
        assert needle in info.value.message


def test_directory_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        load_trace(tmp_path)
    assert info.value.field == tmp_path.name and "directory" in info.value.message
    with pytest.raises(FileNotFoundError):
        load_lengths(tmp_path / "missing.csv")
