"""A slow Prometheus cannot hold a request beyond its deadline (issue 26, item 3): the real client against a server on
127.0.0.1 that paces every byte below the per-read timeout, in each place a response can be slow (status line,
headers, a body with a length, chunked, until close, series by series, an error body). The request must end with
its named reason well inside the server's 60 s; the margins (a 1 s limit against 60 s of trickle, a 20 s bound on
the wait) are such that machine load cannot flip the result. The same for the reconcile's cycle deadline
(``CycleDeadlineExceeded``) and the operator's stop (``OperatorStopping``)."""

from __future__ import annotations

import threading
import time

import pytest

from kvplan_operator import conditions as C
from kvplan_operator import deadline
from kvplan_operator.prom import PromClient, PromError
from slow_server import BEHAVIOURS, slow_prometheus  # type: ignore[import-not-found]

#: The server trickles for this long; a request still running after WAIT_BOUND_S was not bounded.
TRICKLE_S = 60.0
WAIT_BOUND_S = 20.0


def _timed(call):
    t0 = time.monotonic()
    with pytest.raises(PromError) as info:
        call()
    return info.value, time.monotonic() - t0


@pytest.mark.parametrize("behaviour", sorted(BEHAVIOURS), ids=sorted(BEHAVIOURS))
@pytest.mark.parametrize("kind", ["instant", "range"])
@pytest.mark.slow
def test_the_request_timeout_bounds_the_whole_request(behaviour, kind):
    with slow_prometheus(behaviour, pause=0.2, duration=TRICKLE_S) as server:
        client = PromClient(server.url, timeout_s=1)
        call = (lambda: client.query("up", at=1.0)) if kind == "instant" else \
            (lambda: client.query_range("up", start=0, end=600, step=60))
        err, waited = _timed(call)
    assert waited < WAIT_BOUND_S, f"{behaviour}: the request ran {waited:.1f} s against timeoutSeconds 1"
    assert err.reason == C.PROMETHEUS_UNAVAILABLE, (err.reason, str(err))
    assert "timed out after 1 s" in str(err) and "127.0.0.1" in str(err)


@pytest.mark.parametrize("behaviour", ["status-line", "body-content-length", "series-by-series"])
@pytest.mark.slow
def test_the_cycle_deadline_cuts_a_request_with_a_longer_timeout(behaviour):
    with slow_prometheus(behaviour, pause=0.2, duration=TRICKLE_S) as server:
        client = PromClient(server.url, timeout_s=60)
        client.cycle_deadline, client.cycle_s = time.monotonic() + 1.0, 1.0
        err, waited = _timed(lambda: client.query("up"))
    assert waited < WAIT_BOUND_S
    assert err.reason == C.CYCLE_DEADLINE_EXCEEDED and "cycle deadline (1 s, --cycle-deadline)" in str(err)


def test_a_cycle_deadline_already_past_sends_nothing_slow():
    with slow_prometheus("status-line", duration=TRICKLE_S) as server:
        client = PromClient(server.url, timeout_s=60)
        client.cycle_deadline = time.monotonic() - 1
        err, waited = _timed(lambda: client.query("up"))
    assert err.reason == C.CYCLE_DEADLINE_EXCEEDED and waited < WAIT_BOUND_S


@pytest.mark.parametrize("behaviour", ["status-line", "body-chunked"])
def test_stop_all_cuts_requests_in_flight_and_later_ones(behaviour):
    errors: list[PromError] = []
    with slow_prometheus(behaviour, duration=TRICKLE_S) as server:
        client = PromClient(server.url, timeout_s=60)

        def run() -> None:
            try:
                client.query("up")
            except PromError as exc:
                errors.append(exc)

        worker = threading.Thread(target=run)
        worker.start()
        assert server.seen.wait(WAIT_BOUND_S), "the request never reached the server"
        try:
            t0 = time.monotonic()
            assert deadline.stop_all() == 1
            worker.join(WAIT_BOUND_S)
            assert not worker.is_alive() and time.monotonic() - t0 < WAIT_BOUND_S
            later, _ = _timed(lambda: client.query("up"))
        finally:
            deadline.reset_stop()
    assert [e.reason for e in errors] == [C.OPERATOR_STOPPING] and later.reason == C.OPERATOR_STOPPING
    assert server.requests == 1, "a request started after the stop was sent"
