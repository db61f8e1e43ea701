"""`kvcore evaluate --engine vllm` (kvcore.evaluate.engine): the three variants at two loads on a real (small)
vendored trace, with the issue's row keys; the knobs row really runs the knobs the rule chose; the plugin row runs
the gate with the plan rule's reservations (no preemption can survive a reservation of L_max); the frontier adds the
plugin's rho sweep and stock vLLM's grid; bad flags exit 2 naming the flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcore.cli import main
from kvcore.evaluate.engine import FRONTIER_RHOS, FRONTIER_SEQS, FRONTIER_WATERMARKS, evaluate_engine
from kvcore.evaluate.engine_report import ROW_KEYS, frontier_check
from kvcore.traces import load_trace


def test_rows_and_variants(traces_dir: Path) -> None:
    ev = evaluate_engine(load_trace(traces_dir / "burstgpt_first7d_gpt4_conv.csv"), loads=(0.9,), rho=10.0)
    assert [r.method for r in ev.rows] == ["vllm-default", "kvplan-knobs", "kvplan-plugin"]
    default, knobs, plugin = ev.rows
    assert default.knobs == "watermark=0 max_num_seqs=256 policy=fcfs"
    assert knobs.knobs in ev.knobs["0.9"] and plugin.knobs.endswith("gate")
    assert default.preemptions > 0  # memory binds on this trace at load 0.9: the comparison is not vacuous
    assert plugin.preemptions < default.preemptions
    assert set(ev.reserves) == {"short", "long"} and all(v > 0 for v in ev.reserves.values())


def test_lmax_reservation_never_preempts(traces_dir: Path) -> None:
    ev = evaluate_engine(load_trace(traces_dir / "burstgpt_first7d_gpt4_conv.csv"), loads=(0.9,), rho=1e6)
    plugin = ev.rows[2]
    assert plugin.preemptions == 0 and plugin.recomputed_tokens == 0 and plugin.stalled_frac == 0.0


def test_cli_json_and_frontier(traces_dir: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = traces_dir / "burstgpt_first7d_chatgpt_api.csv"
    assert main(["evaluate", "--trace", str(trace), "--engine", "vllm", "--json", "--no-progress", "--frontier",
                 "--out", str(tmp_path)]) == 0
    obj = json.loads(capsys.readouterr().out)
    rows = obj["rows"]
    assert all(tuple(r) == ROW_KEYS for r in rows)
    per_load = 3 + len(FRONTIER_RHOS) + len(FRONTIER_WATERMARKS) * len(FRONTIER_SEQS)
    assert len(rows) == 2 * per_load and {r["load"] for r in rows} == {0.7, 0.9}
    assert {p.rsplit(".", 1)[-1] for p in obj["files"]} == {"csv", "md", "png"}
    ev = evaluate_engine(load_trace(trace), loads=(0.7,), frontier=True)
    n, matched = frontier_check(ev.rows, 0.7)
    assert n == len(FRONTIER_WATERMARKS) * len(FRONTIER_SEQS) and 0 <= matched <= n


@pytest.mark.parametrize(("args", "flag"), [(["--rho", "2,3"], "--rho"), (["--load", "3"], "--load"),
                                            (["--load", "x"], "--load")], ids=["two-rhos", "load-3", "load-x"])
def test_bad_flags(traces_dir: Path, capsys: pytest.CaptureFixture[str], args: list[str], flag: str) -> None:
    trace = traces_dir / "burstgpt_first7d_chatgpt_api.csv"
    assert main(["evaluate", "--trace", str(trace), "--engine", "vllm", "--no-progress", *args]) == 2
    assert flag in capsys.readouterr().err
