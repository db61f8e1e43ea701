"""Inputs and outputs of the simulator (the vLLM engine model, fast and reference): every bad input is refused with
an error naming its field; results serialise to JSON and nothing is written; the trace helpers are seeded and
checked."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from kvcore.errors import InputError
from kvcore.sim import SimGroup, SimPolicy, Workload, resample_trace, simulate_engine, workload_from_trace

simulate = simulate_engine
simulate_reference = functools.partial(simulate_engine, reference=True)

G = {"name": "g", "replicas": 1, "kv_capacity_tokens": 1000, "step_time_base_s": 0.01, "step_time_per_seq_s": 0.001}


def _workload(**over: Any) -> Workload:
    cols: dict[str, Any] = {"arrival_s": [0.0, 1.0, 2.0], "class_index": [0, 1, 0], "input_tokens": [5, 6, 7],
                            "output_tokens": [3, 4, 5]}  # fmt: skip
    cols.update(over)
    return Workload.from_arrays(**cols)


def _policy(**over: Any) -> SimPolicy:
    args: dict[str, Any] = {"reserve_tokens": [4, 4], "routing": [[1.0], [1.0]]}
    args.update(over)
    return SimPolicy.from_arrays(**args)


WORKLOAD_ERRORS = [
    ("negative-output", {"output_tokens": [3, -1, 5]}, "workload.output_tokens[1]"),
    ("zero-output", {"output_tokens": [3, 4, 0]}, "workload.output_tokens[2]"),
    ("negative-input", {"input_tokens": [-5, 6, 7]}, "workload.input_tokens[0]"),
    ("fractional-input", {"input_tokens": [5, 6.5, 7]}, "workload.input_tokens[1]"),
    ("non-monotonic", {"arrival_s": [0.0, 2.0, 1.0]}, "workload.arrival_s[2]"),
    ("nan-arrival", {"arrival_s": [0.0, float("nan"), 1.0]}, "workload.arrival_s[1]"),
    ("length-mismatch", {"class_index": [0, 1]}, "workload.class_index"),
    ("2-d", {"input_tokens": [[5, 6, 7]]}, "workload.input_tokens"),
    ("class-out-of-range", {"class_index": [0, 3, 0], "n_classes": 2}, "workload.class_index[1]"),
]


@pytest.mark.parametrize(("over", "field"), [c[1:] for c in WORKLOAD_ERRORS], ids=[c[0] for c in WORKLOAD_ERRORS])
def test_workload_errors_name_the_field(over: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as err:
        _workload(**over)
    assert err.value.field == field
    assert str(err.value).startswith(field)


POLICY_ERRORS = [
    ("negative-reserve", {"reserve_tokens": [4, -1]}, "policy.reserve_tokens[1]"),
    ("routing-row-sum", {"routing": [[1.0], [0.5]]}, "policy.routing[1]"),
    ("routing-negative", {"routing": [[1.5, -0.5], [1.0, 0.0]]}, "policy.routing[0][1]"),
    ("routing-shape", {"routing": [[1.0]]}, "policy.routing"),
    ("prefix-fraction-range", {"prefix_fraction": [[0.5], [1.5]]}, "policy.prefix_fraction[1][0]"),
    ("prefix-fraction-shape", {"prefix_fraction": [[0.5, 0.5]]}, "policy.prefix_fraction"),
    ("prefix-tokens-fraction", {"prefix_tokens": [1.5, 2]}, "policy.prefix_tokens[0]"),
    ("admission-range", {"admission": [1.0, 1.2]}, "policy.admission[1]"),
    ("slo-non-positive", {"e2e_slo_s": [0.0, 1.0]}, "policy.e2e_slo_s[0]"),
    ("cp-per-class", {"cp": [1.0, 2.0, 3.0]}, "policy.cp"),
]


@pytest.mark.parametrize(("over", "field"), [c[1:] for c in POLICY_ERRORS], ids=[c[0] for c in POLICY_ERRORS])
def test_policy_errors_name_the_field(over: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as err:
        _policy(**over)
    assert err.value.field == field


def test_rejected_class_needs_no_routing_row() -> None:
    p = _policy(routing=[[1.0], [0.0]], admission=[1.0, 0.0])
    r = simulate(_workload(), [SimGroup(**G)], p, rng=np.random.default_rng(0))
    assert (r.finished, r.rejected_admission, r.classes[1].rejected) == (2, 1, 1)


CROSS_ERRORS: list[tuple[str, Callable[[], tuple[Any, ...]], str]] = [
    ("groups-vs-routing", lambda: (_workload(), [SimGroup(**G), SimGroup(**{**G, "name": "h"})], _policy()),
     "policy.routing"),
    ("classes-vs-workload", lambda: (_workload(n_classes=3), [SimGroup(**G)], _policy()), "policy.reserve_tokens"),
    ("zero-replicas-routed", lambda: (_workload(), [SimGroup(**{**G, "replicas": 0})], _policy()),
     "policy.routing[0][0]"),
    ("duplicate-group-names", lambda: (_workload(), [SimGroup(**G), SimGroup(**G)], _policy(routing=[[1, 0], [1, 0]])),
     "groups"),
]  # fmt: skip


@pytest.mark.parametrize(("make", "field"), [c[1:] for c in CROSS_ERRORS], ids=[c[0] for c in CROSS_ERRORS])
@pytest.mark.parametrize("sim", [simulate, simulate_reference], ids=["fast", "reference"])
def test_cross_checks_name_the_field(sim: Callable[..., Any], make: Callable[[], tuple[Any, ...]], field: str) -> None:
    w, groups, p = make()
    with pytest.raises(InputError) as err:
        sim(w, groups, p, rng=np.random.default_rng(0))
    assert err.value.field == field


def test_rng_must_be_injected_generator() -> None:
    with pytest.raises(InputError) as err:
        simulate(_workload(), [SimGroup(**G)], _policy(), rng=np.random.RandomState(0))  # type: ignore[arg-type]
    assert err.value.field == "rng"


MODEL_ERRORS = [
    ("group-capacity", lambda: SimGroup(**{**G, "kv_capacity_tokens": 0}), "kv_capacity_tokens"),
    ("group-step-time", lambda: SimGroup(**{**G, "step_time_base_s": float("nan")}), "step_time_base_s"),
    ("group-extra", lambda: SimGroup(**{**G, "gpus": 4}), "gpus"),
]


@pytest.mark.parametrize(("make", "field"), [c[1:] for c in MODEL_ERRORS], ids=[c[0] for c in MODEL_ERRORS])
def test_models_reject_bad_fields(make: Callable[[], object], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        make()
    assert field in {str(e["loc"][0]) for e in err.value.errors()}


def test_fractional_reserve_rounds_up_to_whole_slots() -> None:
    assert _policy(reserve_tokens=[3.2, 0.0]).reserve_tokens.tolist() == [4, 0]


def test_inputs_are_frozen() -> None:
    w = _workload()
    with pytest.raises(ValueError):
        w.output_tokens[0] = 9
    with pytest.raises(AttributeError):
        w.n_classes = 5  # type: ignore[misc]


def test_json_and_nothing_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = simulate(_workload(), [SimGroup(**G)], _policy(), rng=np.random.default_rng(0), keep_requests=True)
    data = json.loads(r.to_json())
    for key in ("preemptions", "recomputed_tokens", "queueing", "ttft", "e2e", "goodput_rps", "slo_violations",
                "classes", "finished", "rejected_admission", "reservation_cost"):  # fmt: skip
        assert key in data
    assert "outcomes" not in data and set(data["e2e"]) == {"count", "mean", "p50", "p99", "max"}
    assert r.outcomes is not None and r.outcomes.finish_ns[2] * 1e-9 > 2.0
    assert list(tmp_path.iterdir()) == []  # simulate wrote nothing


def test_resample_trace_is_seeded_and_scales_rate() -> None:
    arrival, inp, out = np.array([0.0, 1.0, 3.0, 6.0]), np.array([10, 20, 30, 40]), np.array([1, 2, 3, 4])
    a = resample_trace(inp, out, 5000, rng=np.random.default_rng(3), arrival_s=arrival, rate_rps=10.0)
    b = resample_trace(inp, out, 5000, rng=np.random.default_rng(3), arrival_s=arrival, rate_rps=10.0)
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.input_tokens, b.input_tokens)
    assert len(a) / a.arrival_s[-1] == pytest.approx(10.0, rel=0.05)
    assert set(zip(a.input_tokens.tolist(), a.output_tokens.tolist())) <= set(zip(inp.tolist(), out.tolist()))


def test_trace_without_arrivals_needs_a_rate() -> None:
    with pytest.raises(InputError) as err:
        workload_from_trace([1, 2], [3, 4])
    assert err.value.field == "arrival_s"
    w = workload_from_trace([1, 2], [3, 4], rate_rps=2.0, rng=np.random.default_rng(0))
    assert w.arrival_s[0] == 0.0 and w.arrival_s[1] > 0.0


def test_group_from_profile_reads_capacity_and_step_time() -> None:
    @dataclass(frozen=True)
    class Prof:
        kv_capacity_tokens: float = 1234.9
        step_t0_s: float = 0.02
        step_t1_s: float = 0.0003

    g = SimGroup.from_profile("g", 3, Prof(), prefill_tokens_per_s=5000.0)
    assert (g.replicas, g.kv_capacity_tokens, g.step_time_base_s, g.step_time_per_seq_s) == (3, 1234, 0.02, 0.0003)
    assert g.prefill_tokens_per_s == 5000.0
    assert SimGroup.from_profile("g", 1, Prof()).prefill_tokens_per_s == SimGroup(**G).prefill_tokens_per_s
    with pytest.raises(ValidationError):
        SimGroup.from_profile("g", 1, Prof(kv_capacity_tokens=0.0))  # an infeasible layout has no KV room
