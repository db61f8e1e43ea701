"""Fault injection, slow world (issue 26, item 3): the reconcile's cycle deadline. Over test_op_faults.py's world,
every place a cycle can spend its time is made slow in turn on an injected clock -- the history range query, the
arrival-rate queries, the capacity query, the planner, the engine-knob rule, the reservation rule -- and, on the
real clock, the real HTTP client against a server that paces its bytes below the read timeout for 60 s (status line,
headers, body) with ``timeoutSeconds: 60`` and a 1 s cycle deadline.

For every scenario: no exception leaves ``reconcile``; the outcome and status say ``CycleDeadlineExceeded``;
nothing but status is written (no half-applied plan); Degraded=True while Ready stays True (the last good plan,
status and detail, stays in force); no query is sent once the deadline passed; and without the slowness the next
reconcile converges. Prints its counts (``pytest -s``)."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from kvplan_operator import conditions as C
from kvplan_operator.prom import PromClient
from kvplan_operator.reconcile import Deps
from operator_checks import detail_document  # type: ignore[import-not-found]
from slow_server import slow_prometheus  # type: ignore[import-not-found]
from op_faults_world import (BUDGET, T0, World, baseline, check, recover,  # type: ignore[import-not-found]
                            report, spec)
from op_faults_world import RECORD  # type: ignore[import-not-found]
from op_faults_world import raw_client_must_not_be_called  # type: ignore[import-not-found]  # noqa: F401 - autouse

DEADLINE_S = 60.0


class Clock:
    """An injected clock that the slow parts advance."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class SlowProm:
    """Wraps the world's recorded Prometheus: each call whose kind is in ``slow`` advances the clock by ``cost``
    seconds; every call is recorded with the clock at its start."""

    def __init__(self, inner: Any, clock: Clock, slow: dict[str, float]) -> None:
        self.inner, self.clock, self.slow = inner, clock, slow
        self.sent: list[tuple[str, float]] = []

    def _kind(self, promql: str, ranged: bool) -> str:
        if ranged:
            return "range"
        return "capacity" if "cache_config_info" in promql else "rate"

    def query(self, promql: str, *, at: float | None = None) -> Any:
        kind = self._kind(promql, False)
        self.sent.append((kind, self.clock.t))
        self.clock.t += self.slow.get(kind, 0.0)
        return self.inner.query(promql, at=at)

    def query_range(self, promql: str, *, start: float, end: float, step: float) -> Any:
        self.sent.append(("range", self.clock.t))
        self.clock.t += self.slow.get("range", 0.0)
        return self.inner.query_range(promql, start=start, end=end, step=step)


def slow_call(inner: Any, clock: Clock, cost: float) -> Any:
    """A planner / rule that takes ``cost`` seconds on the injected clock."""

    def call(*a: Any, **k: Any) -> Any:
        clock.t += cost
        return inner(*a, **k)

    return call


# name: (what is slow and by how much, on the injected clock)
SLOW_PARTS = {
    "range-query": {"range": DEADLINE_S + 1},
    "rate-queries": {"rate": DEADLINE_S / 2 + 1},
    "capacity-query": {"capacity": DEADLINE_S + 1},
    "every-query": {"range": 20.0, "rate": 20.0, "capacity": 21.0},
    "planner": {"planner": DEADLINE_S + 1},
    "knob-rule": {"knobs": DEADLINE_S + 1},
}


def deps_for(world: World, clock: Clock, slow: dict[str, float], prom: SlowProm | None) -> Deps:
    return Deps(kube=world.kube, prom_factory=(lambda conn: prom) if prom is not None else PromClient.connect,
                planner=slow_call(world.planner, clock, slow.get("planner", 0.0)), clock=clock,
                resolve=lambda host: ["10.0.0.9"], knobs=slow_call(world.knobs, clock, slow.get("knobs", 0.0)),
                reserves=slow_call(world.reserves, clock, slow.get("reserves", 0.0)), cycle_deadline_s=DEADLINE_S)


def two_rate_queries(world: World) -> None:
    """Both classes read their arrival rate with a query of their own (the rate-queries scenario: 2 x 31 s)."""
    world.spec["classes"][1].pop("arrivalRate", None)
    world.spec["classes"][1]["arrivalRateQuery"] = 'sum(rate(vllm:request_success_total{model_name="code"}[5m]))'


def expect_cut(world: World, out: Any, good: dict, label: str, failures: list[str]) -> None:
    check(world, out, good, expect=C.CYCLE_DEADLINE_EXCEEDED, label=label, failures=failures)
    if [w for w in world.kube.writes if w != "status"]:
        failures.append(f"{label}: wrote {world.kube.writes} past the cycle deadline")
    conds = {c["type"]: c for c in world.kube.status["conditions"]}
    if (conds["Degraded"]["status"], conds["Ready"]["status"]) != ("True", "True"):
        failures.append(f"{label}: Degraded={conds['Degraded']['status']} Ready={conds['Ready']['status']}")
    if world.kube.status.get("lastError", {}).get("reason") != C.CYCLE_DEADLINE_EXCEEDED:
        failures.append(f"{label}: lastError {world.kube.status.get('lastError')}")


def test_cycle_deadline_matrix():
    failures: list[str] = []
    counts: Counter = Counter()
    for name, slow in SLOW_PARTS.items():
        world = World()
        two_rate_queries(world)
        good = baseline(world)
        clock = Clock(T0 + 60)
        prom = SlowProm(world.prom, clock, slow)
        world.kube.writes.clear()
        world._snapshot_layouts()
        counts["scenarios"] += 1
        from kvplan_operator.reconcile import reconcile
        from op_fakes import kvplan  # type: ignore[import-not-found]

        try:
            out = reconcile(kvplan(world.spec, world.kube), deps_for(world, clock, slow, prom))
        except Exception as exc:
            counts["exceptions"] += 1
            failures.append(f"{name}: {type(exc).__name__} escaped reconcile: {exc}")
            continue
        counts[f"reason:{out.reason}"] += 1
        expect_cut(world, out, good, name, failures)
        late = [(k, t) for k, t in prom.sent if t >= T0 + 60 + DEADLINE_S]
        if late:
            failures.append(f"{name}: queries sent past the deadline: {late}")
        counts["disagreements"] += bool(world.disagreements())
        recover(world, T0 + 120, failures, name)
        if world.restarts > BUDGET:
            counts["budget"] += 1
            failures.append(f"{name}: {world.restarts} restarts against a budget of {BUDGET}")
    report("cycle deadline (injected clock)", counts, failures)
    assert counts["scenarios"] == len(SLOW_PARTS)
    assert failures == [], "\n".join(failures)


@pytest.mark.parametrize("behaviour", ["status-line", "headers", "body-content-length", "series-by-series"])
@pytest.mark.slow
def test_cycle_deadline_against_a_slow_server(behaviour):
    """The real client, the real clock: timeoutSeconds 60 would let the request run; the 1 s cycle deadline ends
    the reconcile well inside the server's 60 s of trickle (bound 20 s: load cannot flip it)."""
    failures: list[str] = []
    with slow_prometheus(behaviour, pause=0.2, duration=60.0) as server:
        world = World()
        good = baseline(world)
        world.spec = spec(server.url)
        world.spec["prometheus"]["timeoutSeconds"] = 60
        world.kube.writes.clear()
        world._snapshot_layouts()
        from kvplan_operator.reconcile import reconcile
        from op_fakes import kvplan  # type: ignore[import-not-found]

        deps = Deps(kube=world.kube, prom_factory=PromClient.connect, planner=world.planner, clock=time.time,
                    resolve=lambda host: ["127.0.0.1"], knobs=world.knobs, reserves=world.reserves,
                    cycle_deadline_s=1.0)
        t0 = time.monotonic()
        out = reconcile(kvplan(world.spec, world.kube), deps)
        waited = time.monotonic() - t0
    assert waited < 20.0, f"the reconcile ran {waited:.1f} s against a 1 s cycle deadline"
    world.spec = spec()  # the good Prometheus again: the detail and status checks below compare with the baseline
    expect_cut(world, out, good, behaviour, failures)
    assert "cycle deadline (1 s, --cycle-deadline)" in out.message
    assert detail_document(world.kube.configmaps.get) == good["detail"]
    assert failures == [], "\n".join(failures)


def _writes_of_the_relayout() -> list[str]:
    """The writes (other than status) that the stage-1 re-layout makes when nothing is slow."""
    world = World()
    baseline(world)
    world.kube.writes.clear()
    from kvplan_operator.reconcile import reconcile
    from op_fakes import kvplan  # type: ignore[import-not-found]

    out = reconcile(kvplan(world.spec, world.kube), deps_for(world, Clock(T0 + 60), {}, world.prom))
    assert out.ok, out
    return [w for w in world.kube.writes if w not in RECORD]


def test_cycle_deadline_during_apply():
    """Apply under the cycle deadline: after the k-th write of a re-layout the injected clock jumps past the writes'
    end (the deadline less the record phase's reserve). No later write is sent, status says CycleDeadlineExceeded
    and names the write not sent, nothing disagrees (the stage order holds, as at a failed write), and the next
    reconcile converges within the disruption budget."""
    from kvplan_operator.cycle import RECORD_RESERVE_S
    from kvplan_operator.reconcile import reconcile
    from op_fakes import kvplan  # type: ignore[import-not-found]

    planned = _writes_of_the_relayout()
    assert len(planned) >= 3, planned  # routing off, state, Deployments, routing on
    failures: list[str] = []
    counts: Counter = Counter()
    for k in range(1, len(planned)):
        world = World()
        good = baseline(world)
        clock = Clock(T0 + 60)
        world.kube.writes.clear()
        world._snapshot_layouts()
        count = world.kube.on_write
        sent: list[tuple[str, float]] = []

        def slow_write(kube: Any, label: str, k: int = k) -> None:
            assert count is not None
            count(kube, label)
            sent.append((label, clock.t))
            if len([w for w, _ in sent if w not in RECORD]) == k:
                clock.t += DEADLINE_S - RECORD_RESERVE_S  # this write took the cycle past the writes' end

        world.kube.on_write = slow_write
        counts["scenarios"] += 1
        out = reconcile(kvplan(world.spec, world.kube), deps_for(world, clock, {}, world.prom))
        world.kube.on_write = count
        counts[f"reason:{out.reason}"] += 1
        label = f"after write {k} of {len(planned)}"
        done = [w for w, _ in sent if w not in RECORD]
        if done != planned[:k]:
            failures.append(f"{label}: wrote {done}, expected exactly {planned[:k]}")
        if out.reason != C.CYCLE_DEADLINE_EXCEEDED:
            failures.append(f"{label}: reason {out.reason}: {out.message}")
        error = world.kube.status.get("lastError", {})
        if error.get("reason") != C.CYCLE_DEADLINE_EXCEEDED or len(error.get("applied", [])) != k:
            failures.append(f"{label}: lastError {error}")
        if world.kube.status.get("plan") != good["status"].get("plan"):
            failures.append(f"{label}: status.plan changed by a cut reconcile")
        if world.disagreements():
            counts["disagreements"] += 1
            failures.append(f"{label}: disagreeing objects {world.disagreements()}")
        recover(world, T0 + 120, failures, label)
        if world.restarts > BUDGET:
            counts["budget"] += 1
            failures.append(f"{label}: {world.restarts} restarts against a budget of {BUDGET}")
    report("cycle deadline during apply (injected clock)", counts, failures)
    assert counts["scenarios"] == len(planned) - 1
    assert failures == [], "\n".join(failures)
