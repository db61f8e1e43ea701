"""``kvcore plan`` on the shipped example and on bad files (exit 2, the field named), the YAML samples forms
(trace, inline values, histogram buckets, windows), the JSON keys of ``kvcore bench scale`` and ``kvcore bench
fleet``, and their bad sizes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcore.cli import main
from kvcore.cli.instance_file import instance_from_mapping

REPO = Path(__file__).resolve().parents[4]
EXAMPLE = REPO / "examples" / "instance-70b.yaml"


def test_example_plans(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(EXAMPLE), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "feasible"
    assert {c["name"] for c in out["classes"]} == {"chat", "code", "batch"}
    assert all(g["tp"] * g["pp"] == g["gpus_per_replica"] for g in out["groups"])


def test_horizon_ratio_reaches_drift_classes_only(capsys: pytest.CaptureFixture[str]) -> None:
    # code and batch use the default drift rule; chat pins the paper's fraction rule and must not move.
    eps: dict[float, dict[str, float]] = {}
    for ratio in (0.01, 3.0):
        assert main(["plan", str(EXAMPLE), "--json", "--horizon-ratio", str(ratio)]) == 0
        out = json.loads(capsys.readouterr().out)
        eps[ratio] = {c["name"]: c["radius"]["eps"] for c in out["classes"]}
        reasons = {c["name"]: c["radius"]["reason"] for c in out["classes"]}
        assert reasons["chat"].startswith("eps = 0.15 x mean")
    assert eps[0.01]["chat"] == eps[3.0]["chat"]
    for name in ("code", "batch"):
        assert eps[3.0][name] > eps[0.01][name]  # a plan that must hold 3 history spans gets a bigger ball
    assert main(["plan", str(EXAMPLE), "--horizon-ratio", "-1"]) == 2
    assert "error: --horizon-ratio" in capsys.readouterr().err


def test_example_readable(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(EXAMPLE)]) == 0
    assert "objective/s" in capsys.readouterr().out


BAD_YAML = [
    ("negative-rate", "arrival_rate: 1.0", "arrival_rate: -2.0", "classes[1].arrival_rate"),
    ("unknown-gpu", "gpu_type: A100-80GB\n    gpus: 16", "gpu_type: V100\n    gpus: 16", "groups[0].gpu_type"),
    ("missing-trace", "../kvcore/data/traces/azure2023_conv.csv", "nope.csv", "classes[0].samples.trace"),
    ("bad-layout", "[[2, 1], [4, 1], [2, 2], [4, 2], [8, 1]]", "[[2, 1, 1]]", "groups[0].layouts[0]"),
]


@pytest.mark.parametrize("name,old,new,field", BAD_YAML, ids=[b[0] for b in BAD_YAML])
def test_bad_file_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, old: str,
                                  new: str, field: str) -> None:
    text = EXAMPLE.read_text()
    assert old in text
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace(old, new, 1).replace("../kvcore/data", str(REPO / "kvcore" / "data")))
    assert main(["plan", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"error: {field}" in err and "Traceback" not in err


def test_sample_forms(tmp_path: Path) -> None:
    base = {"groups": [{"name": "g", "gpu_type": "A100-80GB", "gpus": 8, "model": "llama-8b", "layouts": [[1, 1]]}]}
    cls = {"name": "c", "arrival_rate": 1.0, "input_tokens": 100, "lmax": 1000, "cp": 5, "cw": 1}
    forms = [
        {"samples": {"values": [10, 20, 30], "weights": [1, 1, 2]}},
        {"samples": {"buckets": {"le": [10, 100, "+Inf"], "count": [5, 9, 10]}}},
        {"windows": [{"values": [10, 20]}, {"values": [30, 40]}]},
    ]
    for form in forms:
        inst = instance_from_mapping({**base, "classes": [{**cls, **form}]}, base=tmp_path)
        assert inst.classes[0].samples().values.max() <= 1000
    inst = instance_from_mapping({**base, "classes": [{**cls, **forms[1]}]}, base=tmp_path)
    assert inst.classes[0].samples().values.max() == 1000  # +Inf capped at lmax


@pytest.mark.slow
def test_bench_scale_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "scale", "--size", "3x4x100", "--seed", "1", "--exact", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("classes", "configs", "samples", "bcd_seconds", "bcd_objective", "exact_seconds",
                "exact_objective", "gap"):
        assert key in out
    assert (out["classes"], out["configs"], out["samples"]) == (3, 4, 100)
    assert abs(out["gap"]) <= 1e-4
    assert main(["bench", "scale", "--size", "2x3x50", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gap"] is None


@pytest.mark.parametrize("size", ["3x4", "0x4x100", "3x13x100", "axbxc"], ids=["short", "zero", "too-many", "junk"])
def test_bench_scale_bad_size(capsys: pytest.CaptureFixture[str], size: str) -> None:
    assert main(["bench", "scale", "--size", size]) == 2
    assert "--size" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_fleet_json(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["bench", "fleet", "--classes", "40", "--groups", "12", "--configs", "6", "--samples", "200", "--seed",
            "3", "--warm", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("classes", "groups", "configs", "samples", "plan_seconds", "objective", "lower_bound", "gap",
                "peak_rss_mb", "warm_plan_seconds", "warm_objective", "warm_lower_bound", "warm_gap"):
        assert key in out
    assert (out["classes"], out["groups"], out["configs"], out["samples"]) == (40, 12, 6, 200)
    assert out["method"] == "fleet" and out["status"] == "feasible"
    assert 0 < out["lower_bound"] <= out["objective"]
    assert out["gap"] == pytest.approx((out["objective"] - out["lower_bound"]) / out["objective"], rel=1e-12)
    assert out["gap"] <= 1e-2 and out["warm_gap"] <= 1e-2
    assert out["warm_objective"] != out["objective"]   # the traffic moved
    assert out["plan_seconds"] > 0 and out["peak_rss_mb"] > 10
    assert main(args) == 0   # seeded: the same instance and plan again
    again = json.loads(capsys.readouterr().out)
    assert (again["objective"], again["lower_bound"]) == (out["objective"], out["lower_bound"])


BAD_FLEET = [("--classes", "0"), ("--groups", "-1"), ("--configs", "13"), ("--samples", "0"), ("--load", "0")]


@pytest.mark.parametrize("flag,value", BAD_FLEET, ids=[f[0].strip("-") for f in BAD_FLEET])
def test_bench_fleet_bad_sizes(capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    args = {"--classes": "4", "--groups": "2", "--configs": "3", "--samples": "10"}
    args[flag] = value
    try:  # a value the flag's type refuses exits through argparse (SystemExit 2), a size the planner refuses returns 2
        status = main(["bench", "fleet", *[t for kv in args.items() for t in kv]])
    except SystemExit as exc:
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err
    assert f"error: {flag}" in err and "Traceback" not in err
