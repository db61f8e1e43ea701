"""The replays both engine-model rules share (kvcore.rules.replays): the store hands out one set per group situation
and a new one whenever something the replays depend on changes (a class's rate, history, reservation or rho, the
group's capacity, the replay settings, the engine base), never for the group's name alone; stock vLLM's runs are
memoised and counted once; two rules on one store count each simulated request once, and a group met again under
another name costs both rules nothing; bad settings name the field."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvcore.errors import InputError
from kvcore.rules.classes import KnobClass
from kvcore.rules.knobs import choose_knobs
from kvcore.rules.replay_set import ReplaySet
from kvcore.rules.reserve import choose_reserves
from kvcore.rules.replays import GroupReplays, ReplayStore
from kvcore.sim.engine import EngineConfig
from knob_search_world import classes, group  # type: ignore[import-not-found]


def changed(cls: list[KnobClass], **update: object) -> list[KnobClass]:
    first = cls[0]
    fields = {"name": first.name, "rate_rps": first.rate_rps, "inputs": first.inputs, "outputs": first.outputs,
              "reserve_tokens": first.reserve_tokens, "rho": first.rho, "weights": first.weights} | update
    return [KnobClass(**fields)] + cls[1:]  # type: ignore[arg-type]


def test_the_store_shares_one_situation_and_separates_every_change(traces_dir: Path) -> None:
    cls = classes(traces_dir, (10.0, 2.0))
    store = ReplayStore()
    a = store.get(group(30_000), cls, requests=200)
    assert store.get(group(30_000).model_copy(update={"name": "other"}), cls, requests=200) is a
    variants = [
        store.get(group(31_000), cls, requests=200),
        store.get(group(30_000), changed(cls, rate_rps=cls[0].rate_rps * 1.1), requests=200),
        store.get(group(30_000), changed(cls, outputs=cls[0].outputs + 1), requests=200),
        store.get(group(30_000), changed(cls, reserve_tokens=cls[0].reserve_tokens + 1), requests=200),
        store.get(group(30_000), changed(cls, rho=cls[0].rho * 2), requests=200),
        store.get(group(30_000), cls, requests=201),
        store.get(group(30_000), cls, requests=200, seed=1),
        store.get(group(30_000), cls, requests=200, base=EngineConfig(max_num_seqs=64)),
        store.get(group(30_000), cls, requests=200, arrivals_s=np.arange(300, dtype=np.float64)),
    ]
    assert all(v is not a for v in variants) and len({id(v) for v in variants}) == len(variants)


@pytest.mark.slow
def test_two_rules_on_one_store_count_each_request_once(traces_dir: Path) -> None:
    cls = classes(traces_dir, (10.0, 2.0), 1.5)
    g = group(20_000)  # under pressure: both rules measure beyond stock's runs
    store = ReplayStore()
    shared = store.get(g, cls, requests=300)
    knobs = choose_knobs(g, cls, shared=shared)
    res = choose_reserves(g, cls, replays=ReplaySet(g, cls, shared=shared))
    assert knobs.work >= 2 * 300 and res.work > 0
    assert store.work == shared.work == knobs.work + res.work
    alone = choose_reserves(g, cls, requests=300)
    assert alone.reserves == res.reserves and alone.work == res.work + 2 * 300  # + its own stock runs
    twin = g.model_copy(update={"name": "twin"})
    again = store.get(twin, cls, requests=300)
    assert again is shared
    assert choose_knobs(twin, cls, shared=again).work == 0


def test_stock_runs_are_memoised_and_bad_settings_name_the_field(traces_dir: Path) -> None:
    cls = classes(traces_dir, (10.0, 2.0))
    gr = GroupReplays(group(30_000), cls, requests=150, replays=3)
    first = gr.stock(2)
    assert gr.stock(2) is first and gr.work == 150
    assert gr.stock_config().admission == "vllm" and gr.stock_config().watermark == 0.0
    for kw, field in (({"requests": 0}, "rules.requests"), ({"replays": 0}, "rules.replays")):
        with pytest.raises(InputError, match=field):
            GroupReplays(group(30_000), cls, **kw)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="rules.classes"):
        GroupReplays(group(30_000), [])


def test_bases_that_stock_vllm_runs_alike_share_stock_runs(traces_dir: Path) -> None:
    """The knob rule measures on vLLM's defaults, the reservation rule on the engines as they run: when they differ
    only in the watermark or the policy (which stock vLLM does not run), stock's runs are simulated once."""
    cls = classes(traces_dir, (10.0, 2.0))
    store = ReplayStore()
    plain = store.get(group(30_000), cls, requests=200)
    marked = store.get(group(30_000), cls, requests=200, base=EngineConfig(watermark=0.02, policy="priority"))
    capped = store.get(group(30_000), cls, requests=200, base=EngineConfig(max_num_seqs=64))
    assert len({id(plain), id(marked), id(capped)}) == 3
    runs = [plain.stock(k) for k in range(2)]
    assert [marked.stock(k) for k in range(2)] == runs and marked.work == 0
    assert capped.stock(0) is not runs[0] and capped.work == 200  # stock at 64 sequences is another run
    assert store.work == 2 * 200 + 200
