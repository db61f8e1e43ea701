"""SLO capacity (kvcore.evaluate.slo_capacity, slo_methods; the CLI's --slo-capacity): on the engine model the
search's rate is measured to meet the share and one lattice step up is not, and a brute-force scan of the lattice
below agrees, and the attainment curve reported holds both; the clairvoyant gate never preempts and ties the plugin
where memory does not bind; the JSON rows have the documented keys; targets no rate can meet, a trace too short, and
a method that cannot run are reported (exit 2 naming the flag, or a row with a reason), never a crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcore.cli import main
from kvcore.errors import InputError
from kvcore.evaluate import slo_methods
from kvcore.evaluate.engine import EngineFleet, EngineSetup
from kvcore.evaluate.slo_capacity import MIN_REQUESTS, evaluate_slo_capacity
from kvcore.evaluate.slo_methods import SLO_METHODS, MethodRunner
from kvcore.evaluate.slo_search import AttainmentCurve, find_slo_rate
from kvcore.history.traces import Trace, load_trace

ROW_KEYS = {"trace", "method", "share", "slo_rate_rps", "ratio_vs_default", "preemptions", "recomputed_tokens",
            "stalled_frac", "stall_p99_s", "ttft_p99_s", "tpot_p99_s", "gpus"}


def _head(traces_dir: Path, name: str, n: int, timed: bool = True) -> Trace:
    t = load_trace(traces_dir / name)
    arrival = t.arrival_s[:n] if (timed and t.arrival_s is not None) else None
    return Trace(arrival, t.input_tokens[:n], t.output_tokens[:n], source=name)


def _csv(tmp_path: Path, traces_dir: Path, name: str, rows: int) -> Path:
    lines = (traces_dir / name).read_text().splitlines()[: rows + 1]
    out = tmp_path / name
    out.write_text("\n".join(lines) + "\n")
    return out


@pytest.mark.slow
def test_search_on_the_engine_agrees_with_a_scan(traces_dir: Path) -> None:
    setup = EngineSetup(_head(traces_dir, "burstgpt_first7d_gpt4_conv.csv", 300), EngineFleet(replicas=1), 100)
    runner = MethodRunner(setup, rho=10.0, seed=0)
    start = 0.5 * setup.capacity_rps
    curve = AttainmentCurve(lambda r: runner.run("vllm-default", r).attainment)
    found = find_slo_rate(curve, share=0.9, start_rps=start)
    assert found.rate_rps is not None and found.fail_rps is not None
    assert curve(found.rate_rps) >= 0.9 > curve(found.fail_rps)
    assert found.fail_rps / found.rate_rps <= 1.01 + 1e-9
    # brute force: scanning the lattice in 1% steps up from the bracket's low end (the start halved until it passes)
    low = -70 if curve(start) < 0.9 else 0
    while curve(start * 1.01 ** low) < 0.9:
        low -= 70
    k = low
    while curve(start * 1.01 ** (k + 1)) >= 0.9:
        k += 1
    assert start * 1.01 ** k == pytest.approx(found.rate_rps, rel=0.01)


@pytest.mark.slow
def test_clairvoyant_never_preempts_and_ties_where_memory_is_free(traces_dir: Path) -> None:
    setup = EngineSetup(_head(traces_dir, "burstgpt_first7d_gpt4_conv.csv", 400), EngineFleet(replicas=1,
                        kv_capacity_tokens=15_000), 200)
    runner = MethodRunner(setup, rho=10.0, seed=3)
    sat = setup.capacity_rps
    heavy = {m: runner.run(m, sat) for m in ("vllm-default", "kvplan-plugin+knobs", "clairvoyant")}
    assert heavy["vllm-default"].result.preemptions > 0  # memory binds: the comparison is not vacuous
    assert heavy["clairvoyant"].result.preemptions == 0 and heavy["clairvoyant"].result.recomputed_tokens == 0
    assert heavy["clairvoyant"].result.preemptions <= heavy["kvplan-plugin+knobs"].result.preemptions
    light = {m: runner.run(m, 0.2 * sat) for m in ("kvplan-plugin+knobs", "clairvoyant")}
    assert light["clairvoyant"].attainment >= light["kvplan-plugin+knobs"].attainment


@pytest.mark.slow
def test_json_rows(tmp_path: Path, traces_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _csv(tmp_path, traces_dir, "burstgpt_first7d_gpt4_conv.csv", 240)
    assert main(["evaluate", "--trace", str(trace), "--engine", "vllm", "--slo-capacity", "--json",
                 "--slo-methods", "vllm-default,clairvoyant", "--replay-requests", "100"]) == 0
    captured = capsys.readouterr()
    obj = json.loads(captured.out)
    assert [(r["method"], r["share"]) for r in obj["rows"]] == [("vllm-default", 0.99), ("vllm-default", 0.9),
                                                               ("clairvoyant", 0.99), ("clairvoyant", 0.9)]
    for r in obj["rows"]:
        assert ROW_KEYS <= set(r)
        assert r["gpus"] == 8 and r["slo_rate_rps"] > 0
    assert [r["ratio_vs_default"] for r in obj["rows"][:2]] == [1.0, 1.0]
    # the attainment curves to plot: each row's rate is a measured point that meets its share
    assert sorted(obj["curves"]) == ["clairvoyant", "vllm-default"]
    for r in obj["rows"]:
        assert dict(map(tuple, obj["curves"][r["method"]]))[r["slo_rate_rps"]] >= r["share"]
    assert "methods [" in captured.err  # the progress bar


@pytest.mark.slow
def test_table(tmp_path: Path, traces_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _csv(tmp_path, traces_dir, "burstgpt_first7d_gpt4_conv.csv", 240)
    assert main(["evaluate", "--trace", str(trace), "--engine", "vllm", "--slo-capacity", "--no-progress",
                 "--slo-methods", "vllm-default", "--replay-requests", "100"]) == 0
    out = capsys.readouterr().out
    assert "slo_rate_rps" in out and "saturation" in out and out.count("vllm-default") == 2


@pytest.mark.parametrize("flags,needle", [
    (["--ttft-slo", "0.001"], "--ttft-slo: 0.001 s is below the prefill of the shortest prompt"),
    (["--tpot-slo", "0.001"], "--tpot-slo: 0.001 s is below one decode step"),
    (["--ttft-slo", "-1"], "--ttft-slo"),
    (["--slo-share", "1.5"], "--slo-share"),
    (["--slo-methods", "nope"], "--method"),
    (["--frontier"], "--frontier: does not apply with --slo-capacity"),
], ids=["ttft-below-prefill", "tpot-below-decode-step", "ttft-negative", "share", "method", "frontier"])
def test_bad_targets_exit_2(tmp_path: Path, traces_dir: Path, capsys: pytest.CaptureFixture[str], flags: list[str],
                            needle: str) -> None:
    trace = _csv(tmp_path, traces_dir, "burstgpt_first7d_gpt4_conv.csv", 240)
    assert main(["evaluate", "--trace", str(trace), "--engine", "vllm", "--slo-capacity", "--no-progress",
                 *flags]) == 2
    assert needle in capsys.readouterr().err


def test_trace_too_short(tmp_path: Path, traces_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _csv(tmp_path, traces_dir, "burstgpt_first7d_gpt4_conv.csv", MIN_REQUESTS - 1)
    assert main(["evaluate", "--trace", str(trace), "--engine", "vllm", "--slo-capacity", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--trace" in err and f"at least {MIN_REQUESTS}" in err


def test_slo_capacity_needs_the_engine(tmp_path: Path, traces_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _csv(tmp_path, traces_dir, "burstgpt_first7d_gpt4_conv.csv", 240)
    assert main(["evaluate", "--trace", str(trace), "--slo-capacity"]) == 2
    assert "--slo-capacity" in capsys.readouterr().err


@pytest.mark.slow
def test_method_that_cannot_run_is_a_row(traces_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise InputError("engine.max_num_seqs", "this fleet cannot run the knob rule")

    monkeypatch.setattr(slo_methods, "choose_knobs", refuse)
    ev = evaluate_slo_capacity(_head(traces_dir, "burstgpt_first7d_gpt4_conv.csv", 240), replay_requests=100,
                               methods=("vllm-default", "kvplan-knobs"))
    knobs = [r for r in ev.rows if r.method == "kvplan-knobs"]
    assert len(knobs) == 2 and all(r.slo_rate_rps is None and "cannot run" in r.reason for r in knobs)
    assert all(r.slo_rate_rps is not None for r in ev.rows if r.method == "vllm-default")


@pytest.mark.slow
def test_fleet_too_small_for_the_share_is_a_row(traces_dir: Path) -> None:
    # 2,000 KV tokens: the 2.5% of the replay longer than that are refused as oversize, so no rate meets 99%
    ev = evaluate_slo_capacity(_head(traces_dir, "burstgpt_first7d_gpt4_conv.csv", 240), replay_requests=100,
                               methods=("vllm-default",), fleet=EngineFleet(kv_capacity_tokens=2_000))
    p99, p90 = ev.rows
    assert p99.slo_rate_rps is None and "misses the share at every rate" in p99.reason
    assert p90.slo_rate_rps is not None and p90.ratio_vs_default == 1.0


@pytest.mark.slow
def test_untimed_trace_gets_seeded_poisson(traces_dir: Path) -> None:
    trace = _head(traces_dir, "burstgpt_first7d_gpt4_conv.csv", 240, timed=False)
    a = evaluate_slo_capacity(trace, replay_requests=100, methods=("vllm-default",), seed=1)
    b = evaluate_slo_capacity(trace, replay_requests=100, methods=("vllm-default",), seed=1)
    assert "Poisson" in a.arrivals and a == b
    # the curve each rate was read from: the rate measured to meet its share, the next measured rate (one 1% step up)
    # measured to miss it
    assert list(a.curves) == ["vllm-default"]
    curve = a.curves["vllm-default"]
    assert [r for r, _ in curve] == sorted({r for r, _ in curve}) and all(0.0 <= x <= 1.0 for _, x in curve)
    for row in a.rows:
        assert row.slo_rate_rps is not None
        i = [r for r, _ in curve].index(row.slo_rate_rps)
        assert curve[i][1] >= row.share > curve[i + 1][1]
        assert curve[i + 1][0] / curve[i][0] == pytest.approx(1.01)
    assert set(SLO_METHODS) >= {"vllm-default", "vllm-tuned", "kvplan-knobs", "kvplan-plugin+knobs", "clairvoyant"}
