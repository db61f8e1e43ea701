"""The real Kubernetes wrapper under the cycle deadline (:func:`kvplan_operator.deadline.calls_until`): a call
is not sent once the block's end passed, each call's client timeout is cut to the time left, and a timeout that the
cut caused is reported as ``CycleDeadlineExceeded``, not as a slow apiserver. The kubernetes client is real; its
transport is replaced by a recorder (no socket), and the blocks' clock is scripted, so nothing here depends on
time passing."""

from __future__ import annotations

from typing import Any

import pytest

from kvplan_operator import deadline
from kvplan_operator.kube import CYCLE_DEADLINE, REQUEST_TIMEOUT_S, Kube, KubeError


class Transport:
    """Stands in for the client's REST transport: records each request's ``_request_timeout``, answers 200 with an
    empty Deployment, or raises ``raise_`` instead."""

    def __init__(self, raise_: Exception | None = None) -> None:
        self.timeouts: list[Any] = []
        self.raise_ = raise_

    def request(self, method: str, url: str, *a: Any, **kw: Any) -> Any:
        self.timeouts.append(kw.get("_request_timeout"))
        if self.raise_ is not None:
            raise self.raise_

        class Response:
            status, reason, data = 200, "OK", b'{"kind": "Deployment", "metadata": {"name": "vllm-a"}}'

            def getheaders(self) -> dict[str, str]:
                return {"content-type": "application/json"}

            def getheader(self, name: str, default: Any = None) -> Any:
                return self.getheaders().get(name.lower(), default)

            @property
            def response(self) -> Any:  # the urllib3 response the client hands back with _preload_content=False
                return self

        return Response()


def kube_with(transport: Transport) -> Kube:
    from kubernetes import client

    api = client.ApiClient(client.Configuration(host="https://apiserver.invalid"))
    api.rest_client = transport  # type: ignore[assignment]
    return Kube(api)


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The scripted clock of the blocks' ends (deadline.calls_clock)."""
    now = [1000.0]
    monkeypatch.setattr(deadline, "calls_clock", lambda: now[0])
    return now


@pytest.mark.slow
def test_outside_a_block_each_call_has_the_client_timeout():
    transport = Transport()
    assert kube_with(transport).get_deployment("ns", "vllm-a") is not None
    assert transport.timeouts == [REQUEST_TIMEOUT_S]


def test_inside_a_block_the_timeout_is_the_time_left(clock: list[float]):
    transport = Transport()
    kube = kube_with(transport)
    with deadline.calls_until(clock[0] + 5.0):
        kube.get_deployment("ns", "vllm-a")
        with deadline.calls_until(clock[0] + 3600.0):  # the record phase's wider block
            kube.get_deployment("ns", "vllm-a")
        clock[0] += 2.0
        kube.get_deployment("ns", "vllm-a")  # the outer block again, 2 s on
    assert transport.timeouts == [5.0, REQUEST_TIMEOUT_S, 3.0]


def test_past_the_end_nothing_is_sent(clock: list[float]):
    transport = Transport()
    kube = kube_with(transport)
    with deadline.calls_until(clock[0] - 1.0):
        with pytest.raises(KubeError) as err:
            kube.get_deployment("ns", "vllm-a")
    assert err.value.kind == CYCLE_DEADLINE
    assert "vllm-a" in str(err.value) and "not sent" in str(err.value)
    assert transport.timeouts == []
    assert deadline.calls_left() is None  # the block is gone with its end


def test_a_timeout_the_cut_caused_names_the_cycle_deadline(clock: list[float]):
    import urllib3

    kube = kube_with(Transport(raise_=urllib3.exceptions.ReadTimeoutError(None, "/", "Read timed out.")))
    with deadline.calls_until(clock[0] + 2.0):
        with pytest.raises(KubeError) as cut:
            kube.get_deployment("ns", "vllm-a")
    assert cut.value.kind == CYCLE_DEADLINE
    with pytest.raises(KubeError) as slow:  # the same timeout with the client's own limit: a slow apiserver
        kube.get_deployment("ns", "vllm-a")
    assert slow.value.kind == "Timeout"
