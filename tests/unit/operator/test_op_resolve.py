"""Resolving the Prometheus host under the request limit, the cycle deadline and the operator's stop
(operator/prom/resolve.py; security issue "a slow world can stall the operator").

Deterministic: a hanging lookup is a raw resolver blocked on an Event the test releases (always, at the end); the
tiny limits are only the mechanism that must fire, and no assertion reads the clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence

import pytest

from kvplan_operator import conditions as C
from kvplan_operator import deadline
from kvplan_operator.prom import UrlPolicy, vet_url
from kvplan_operator.prom import resolve
from kvplan_operator.prom.resolve import BoundedResolver, ResolveCut

TINY = 0.05  # the limit that must fire; never a duration anything is compared with
LONG = 30.0  # a limit that must not fire (a test would fail on its cause, not on its time, if it did)


class Hanging:
    """A raw resolver that blocks until :meth:`release`; records the threads it ran on and signals each start."""

    def __init__(self, answer: Sequence[str] = ("10.0.0.9",)) -> None:
        self.answer = list(answer)
        self.released = threading.Event()
        self.started = threading.Event()
        self.threads: list[threading.Thread] = []

    def __call__(self, host: str) -> list[str]:
        self.threads.append(threading.current_thread())
        self.started.set()
        self.released.wait()
        return self.answer

    def release(self) -> None:
        self.released.set()
        for thread in self.threads:
            thread.join(timeout=LONG)
        assert not any(t.is_alive() for t in self.threads)


@pytest.fixture
def hanging() -> Iterator[Hanging]:
    raw = Hanging()
    assert resolve.abandoned() == 0, "an earlier test left a lookup running"
    try:
        yield raw
    finally:
        raw.release()
        deadline.reset_stop()
    assert resolve.abandoned() == 0


def not_called(host: str) -> list[str]:
    raise AssertionError(f"the raw resolver was called for {host!r}")


def test_an_answer_within_the_limit_is_returned() -> None:
    bounded = BoundedResolver(lambda host: ["10.0.0.1", "10.0.0.2"], limit_s=LONG)
    assert list(bounded("prom.example")) == ["10.0.0.1", "10.0.0.2"]
    assert resolve.abandoned() == 0


def test_a_hanging_lookup_is_cut_by_the_request_limit(hanging: Hanging) -> None:
    with pytest.raises(ResolveCut) as info:
        BoundedResolver(hanging, limit_s=TINY, cycle_deadline=time.monotonic() + LONG, cycle_s=LONG)("prom.example")
    assert info.value.why == deadline.REQUEST and info.value.reason == C.PROMETHEUS_UNAVAILABLE
    assert "spec.prometheus.timeoutSeconds (0.05 s)" in str(info.value) and "no request sent" in str(info.value)
    assert resolve.abandoned() == 1  # still running: it is counted until it returns


def test_a_hanging_lookup_is_cut_by_an_earlier_cycle_deadline(hanging: Hanging) -> None:
    with pytest.raises(ResolveCut) as info:
        BoundedResolver(hanging, limit_s=LONG, cycle_deadline=time.monotonic() + TINY, cycle_s=120)("prom.example")
    assert info.value.why == deadline.CYCLE and info.value.reason == C.CYCLE_DEADLINE_EXCEEDED
    assert "cycle deadline (120 s, --cycle-deadline)" in str(info.value)


def test_a_passed_cycle_deadline_asks_nothing() -> None:
    with pytest.raises(ResolveCut) as info:
        BoundedResolver(not_called, limit_s=LONG, cycle_deadline=time.monotonic() - 1.0)("prom.example")
    assert info.value.why == deadline.CYCLE


def test_stop_all_cuts_a_lookup_in_flight(hanging: Hanging) -> None:
    stopper = threading.Thread(target=lambda: (hanging.started.wait(LONG), deadline.stop_all()))
    stopper.start()
    try:
        with pytest.raises(ResolveCut) as info:
            BoundedResolver(hanging, limit_s=LONG)("prom.example")
    finally:
        stopper.join(timeout=LONG)
    assert hanging.started.is_set()  # cut while the lookup ran, not refused before it
    assert info.value.why == deadline.STOPPING and info.value.reason == C.OPERATOR_STOPPING
    assert "the operator is stopping" in str(info.value)
    with pytest.raises(ResolveCut) as later:  # and every later one at once, until the operator starts again
        BoundedResolver(not_called, limit_s=LONG)("prom.example")
    assert later.value.why == deadline.STOPPING


def _stick(raw: Hanging, key: str, count: int) -> None:
    for _ in range(count):
        with pytest.raises(ResolveCut) as info:
            BoundedResolver(raw, limit_s=TINY, key=key)("prom.example")
        assert info.value.why == deadline.REQUEST


def test_stuck_lookups_of_one_namespace_refuse_its_next_but_not_anothers(hanging: Hanging) -> None:
    _stick(hanging, "tenant-a", resolve.MAX_ABANDONED_PER_KEY)
    assert resolve.abandoned("tenant-a") == resolve.MAX_ABANDONED_PER_KEY
    with pytest.raises(ResolveCut) as info:  # at once: no thread, no call of the raw resolver
        BoundedResolver(not_called, limit_s=LONG, key="tenant-a")("prom.example")
    assert info.value.why == resolve.STUCK and info.value.reason == C.PROMETHEUS_UNAVAILABLE
    assert "name resolution is stuck" in str(info.value) and "no request sent" in str(info.value)
    assert list(BoundedResolver(lambda host: ["10.0.0.1"], limit_s=LONG, key="tenant-b")("prom.b")) == ["10.0.0.1"]
    hanging.release()
    assert resolve.abandoned() == 0
    assert list(BoundedResolver(lambda host: ["10.0.0.1"], limit_s=LONG, key="tenant-a")("prom.a")) == ["10.0.0.1"]


def test_stuck_lookups_in_all_refuse_every_next_one_until_released(hanging: Hanging) -> None:
    keys = [f"tenant-{i}" for i in range(resolve.MAX_ABANDONED // resolve.MAX_ABANDONED_PER_KEY)]
    for key in keys:
        _stick(hanging, key, resolve.MAX_ABANDONED_PER_KEY)
    assert resolve.abandoned() == resolve.MAX_ABANDONED
    threads = len(hanging.threads)
    with pytest.raises(ResolveCut) as info:
        BoundedResolver(not_called, limit_s=LONG, key="tenant-new")("prom.example")
    assert info.value.why == resolve.STUCK and f"{resolve.MAX_ABANDONED} earlier lookups" in str(info.value)
    assert len(hanging.threads) == threads == resolve.MAX_ABANDONED  # no thread started for the refused one
    hanging.release()
    assert resolve.abandoned() == 0
    assert list(BoundedResolver(lambda host: ["10.0.0.1"], limit_s=LONG, key="tenant-new")("prom.x")) == ["10.0.0.1"]


def test_an_oserror_still_means_the_name_does_not_resolve() -> None:
    def nowhere(host: str) -> list[str]:
        raise OSError("[Errno -2] Name or service not known: secret-internal-detail")

    bounded = BoundedResolver(nowhere, limit_s=LONG)
    with pytest.raises(OSError):
        bounded("prom.example")
    vetted = vet_url("http://prom.example:9090/", UrlPolicy(), resolve=bounded)
    assert vetted.refused is None and vetted.unresolved and vetted.addresses == ()
    assert resolve.abandoned() == 0


def test_vet_url_lets_a_cut_through(hanging: Hanging) -> None:
    """vet_url keeps its pure shape: a cut is not 'does not resolve' (that would read as an answer), it propagates."""
    with pytest.raises(ResolveCut):
        vet_url("http://prom.example:9090/", UrlPolicy(), resolve=BoundedResolver(hanging, limit_s=TINY))
