"""`kvcore evaluate --engine vllm` (kvcore.evaluate.engine): the four variants at two loads on a real (small)
vendored trace, with the issue's row keys; the knobs row really runs the knobs the rule chose; the plugin row runs
the gate with the reservations that pay (kvcore.rules.reserve) and the plugin-dro row with the plan's raw
reservations (no preemption can survive a reservation of L_max); the frontier adds the plugin's rho sweeps, stock
vLLM's grid and the gate's reservation grid, and the grid is compared with stock only at the same max_num_seqs; bad
flags exit 2 naming the flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcore.cli import main
from kvcore.evaluate.engine import (
    FRONTIER_QUANTILES,
    FRONTIER_RHOS,
    FRONTIER_SEQS,
    FRONTIER_WATERMARKS,
    METHODS,
    EngineRow,
    evaluate_engine,
)
from kvcore.evaluate.engine_report import GRID, ROW_KEYS, frontier_check, grid_check, seqs_of
from kvcore.history.traces import load_trace


@pytest.mark.slow
def test_rows_and_variants(traces_dir: Path) -> None:
    ev = evaluate_engine(load_trace(traces_dir / "burstgpt_first7d_gpt4_conv.csv"), loads=(0.9,), rho=10.0)
    assert [r.method for r in ev.rows] == ["vllm-default", "kvplan-knobs", "kvplan-plugin", "kvplan-plugin-dro",
                                           "kvplan-plugin+knobs"]
    default, knobs, plugin, dro, both = ev.rows
    assert default.knobs == "watermark=0 max_num_seqs=256 policy=fcfs"
    assert knobs.knobs in ev.knobs["0.9"] and "gate" in plugin.knobs and "gate" in dro.knobs
    # the deployed combination: the knobs row's engine settings, with the gate on top
    assert both.knobs.startswith(knobs.knobs + " gate") and ev.plugin_knobs["0.9"].startswith(knobs.knobs + ";")
    assert both.preemptions < default.preemptions
    assert default.preemptions > 0  # memory binds on this trace at load 0.9: the comparison is not vacuous
    assert plugin.preemptions < default.preemptions and dro.preemptions < default.preemptions
    assert set(ev.reserves) == {"short", "long"} and all(v > 0 for v in ev.reserves.values())
    assert dro.knobs.endswith(f"y={ev.reserves['short']:.0f},{ev.reserves['long']:.0f}")
    assert "token slots/request" in ev.plugin["0.9"]
    assert set(ev.engine_rho["0.9"]) == {"short", "long"} and all(v > 0 for v in ev.engine_rho["0.9"].values())


@pytest.mark.slow
def test_lmax_reservation_never_preempts(traces_dir: Path) -> None:
    ev = evaluate_engine(load_trace(traces_dir / "burstgpt_first7d_gpt4_conv.csv"), loads=(0.9,), rho=1e6)
    dro = ev.rows[3]
    assert dro.method == "kvplan-plugin-dro"
    assert dro.preemptions == 0 and dro.recomputed_tokens == 0 and dro.stalled_frac == 0.0


@pytest.mark.slow
def test_cli_json_and_frontier(traces_dir: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = traces_dir / "burstgpt_first7d_chatgpt_api.csv"
    assert main(["evaluate", "--trace", str(trace), "--engine", "vllm", "--json", "--no-progress", "--frontier",
                 "--replay-requests", "400", "--out", str(tmp_path)]) == 0
    obj = json.loads(capsys.readouterr().out)
    rows = obj["rows"]
    assert all(tuple(r) == ROW_KEYS for r in rows)
    per_load = len(METHODS) + 2 * len(FRONTIER_RHOS) + 1 + len(FRONTIER_WATERMARKS) * len(FRONTIER_SEQS)
    grid = [r["method"] for r in rows if r["method"].startswith(GRID)]
    assert len(set(grid)) * 2 == len(grid)  # one row per (vector, s) at each of the two loads
    per_seqs = {s: len({m for m in grid if seqs_of(m) == s}) for s in FRONTIER_SEQS}
    # per class: nothing, or each distinct quantile (outputs are >= 1 token): 2 to len(FRONTIER_QUANTILES) + 1 values
    n_grid = per_seqs[FRONTIER_SEQS[0]]
    assert set(per_seqs.values()) == {n_grid} and 4 <= n_grid <= (len(FRONTIER_QUANTILES) + 1) ** 2
    assert {f"{GRID}0,0,s={s}" for s in FRONTIER_SEQS} <= set(grid)
    assert len(rows) == 2 * (per_load + n_grid * len(FRONTIER_SEQS)) and {r["load"] for r in rows} == {0.7, 0.9}
    assert {p.rsplit(".", 1)[-1] for p in obj["files"]} == {"csv", "md", "png"}
    ev = evaluate_engine(load_trace(trace), loads=(0.7,), frontier=True, replay_requests=400)
    n, matched = frontier_check(ev.rows, 0.7)
    assert n == len(FRONTIER_WATERMARKS) * len(FRONTIER_SEQS) and 0 <= matched <= n
    assert {r.method for r in ev.rows} >= {"plugin-rho=engine", "plugin-rho=10", "plugin-dro-rho=10"}


def _row(method: str, stalled: float, p99: float, goodput: float) -> EngineRow:
    return EngineRow(trace="t", load=0.9, method=method, preemptions=0, recomputed_tokens=0, ttft_p50_s=1.0,
                     ttft_p99_s=1.0, e2e_p50_s=1.0, e2e_p99_s=p99, stall_p99_s=0.1, stalled_frac=stalled,
                     goodput_rps=goodput, cost=0.0, rho=10.0)


def test_grid_check_compares_at_the_same_max_num_seqs() -> None:
    rows = [_row("stock-w=0.05,s=64", 0.001, 100.0, 1.0), _row("stock-w=0.05,s=256", 0.001, 90.0, 1.0),
            # better than both stock points on every measure, but at s=256: matches only the s=256 one
            _row(f"{GRID}10,20,s=256", 0.0, 80.0, 2.0),
            # at s=64: no more stalls, P99 no worse, less goodput
            _row(f"{GRID}30,40,s=64", 0.001, 100.0, 0.5)]
    assert grid_check(rows, 0.9) == (2, 2)
    assert grid_check(rows, 0.9, goodput=True) == (2, 1)
    assert grid_check([*rows[:3], _row(f"{GRID}30,40,s=64", 0.002, 50.0, 3.0)], 0.9) == (2, 1)
    assert seqs_of("stock-w=0.1,s=32") == 32 and seqs_of("plugin-rho=10") is None


def test_prompts_of_one_length_are_refused_with_the_cause(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = tmp_path / "flat.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{i},100,{1 + 7 * i}\n" for i in range(40)))
    assert main(["evaluate", "--trace", str(trace), "--engine", "vllm", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "flat.csv" in err and "longer than its median, 100 tokens" in err and "long class would be empty" in err


@pytest.mark.parametrize(("args", "flag"), [
    (["--rho", "2,3"], "--rho"), (["--load", "3"], "--load"), (["--load", "x"], "--load"),
    (["--replay-requests", "5"], "--replay-requests"),
], ids=["two-rhos", "load-3", "load-x", "replay-requests-5"])
def test_bad_flags(traces_dir: Path, capsys: pytest.CaptureFixture[str], args: list[str], flag: str) -> None:
    trace = traces_dir / "burstgpt_first7d_chatgpt_api.csv"
    try:
        status = main(["evaluate", "--trace", str(trace), "--engine", "vllm", "--no-progress", *args])
    except SystemExit as stop:  # argparse refuses a malformed flag itself, with the same one-line message
        status = stop.code
    assert status == 2
    assert flag in capsys.readouterr().err
