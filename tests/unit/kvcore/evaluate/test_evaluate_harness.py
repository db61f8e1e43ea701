"""The evaluation harness and ``kvcore evaluate``: the per-request cost formula, row costs against a hand
computation, the policy registry, gm summaries, the JSON keys, the files of ``--out``, and bad input (malformed
traces name their line; bad flags name the flag)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from kvcore.cli import main
from kvcore.errors import InputError
from kvcore.evaluate import POLICIES, Evaluation, Row, evaluate, ratio_cells, request_cost
from kvcore.history.traces import Trace


@pytest.mark.parametrize(
    ("y", "xi", "rho", "expected"),
    [
        pytest.param(10.0, 10.0, 5.0, 0.0, id="exact"),
        pytest.param(10.0, 14.0, 5.0, 20.0, id="under-reserved-pays-rho-per-token"),
        pytest.param(10.0, 4.0, 5.0, 6.0, id="over-reserved-pays-one-per-token"),
        pytest.param(0.0, 3.0, 100.0, 300.0, id="zero-reserve"),
    ],
)
def test_request_cost(y: float, xi: float, rho: float, expected: float) -> None:
    assert request_cost(y, np.array([xi]), rho).tolist() == [expected]


def _trace(n: int = 200, timestamps: bool = True) -> Trace:
    rng = np.random.default_rng(0)
    out = np.round(rng.gamma(2.0, 50.0, n)) + 1
    arr = np.arange(float(n)) if timestamps else None
    return Trace(arrival_s=arr, input_tokens=np.full(n, 100.0), output_tokens=out, source="synthetic.csv")


def test_split_row_cost_matches_hand_computation() -> None:
    tr = _trace()
    ev = evaluate(tr, protocol="split", rhos=[10.0], shifts=[1.5], methods=["p90", "max"])
    half = tr.output_tokens[100:]
    xi = np.minimum(half * 1.5, tr.output_tokens.max())
    p90 = float(np.quantile(tr.output_tokens[:100], 0.9, method="inverted_cdf"))
    assert ev.cost(10.0, 1.5, "p90") == pytest.approx(float(np.mean(request_cost(p90, xi, 10.0))))
    lmax = float(tr.output_tokens.max())
    assert ev.cost(10.0, 1.5, "max") == pytest.approx(float(np.mean(lmax - xi)))


def test_registry_has_the_issue_policies() -> None:
    assert {"default", "dro-paper", "saa", "p90", "p95", "p99", "mean", "max", "mean+1sigma",
            "mean+2sigma"} <= set(POLICIES)


def test_rows_cover_every_cell_and_default_reports_its_radius() -> None:
    ev = evaluate(_trace(), protocol="rolling", rhos=[2.0, 50.0], shifts=[1.0, 2.5], methods=["default", "saa"])
    assert {(r.rho, r.shift, r.method) for r in ev.rows} == {
        (rho, s, m) for rho in (2.0, 50.0) for s in (1.0, 2.5) for m in ("default", "saa")}
    assert ev.plans == 28
    assert all(r.eps_mean is not None for r in ev.rows if r.method == "default")
    assert all(r.eps_mean is None for r in ev.rows if r.method == "saa")


def test_default_policy_is_told_the_episode_horizon() -> None:
    # The same history and costs: a plan that must hold as long as its history (ratio 1) gets at least the paper's
    # radius, one re-made after a quarter of it gets a sixteenth of that horizon term.
    from kvcore.evaluate.policies import get_policy
    from kvcore.history.samples import History, Samples

    rng = np.random.default_rng(4)
    hist = History.of([Samples.from_arrays(np.round(rng.gamma(2.0, 100.0, 500))) for _ in range(4)])
    fn = get_policy("default").fn
    long, short = fn(hist, 50.0, 2000.0, 1.0), fn(hist, 50.0, 2000.0, 0.25)
    mean = hist.pooled().mean()
    assert long.eps is not None and short.eps is not None
    assert long.eps >= 0.15 * mean - 1e-9
    assert short.eps < long.eps
    assert long.reserve_tokens > short.reserve_tokens  # rho = 50: the paper's radius goes robust


def _row(trace: str, rho: float, method: str, cost: float) -> Row:
    return Row(trace=trace, protocol="split", rho=rho, shift=1.0, method=method, cost=cost, requests=1, plans=1,
               reserve_mean=0.0, under_reserved=0.0)


def test_gm_is_geometric_mean_of_ratio_to_best() -> None:
    rows = (_row("a", 2, "x", 1.0), _row("a", 2, "y", 2.0), _row("b", 2, "x", 8.0), _row("b", 2, "y", 2.0))
    ev = Evaluation(trace="t", protocol="split", lmax=1.0, requests=1, timestamps=True, plans=1, scored_plans=1,
                    reused_windows=0, rows=rows)
    cells = ratio_cells([ev], ["x", "y"])[("split", 1.0)]
    assert cells["x"].gm == pytest.approx(math.sqrt(1.0 * 4.0))
    assert cells["y"].gm == pytest.approx(math.sqrt(2.0 * 1.0))
    assert cells["x"].worst == pytest.approx(4.0) and cells["x"].worst_at == "b rho=2"


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "trace.csv"
    p.write_text(text)
    return p


@pytest.mark.slow
def test_cli_json_keys_and_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = ["arrival_s,input_tokens,output_tokens"] + [f"{i}.0,10,{5 + (i * 7) % 40}" for i in range(64)]
    p = _write(tmp_path, "\n".join(lines) + "\n")
    out = tmp_path / "out"
    rc = main(["evaluate", "--trace", str(p), "--protocol", "rolling", "--rho", "2,10", "--shift", "1,2.5",
               "--method", "default,saa,p95", "--out", str(out), "--json"])
    assert rc == 0
    obj = json.loads(capsys.readouterr().out)
    assert {"trace", "protocol", "rows"} <= set(obj)
    assert obj["trace"] == "trace.csv" and obj["protocol"] == "rolling"
    assert len(obj["rows"]) == 2 * 2 * 3
    assert all({"rho", "shift", "method", "cost"} <= set(r) for r in obj["rows"])
    names = sorted(f.name for f in out.iterdir())
    assert names == ["trace-rolling-cost-vs-rho.png", "trace-rolling-cost-vs-shift.png", "trace-rolling.csv",
                     "trace-rolling.md"]


@pytest.mark.parametrize(
    ("text", "args", "needle"),
    [
        pytest.param("arrival_s,input_tokens\n0,1\n", [], "line 1: missing column(s) output_tokens",
                     id="missing-column"),
        pytest.param("arrival_s,input_tokens,output_tokens\n0,1,5\n1,2,-3\n", [], "line 3 output_tokens",
                     id="negative-tokens"),
        pytest.param("arrival_s,input_tokens,output_tokens\n0,1,5\n9,2,3\n4,2,3\n", [], "line 4 arrival_s",
                     id="timestamps-go-backwards"),
        pytest.param(",1,5\n,2,3\n", [], "line 1: missing column", id="no-header"),
        pytest.param("arrival_s,input_tokens,output_tokens\n,1,5\n,2,3\n", ["--protocol", "rolling"],
                     "no arrival timestamps", id="rolling-without-timestamps"),
        pytest.param("arrival_s,input_tokens,output_tokens\n0,1,5\n1,2,3\n", ["--rho", "2,x"], "--rho",
                     id="bad-rho"),
        pytest.param("arrival_s,input_tokens,output_tokens\n0,1,5\n1,2,3\n", ["--shift", "0"], "--shift",
                     id="zero-shift"),
        pytest.param("arrival_s,input_tokens,output_tokens\n0,1,5\n1,2,3\n", ["--method", "p42"], "unknown policy",
                     id="unknown-method"),
    ],
)
def test_cli_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, args: list[str],
                       needle: str) -> None:
    p = _write(tmp_path, text)
    rc = main(["evaluate", "--trace", str(p), "--no-progress", *args])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("kvcore evaluate: error: ")
    assert needle in err
    assert "Traceback" not in err


def test_protocol_name_is_checked() -> None:
    with pytest.raises(InputError, match="protocol"):
        evaluate(_trace(), protocol="bogus")


@pytest.mark.parametrize("protocol", ["split", "rolling"])
def test_simulate_fills_the_simulated_fields(protocol: str) -> None:
    ev = evaluate(_trace(), protocol=protocol, rhos=[10.0], shifts=[1.0], methods=["saa", "max"], simulate=True)
    for r in ev.rows:
        assert r.p99_latency_s is not None and r.p99_latency_s > 0
        assert r.slo_violation_rate is not None and 0.0 <= r.slo_violation_rate <= 1.0
        assert r.preemptions is not None and r.preemptions >= 0
        assert r.waste_token_slot_s is not None and r.waste_token_slot_s >= 0
    # Reserving L_max wastes more slot-seconds than the critical fractile and never preempts.
    saa, top = (next(r for r in ev.rows if r.method == m) for m in ("saa", "max"))
    assert top.waste_token_slot_s is not None and saa.waste_token_slot_s is not None
    assert top.waste_token_slot_s > saa.waste_token_slot_s
    assert top.preemptions == 0
