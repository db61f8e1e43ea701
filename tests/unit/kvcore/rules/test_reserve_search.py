"""The reservation rule's searches (kvcore.rules.reserve_search) on seeded replays of a vendored trace:

- the fast search never reserves for a class that is not preempted with nothing reserved (checked on the replays'
  own y = 0 runs), keeps only what pays on every replay by MIN_GAIN, and measures fewer requests than the full one;
- its work limit (in simulated requests, never timed) stops it within one vector's measurement of the limit, says
  so in the reason, and still never keeps something worse than reserving nothing;
- nothing to protect: when stock vLLM's preemptions cost less than MIN_GAIN per request, the fast rule simulates
  nothing beyond stock's runs; run after the knob rule on the same store, it simulates nothing at all;
- both searches refuse an unknown search name and a negative work limit, naming the field.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvcore.errors import InputError
from kvcore.rules.classes import KnobClass
from kvcore.rules.knobs import choose_knobs
from kvcore.rules.replay_set import ReplaySet
from kvcore.rules.reserve import MIN_GAIN, choose_reserves, class_rho
from kvcore.rules.replays import ReplayStore
from reserve_rule_world import NO_TARGETS, classes, group  # type: ignore[import-not-found]

REQUESTS = 800


@pytest.mark.slow
@pytest.mark.parametrize(("kv", "seed"), [(20_000, 3), (16_000, 5)])
def test_fast_moves_only_preempted_classes_pays_and_measures_less(traces_dir: Path, kv: int, seed: int) -> None:
    # "ping": one output token, done in the step that admits it, so never preempted
    cls = classes(traces_dir, (10.0, 3.0)) + [KnobClass.build("ping", 1.0, np.full(50, 16.0), np.ones(50), 40.0, 10.0)]
    g = group(kv)
    rs = ReplaySet(g, cls, requests=REQUESTS, seed=seed, **NO_TARGETS)
    fast = choose_reserves(g, cls, replays=rs, search="fast")
    full = choose_reserves(g, cls, replays=ReplaySet(g, cls, requests=REQUESTS, seed=seed, **NO_TARGETS),
                           search="full")
    assert fast.work < full.work, (fast.work, full.work)
    rho = class_rho(cls)
    zero = (0,) * len(cls)
    harm = sum(rs.measure_on(zero, k).harm for k in range(len(rs.runs)))
    assert harm[2] == 0 and harm[0] > 0 and harm[1] > 0, harm
    assert any(m.reserves["ping"] for m in full.candidates)  # the full search does try it
    for m in fast.candidates:  # a class without harm at y = 0 is never moved
        for i, c in enumerate(cls):
            if harm[i] == 0:
                assert m.reserves[c.name] == 0, (c.name, m.reserves)
    ys = tuple(fast.reserves[c.name] for c in cls)
    assert any(ys), fast.reason
    assert np.all(rs.costs(ys, rho) <= rs.costs(zero, rho) - MIN_GAIN), fast.reason


@pytest.mark.slow
def test_the_work_limit_stops_the_search_and_says_so(traces_dir: Path) -> None:
    cls = classes(traces_dir, (10.0, 3.0))
    g = group(20_000)
    free = choose_reserves(g, cls, replays=ReplaySet(g, cls, requests=REQUESTS, seed=3))
    limit = 3 * REQUESTS
    rs = ReplaySet(g, cls, requests=REQUESTS, seed=3)
    capped = choose_reserves(g, cls, replays=rs, work_limit=limit)
    assert free.work > capped.work, (free.work, capped.work)
    stock, one_vector = 2 * REQUESTS, 2 * REQUESTS  # stock's runs come first; one vector may finish past the limit
    assert capped.work <= stock + limit + one_vector
    assert f"work limit of {limit}" in capped.reason
    ys = tuple(capped.reserves[c.name] for c in cls)
    rho = class_rho(cls)
    assert rs.costs(ys, rho).mean() <= rs.costs((0, 0), rho).mean()


def test_nothing_to_protect_costs_only_stocks_runs_and_nothing_after_the_knob_rule(traces_dir: Path) -> None:
    cls = classes(traces_dir)
    g = group(3_000_000)
    store = ReplayStore()
    shared = store.get(g, cls, requests=400)
    knobs = choose_knobs(g, cls, shared=shared)
    assert knobs.work >= 2 * 400  # the knob rule ran stock's two replays (and whatever else it measured)
    stock = [shared.stock(k) for k in range(2)]
    assert sum(r.preemptions for r in stock) == 0  # independently: stock vLLM never preempts here
    choice = choose_reserves(g, cls, replays=ReplaySet(g, cls, shared=shared))
    assert choice.work == 0 and choice.reserves == {"short": 0, "long": 0}
    assert "nothing to protect" in choice.reason and set(choice.sources.values()) == {"none"}
    alone = choose_reserves(g, cls, requests=400)
    assert alone.work == 2 * 400 and alone.reserves == choice.reserves


def test_bad_search_settings_name_the_field(traces_dir: Path) -> None:
    cls = classes(traces_dir)
    rs = ReplaySet(group(20_000), cls, requests=50)
    with pytest.raises(InputError, match="reserves.search"):
        choose_reserves(group(20_000), cls, replays=rs, search="greedy")
    with pytest.raises(InputError, match="reserves.work_limit"):
        choose_reserves(group(20_000), cls, replays=rs, work_limit=-1)
