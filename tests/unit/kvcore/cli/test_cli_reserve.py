"""`kvcore reserve`: JSON and table output for every method, and every bad-input case (exit 2, one line naming
the field, no traceback). Calls ``kvcore.cli.main`` in-process."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kvcore.cli import main
from kvcore.reservation import METHODS

MakeArgv = Callable[[str, Path], list[str]]

TRACE = "arrival_s,input_tokens,output_tokens\n0,10,50\n1,10,120\n2,10,80\n3,10,300\n"


@pytest.fixture()
def trace(tmp_path: Path) -> Path:
    p = tmp_path / "trace.csv"
    p.write_text(TRACE)
    return p


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["reserve", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("method", METHODS)
def test_json_output(capsys: pytest.CaptureFixture[str], trace: Path, method: str) -> None:
    code, out, err = _run(
        capsys, "--samples", str(trace), "--cp", "10", "--cw", "1", "--lmax", "400", "--method", method, "--json"
    )
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 1
    obj = json.loads(lines[0])
    for key in ("method", "reserve_tokens", "worst_case_cost", "expected_cost", "gamma", "solve_seconds", "eps"):
        assert key in obj
    assert obj["method"] == method
    assert 0 <= obj["reserve_tokens"] <= 400
    if method.startswith("dro"):
        assert obj["worst_case_cost"] >= obj["expected_cost"] and obj["radius_reason"]
    else:
        assert obj["worst_case_cost"] is None


def test_dro_and_lp_agree_and_eps_options(capsys: pytest.CaptureFixture[str], trace: Path) -> None:
    base = ["--samples", str(trace), "--cp", "20", "--cw", "1", "--lmax", "400", "--json"]
    results = {}
    for method in ("dro", "dro-lp"):
        code, out, _ = _run(capsys, *base, "--method", method, "--eps", "25")
        assert code == 0
        results[method] = json.loads(out)
    assert results["dro"]["eps"] == 25
    assert results["dro"]["worst_case_cost"] == pytest.approx(results["dro-lp"]["worst_case_cost"], rel=1e-6)
    code, out, _ = _run(capsys, *base, "--eps-frac", "0.5")
    assert json.loads(out)["eps"] == pytest.approx(0.5 * (50 + 120 + 80 + 300) / 4)
    # The default rule's horizon term: 0.15 x mean x ratio^2 (ratio 3 -> 1.35 x mean, above the 4-sample floor of
    # 0.6 x mean and below the saturation radius L_max - mean).
    code, out, _ = _run(capsys, *base, "--horizon-ratio", "3")
    got = json.loads(out)
    assert code == 0 and got["radius_rule"] == "drift" and "horizon:" in got["radius_reason"]
    assert got["eps"] == pytest.approx(0.15 * 9 * (50 + 120 + 80 + 300) / 4)


def test_table_output_and_one_column_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    p = tmp_path / "lengths.txt"
    p.write_text("50\n120\n80\n300\n")
    code, out, _ = _run(capsys, "--samples", str(p), "--cp", "10", "--cw", "1", "--lmax", "400")
    assert code == 0
    assert "reserve_tokens" in out and "worst_case_cost" in out and not out.startswith("{")


def _bad(tmp_path: Path, text: str) -> str:
    p = tmp_path / "bad.csv"
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize(
    ("make_argv", "needle"),
    [
        pytest.param(lambda t, tp: ["--samples", _bad(tp, "")], "bad.csv: empty file", id="empty-file"),
        pytest.param(lambda t, tp: ["--samples", _bad(tp, "arrival_s,input_tokens,output_tokens\n")],
                     "bad.csv: empty file", id="header-only"),
        pytest.param(lambda t, tp: ["--samples", t, "--column", "nope"], "trace.csv line 1: missing column 'nope'",
                     id="missing-column"),
        pytest.param(lambda t, tp: ["--samples", _bad(tp, "5\nnan\n")], "bad.csv line 2 value: length is not finite",
                     id="nan-length"),
        pytest.param(lambda t, tp: ["--samples", _bad(tp, "5\n-3\n")], "bad.csv line 2 value: length is negative",
                     id="negative-length"),
        pytest.param(lambda t, tp: ["--samples", t, "--lmax", "100"], "--lmax: L_max = 100 is below the largest sample",
                     id="lmax-below-max"),
        pytest.param(lambda t, tp: ["--samples", t, "--cp", "-1"], "--cp: must be >= 0", id="negative-cp"),
        pytest.param(lambda t, tp: ["--samples", t, "--cw", "-2"], "--cw: must be >= 0", id="negative-cw"),
        pytest.param(lambda t, tp: ["--samples", t, "--cp", "nan"], "--cp: must be finite", id="nan-cp"),
        pytest.param(lambda t, tp: ["--samples", t, "--eps", "-5"], "--eps: radius must be", id="negative-eps"),
        pytest.param(lambda t, tp: ["--samples", t, "--eps-frac", "-0.1"], "--eps-frac: radius fraction must be",
                     id="negative-eps-frac"),
        pytest.param(lambda t, tp: ["--samples", t, "--horizon-ratio", "-1"], "--horizon-ratio: must be a finite",
                     id="negative-horizon-ratio"),
        pytest.param(lambda t, tp: ["--samples", _bad(tp, "output_tokens,w\n5,0\n7,0\n"), "--weight-column", "w"],
                     "output_tokens.weights: all weights are zero", id="all-zero-weights"),
        pytest.param(lambda t, tp: ["--samples", _bad(tp, "output_tokens,w\n5,1\n7,-1\n"), "--weight-column", "w"],
                     "bad.csv line 3 w: weight is negative", id="negative-weight"),
        pytest.param(lambda t, tp: ["--samples", str(tp / "missing.csv")], "missing.csv: no such file",
                     id="missing-file"),
    ],
)
def test_bad_input(
    capsys: pytest.CaptureFixture[str], trace: Path, tmp_path: Path, make_argv: MakeArgv, needle: str
) -> None:
    argv = {"--cp": "10", "--cw": "1", "--lmax": "400"}
    extra = make_argv(str(trace), tmp_path)
    for i in range(0, len(extra), 2):
        argv[extra[i]] = extra[i + 1]
    flat = [x for kv in argv.items() for x in kv]
    code, out, err = _run(capsys, *flat)
    assert code == 2
    assert out == ""
    assert err.startswith("kvcore reserve: error: ")
    assert needle in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_lmax_error_suggests_fix(capsys: pytest.CaptureFixture[str], trace: Path) -> None:
    _, _, err = _run(capsys, "--samples", str(trace), "--cp", "1", "--cw", "1", "--lmax", "100")
    assert "--lmax >= 300" in err


def test_unknown_method_and_both_radius_flags_are_usage_errors(capsys: pytest.CaptureFixture[str], trace: Path) -> None:
    common = ["reserve", "--samples", str(trace), "--cp", "1", "--cw", "1", "--lmax", "400"]
    for extra in (["--method", "p50"], ["--eps", "1", "--eps-frac", "0.1"], ["--eps", "1", "--horizon-ratio", "1"]):
        with pytest.raises(SystemExit) as info:
            main([*common, *extra])
        assert info.value.code == 2
        assert "Traceback" not in capsys.readouterr().err
