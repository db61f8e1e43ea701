"""The shared world of ``test_op_prom_auth.py`` and the tests that reuse it: prometheus as teams run it (operator/prom.py's PromConnection, observe.connection): basic auth and custom."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
import pytest
from kvplan_operator import conditions as C
from kvplan_operator import prom as P
from kvplan_operator.observe import CredentialRefused, connection
from kvplan_operator.prom import PromClient, PromConnection, PromError, UrlPolicy
from kvplan_operator.reconcile import Deps, reconcile
from kvplan_operator.spec import InvalidSpec, parse_spec
from op_fakes import FakeKube, Script, dep, kvplan, scripted_prometheus  # type: ignore[import-not-found]
from op_targets_world import SPEC  # type: ignore[import-not-found]


EMPTY = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()


@pytest.fixture
def server() -> Iterator[tuple[Script, str]]:
    with scripted_prometheus() as (script, url):
        script.answers["/api/v1/query"] = (200, {}, EMPTY)
        yield script, url


def _spec(prometheus: dict) -> dict:
    raw = copy.deepcopy(SPEC)
    raw["prometheus"] = {"url": "https://prom.monitoring.svc:9090"} | prometheus
    return raw
