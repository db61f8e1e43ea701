"""The CLI's exits that are not bad input (issue 26 item 11): a closed output pipe and an internal error.

- ``kvcore plan ... | head`` raised ``BrokenPipeError`` with a traceback. Every command that prints, in table and
  ``--json`` form, is run in a subprocess whose stdout is a pipe with its read end already closed (deterministic:
  the first write fails), so nothing depends on how fast ``head`` exits: status 141, nothing on stderr.
- An exception that is not bad input (a bug) is one line ``... error: internal: <type>: <message>``, status 70;
  ``KVPLAN_TRACEBACK=1`` adds the traceback.

The subprocess timeout is only a safety net; the assertions are the exit status and the output.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import kvcore.cli.reserve
from kvcore.cli import main
from kvcore.cli.exits import CLOSED_PIPE_STATUS, INTERNAL_ERROR_STATUS

REPO = Path(__file__).resolve().parents[4]
TRACE = REPO / "kvcore" / "data" / "traces" / "azure2023_conv.csv"
SMALL = b"arrival_s,input_tokens,output_tokens\n" + b"".join(b"%d,%d,%d\n" % (i, 10 + i, 5 + i % 7)
                                                                for i in range(40))
COMMANDS = {
    "reserve": ["reserve", "--samples", str(TRACE), "--cp", "10", "--cw", "1", "--lmax", "5000"],
    "plan": ["plan", str(REPO / "examples" / "instance-70b.yaml")],
    "bench-scale": ["bench", "scale", "--size", "2x2x20"],
    "evaluate": ["evaluate", "--trace", "@small.csv", "--no-progress", "--rho", "10", "--shift", "1",
                 "--method", "saa"],
}


def _closed_pipe_run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first write
    try:
        return subprocess.run([sys.executable, "-c", "import sys; from kvcore.cli import main; sys.exit(main())",
                               *argv], stdout=write_end, stderr=subprocess.PIPE, text=True, cwd=cwd, timeout=600,
                              env={**os.environ, "PYTHONSAFEPATH": "1"})
    finally:
        os.close(write_end)


@pytest.mark.parametrize("form", ["table", "json"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.slow
def test_a_closed_output_pipe_ends_quietly_with_141(command: str, form: str, tmp_path: Path) -> None:
    (tmp_path / "small.csv").write_bytes(SMALL)
    argv = [str(tmp_path / w[1:]) if w.startswith("@") else w for w in COMMANDS[command]]
    if form == "json":
        argv.append("--json")
    run = _closed_pipe_run(argv, tmp_path)
    assert run.returncode == CLOSED_PIPE_STATUS, run.stderr[-2000:]
    assert run.stderr == "", run.stderr[-2000:]


def test_an_internal_error_is_one_line_with_status_70(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    def broken(_: object) -> int:
        raise ZeroDivisionError("a bug\nover two lines")

    monkeypatch.setattr(kvcore.cli.reserve, "_run", broken)
    argv = COMMANDS["reserve"]
    monkeypatch.delenv("KVPLAN_TRACEBACK", raising=False)
    assert main(argv) == INTERNAL_ERROR_STATUS
    err = capsys.readouterr().err
    assert err.splitlines() == ["kvcore reserve: error: internal: ZeroDivisionError: a bug over two lines (a bug in "
                                "kvcore; KVPLAN_TRACEBACK=1 shows the traceback)"]
    monkeypatch.setenv("KVPLAN_TRACEBACK", "1")
    assert main(argv) == INTERNAL_ERROR_STATUS
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.splitlines()[-1].startswith("kvcore reserve: error: internal")
