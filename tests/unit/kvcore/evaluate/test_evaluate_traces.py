"""Every shared trace runs through ``kvcore evaluate`` under both protocols (rolling only where the trace has
timestamps; the others are refused with a clear message), with small rho / shift lists to stay fast."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcore.cli import main
from kvcore.history.traces import load_trace

TRACES = sorted(p.name for p in (Path(__file__).resolve().parents[4] / "kvcore" / "data" / "traces").glob("*.csv"))


def test_shared_traces_are_there(traces_dir: Path) -> None:
    assert len(list(traces_dir.glob("*.csv"))) >= 7


@pytest.mark.parametrize("protocol", ["split", "rolling"])
@pytest.mark.parametrize("name", TRACES)
def test_every_shared_trace(traces_dir: Path, name: str, protocol: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = traces_dir / name
    has_time = load_trace(path).has_timestamps
    rc = main(["evaluate", "--trace", str(path), "--protocol", protocol, "--rho", "2,50", "--shift", "1,2.5",
               "--method", "default,dro-paper,saa,p99", "--json", "--no-progress"])
    captured = capsys.readouterr()
    if protocol == "rolling" and not has_time:
        assert rc == 2 and "no arrival timestamps" in captured.err
        return
    assert rc == 0, captured.err
    obj = json.loads(captured.out)
    assert obj["trace"] == name and obj["protocol"] == protocol
    assert len(obj["rows"]) == 2 * 2 * 4
    for row in obj["rows"]:
        assert {"rho", "shift", "method", "cost"} <= set(row)
        assert row["cost"] >= 0
    if protocol == "rolling":
        assert obj["plans"] == 28
