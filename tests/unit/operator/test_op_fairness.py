"""One tenant cannot starve another (issue 26, item 3): the handlers' slots (operator/fairness.py). Reconciles of
one namespace beyond ``--namespace-concurrency``, and a second reconcile of one KVPlan, are not started and never
wait for a slot (waiting would hold one of kopf's worker threads); the timer skips them, a change handler retries
them. Driven through ``handlers._run`` on a kopf-sized thread pool with the reconcile replaced at the operator's own
seam (it blocks until released, standing for a slow Prometheus): deterministic, no wall-clock assertion."""

from __future__ import annotations

import logging
import threading
import types
from concurrent.futures import ThreadPoolExecutor

import pytest

from kvplan_operator import conditions as C
from kvplan_operator import handlers
from kvplan_operator.fairness import Slots, workers
from kvplan_operator.reconcile import Deps, Outcome

LOG = logging.getLogger("test")


class Kube:
    def __init__(self) -> None:
        self.kvplans: dict[tuple[str, str], dict] = {}

    def add(self, ns: str, name: str) -> dict:
        body = {"metadata": {"namespace": ns, "name": name, "uid": f"{ns}/{name}", "generation": 2},
                "spec": {"replan": {"interval": "5m"}}, "status": {"observedGeneration": 1}}
        self.kvplans[(ns, name)] = body
        return body

    def get_kvplan(self, ns: str, name: str) -> dict | None:
        return self.kvplans.get((ns, name))


class Reconciles:
    """Stands for kvplan_operator.reconcile.reconcile: KVPlans in ``slow`` block until ``release`` is set."""

    def __init__(self, slow: set[str]) -> None:
        self.slow = slow
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.running: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.done: list[str] = []
        self.entered = threading.Semaphore(0)

    def __call__(self, body: dict, deps: Deps) -> Outcome:
        ns, uid = body["metadata"]["namespace"], body["metadata"]["uid"]
        with self.lock:
            self.running[ns] = self.running.get(ns, 0) + 1
            self.peak[ns] = max(self.peak.get(ns, 0), self.running[ns])
        self.entered.release()
        if uid in self.slow:
            assert self.release.wait(60), "never released"
        with self.lock:
            self.running[ns] -= 1
            self.done.append(uid)
        return Outcome(True, C.RECONCILED)


def wait_done(futures: list, n: int) -> list:
    """The futures once ``n`` of them are done (a wait for a condition, bounded only against a hang)."""
    import time

    end = time.monotonic() + 60
    while time.monotonic() < end:
        done = [f for f in futures if f.done()]
        if len(done) >= n:
            return done
        time.sleep(0.01)
    raise AssertionError(f"only {len([f for f in futures if f.done()])} of {n} skipped reconciles returned")


def runtime(kube: Kube, limit: int) -> types.SimpleNamespace:
    deps = Deps(kube=kube, prom_factory=lambda conn: None, planner=lambda *a, **k: None)  # type: ignore[arg-type]
    return types.SimpleNamespace(runtime=handlers.Runtime(deps, slots=Slots(limit)))


@pytest.mark.parametrize(("limit", "slow_in_a", "cpus"), [
    pytest.param(2, 6, 2, id="six-slow-in-one-namespace-2-cores"),
    pytest.param(1, 6, 2, id="limit-1"),
    pytest.param(2, 40, 16, id="forty-slow-16-cores"),
    pytest.param(3, 3, 1, id="exactly-the-limit-1-core"),
])
def test_a_slow_namespace_leaves_workers_for_the_others(monkeypatch, limit, slow_in_a, cpus):
    kube = Kube()
    slow = {kube.add("tenant-a", f"slow-{i}")["metadata"]["uid"] for i in range(slow_in_a)}
    healthy = [kube.add(f"tenant-{c}", "plan") for c in "bcd"]
    fake = Reconciles(slow)
    monkeypatch.setattr(handlers, "reconcile", fake)
    memo = runtime(kube, limit)
    pool = ThreadPoolExecutor(max_workers=workers(None, limit, cpus))  # the pool kopf gets from the operator
    try:
        slow_runs = [pool.submit(handlers._run, kube.kvplans[("tenant-a", f"slow-{i}")], memo, "timer", LOG)
                     for i in range(slow_in_a)]
        for _ in range(min(limit, slow_in_a)):  # the ones that got a slot are inside reconcile, blocked
            assert fake.entered.acquire(timeout=60)
        skipped = wait_done(slow_runs, slow_in_a - min(limit, slow_in_a))
        assert all(f.result() is None for f in skipped)  # not started: the timer tries at its next tick
        healthy_runs = [pool.submit(handlers._run, b, memo, "timer", LOG) for b in healthy]
        outcomes = [f.result(timeout=60) for f in healthy_runs]  # they finish while tenant-a is still stuck
        assert not fake.release.is_set()
        assert [o.reason for o in outcomes] == [C.RECONCILED] * 3
        assert fake.peak["tenant-a"] == min(limit, slow_in_a)
        busy = handlers._run(kube.kvplans[("tenant-a", "slow-0")], memo, "create", LOG)
        assert busy is not None and busy.reason == C.NAMESPACE_BUSY and busy.retry_after is not None
    finally:
        fake.release.set()
        pool.shutdown(wait=True)
    assert memo.runtime.slots.in_flight == {} and memo.runtime.slots.running == set()


def test_a_change_handler_does_not_wait_for_the_same_kvplans_timer(monkeypatch):
    kube = Kube()
    body = kube.add("ns", "plan")
    fake = Reconciles({body["metadata"]["uid"]})
    monkeypatch.setattr(handlers, "reconcile", fake)
    memo = runtime(kube, 4)
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(handlers._run, body, memo, "timer", LOG)
        assert fake.entered.acquire(timeout=60)
        with pytest.raises(handlers.kopf.TemporaryError) as info:  # on_change turns it into a retry, at once
            handlers.on_change(body=body, memo=memo, logger=LOG, reason="update")
        assert "NamespaceBusy" in str(info.value) and "this KVPlan" in str(info.value)
        assert handlers._run(body, memo, "timer", LOG) is None  # the timer just skips
        fake.release.set()
        assert first.result(timeout=60).reason == C.RECONCILED
    assert fake.done == [body["metadata"]["uid"]]


@pytest.mark.parametrize(("kopf_default", "limit", "cpus", "want"), [
    (None, 2, 2, 8), (None, 2, 64, 32), (None, 10, 2, 40), (50, 2, 2, 50), (None, 0, 1, 5)])
def test_workers(kopf_default, limit, cpus, want):
    assert workers(kopf_default, limit, cpus) == want


def test_slots_table():
    s = Slots(2)
    assert s.enter("a", "1") is None and s.enter("a", "2") is None
    assert "namespace a" in (s.enter("a", "3") or "")
    assert "this KVPlan" in (s.enter("b", "1") or "")  # one KVPlan is never reconciled twice at once
    assert s.enter("b", "4") is None
    s.leave("a", "1")
    assert s.enter("a", "3") is None
    for ns, uid in (("a", "2"), ("a", "3"), ("b", "4")):
        s.leave(ns, uid)
    assert s.in_flight == {} and s.running == set()


# --- the settings: kvplan-operator flags, their environment defaults, the chart --------------------------------
@pytest.mark.parametrize(("argv", "env", "deadline", "concurrency"), [
    pytest.param([], {}, 120.0, 2, id="defaults"),
    pytest.param([], {"KVPLAN_CYCLE_DEADLINE_S": "30", "KVPLAN_NAMESPACE_CONCURRENCY": "5"}, 30.0, 5, id="env"),
    pytest.param(["--cycle-deadline", "0", "--namespace-concurrency", "1"], {}, 0.0, 1, id="flags-none-and-one"),
    pytest.param(["--cycle-deadline", "7.5"], {"KVPLAN_CYCLE_DEADLINE_S": "30"}, 7.5, 2, id="flag-over-env"),
])
def test_settings_flags(monkeypatch, argv, env, deadline, concurrency):
    from kvplan_operator.main import build_parser

    for k in ("KVPLAN_CYCLE_DEADLINE_S", "KVPLAN_NAMESPACE_CONCURRENCY"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    a = build_parser().parse_args(argv)
    assert (a.cycle_deadline, a.namespace_concurrency) == (deadline, concurrency)


@pytest.mark.parametrize(("flag", "value"), [
    pytest.param(f, v, id=f"{f}={v}") for f, vals in (
        ("--cycle-deadline", ("-1", "nan", "inf", "abc", "", "1e999")),
        ("--namespace-concurrency", ("0", "-2", "1.5", "x", "")))
    for v in vals])
def test_settings_bad_values_name_the_flag(capsys, flag, value):
    from kvplan_operator.main import build_parser

    with pytest.raises(SystemExit) as info:
        build_parser().parse_args([flag, value])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("kvplan-operator: error: argument") and flag in err and "Traceback" not in err


def test_chart_passes_the_settings():
    import pathlib

    import yaml

    root = pathlib.Path(__file__).resolve().parents[3] / "charts" / "kvplan-operator"
    values = yaml.safe_load((root / "values.yaml").read_text())["replan"]
    assert (values["cycleDeadlineSeconds"], values["namespaceConcurrency"]) == (120, 2)
    template = (root / "templates" / "deployment.yaml").read_text()
    for env, key in (("KVPLAN_CYCLE_DEADLINE_S", "cycleDeadlineSeconds"),
                     ("KVPLAN_NAMESPACE_CONCURRENCY", "namespaceConcurrency")):
        assert f"name: {env}\n              value: {{{{ .Values.replan.{key} | quote }}}}" in template


def test_cleanup_stops_requests_and_a_restart_in_the_same_process_resets_it():
    """kopf's cleanup (SIGTERM) marks the operator stopping; a later start in the same process (kopf.testing's
    runner, a resume test) must not inherit it, or every reconcile would end as OperatorStopping."""
    from kvplan_operator import deadline

    kube = Kube()
    memo = runtime(kube, 2)
    try:
        handlers.stop()
        assert deadline.stopping()
        handlers.configure(settings=handlers.kopf.OperatorSettings(), memo=memo)
        assert not deadline.stopping()
    finally:
        deadline.reset_stop()
