"""``kvcore evaluate --observe``: policies trained on per-window bucket counts, costs on the raw test outputs. A
layout whose buckets are one token wide reproduces the raw rows exactly; a coarse layout's split reserve matches a
hand-built history of the same windows; rows and JSON carry ``observe``; bad names are refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kvcore.cli import main
from kvcore.errors import InputError
from kvcore.evaluate import evaluate, request_cost
from kvcore.evaluate.observe import OBSERVE, binned_history
from kvcore.reservation import reserve
from kvcore.history.samples import History, Samples
from kvcore.history.series import vllm_buckets
from kvcore.history.traces import Trace, histogram_to_samples


def _trace(n: int, top: int, seed: int = 0) -> Trace:
    rng = np.random.default_rng(seed)
    out = np.minimum(np.round(rng.gamma(2.0, top / 6.0, n)) + 1, top)
    return Trace(arrival_s=np.arange(float(n)), input_tokens=np.full(n, 50.0), output_tokens=out,
                 source="synthetic.csv")


def test_observe_names_are_raw_and_the_layouts() -> None:
    assert OBSERVE == ("raw", "vllm", "powers-of-4", "kvplan")


@pytest.mark.parametrize("protocol", ["split", "rolling"])
def test_one_token_buckets_reproduce_raw_rows(protocol: str) -> None:
    tr = _trace(400, 10)  # every output <= 10 tokens: kvplan's layout is one bucket per token there
    kw = dict(protocol=protocol, rhos=[2.0, 50.0], shifts=[1.0, 2.5], methods=["default", "saa", "p95"])
    raw = evaluate(tr, **kw)  # type: ignore[arg-type]
    seen = evaluate(tr, observe="kvplan", **kw)  # type: ignore[arg-type]
    assert seen.observe == "kvplan" and raw.observe == "raw"
    for a, b in zip(raw.rows, seen.rows):
        assert (a.rho, a.shift, a.method) == (b.rho, b.shift, b.method)
        assert b.observe == "kvplan" and a.observe == "raw"
        assert b.cost == pytest.approx(a.cost, rel=1e-12) and b.reserve_mean == pytest.approx(a.reserve_mean)


def test_coarse_buckets_train_on_window_counts_and_cost_on_raw_outputs() -> None:
    tr = _trace(800, 2000, seed=3)
    ev = evaluate(tr, protocol="split", rhos=[10.0], shifts=[1.5], methods=["saa"], observe="vllm")
    lmax = float(tr.output_tokens.max())
    bounds = [*map(str, vllm_buckets(int(lmax))), "+Inf"]
    windows = []
    for part in np.array_split(tr.output_tokens[:400], 4):  # the split protocol's four training windows
        cum = [float(np.count_nonzero(part <= float(b))) for b in bounds]
        windows.append(histogram_to_samples(bounds, cum, max_model_len=lmax))
    y = reserve(History(tuple(windows)), cp=10.0, cw=1.0, lmax=lmax, method="saa").reserve_tokens
    test = np.minimum(tr.output_tokens[400:] * 1.5, lmax)
    row = ev.rows[0]
    assert row.reserve_mean == y
    assert row.cost == pytest.approx(float(np.mean(request_cost(y, test, 10.0))))
    raw_y = float(np.quantile(tr.output_tokens[:400], 10 / 11, method="inverted_cdf"))
    assert y != raw_y  # the buckets really were what it saw


def test_binned_history_counts_requests_per_window() -> None:
    rng = np.random.default_rng(1)
    hist = History.of([Samples.from_arrays(np.round(rng.gamma(2.0, 100.0, n)) + 1) for n in (50, 120, 80)])
    b = binned_history(hist, "powers-of-4", lmax=4096)
    assert [w.observations for w in b.windows] == [50, 120, 80]
    assert all(w.binning is not None for w in b.windows)


def test_bad_observe_and_model_are_refused() -> None:
    tr = _trace(100, 500)
    with pytest.raises(InputError) as info:
        evaluate(tr, observe="prometheus")
    assert info.value.field == "observe"
    with pytest.raises(InputError) as info:
        evaluate(tr, observe="vllm", bucket_model="midpoint")
    assert info.value.field == "bucket_model"


@pytest.mark.slow
def test_cli_rows_gain_observe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = ["arrival_s,input_tokens,output_tokens"] + [f"{i}.0,10,{5 + (i * 37) % 900}" for i in range(96)]
    p = tmp_path / "trace.csv"
    p.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    rc = main(["evaluate", "--trace", str(p), "--rho", "2,10", "--shift", "1", "--method", "default,saa",
               "--observe", "vllm", "--bucket-model", "linear", "--out", str(out), "--json", "--no-progress"])
    assert rc == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["observe"] == "vllm" and obj["bucket_model"] == "linear"
    assert len(obj["rows"]) == 4 and all(r["observe"] == "vllm" for r in obj["rows"])
    assert sorted(f.name for f in out.iterdir())[2:] == ["trace-split-vllm.csv", "trace-split-vllm.md"]
    with pytest.raises(SystemExit) as stop:  # argparse refuses a name outside the choices
        main(["evaluate", "--trace", str(p), "--observe", "histogram", "--no-progress"])
    assert stop.value.code == 2
    assert "kvcore evaluate: error: --observe: invalid choice: 'histogram'" in capsys.readouterr().err


def test_engine_evaluation_refuses_observe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "trace.csv"
    p.write_text("arrival_s,input_tokens,output_tokens\n0,10,5\n1,10,7\n")
    rc = main(["evaluate", "--trace", str(p), "--engine", "vllm", "--observe", "vllm", "--no-progress"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--observe" in err and "Traceback" not in err
