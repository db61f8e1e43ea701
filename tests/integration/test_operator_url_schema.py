"""The KVPlan CRD's ``spec.prometheus.url`` pattern on the real apiserver (issue 26, item 1): every spelling that
two URL parsers read differently, or that names an address in a non-canonical form, is refused at admission (422,
naming the field); the ordinary forms are stored. The same spellings' refusal by the operator itself is in
tests/unit/test_op_prom_url.py (whose table this reuses)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from operator_world import create_kvplan, kvplan_spec, refused  # type: ignore[import-not-found]

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "operator"))
from op_prom_url_world import ACCEPTED, CRD_LETS_THROUGH, REFUSED  # type: ignore[import-not-found]  # noqa: E402

pytestmark = pytest.mark.integration

#: The refused spellings the apiserver can be given (a JSON string cannot carry a lone surrogate; every other
#: control character, NUL included, is valid JSON).
AT_ADMISSION = [(i, u) for i, u, _ in REFUSED if i not in CRD_LETS_THROUGH]


def test_the_apiserver_refuses_every_differential_spelling(crd, kube_api, namespace):
    stored = []
    for name, url in AT_ADMISSION:
        spec = kvplan_spec(url)
        error = refused(kube_api, namespace, spec)
        assert error.status == 422 and "spec.prometheus.url" in error.body, (name, error.body[:300])
        stored.append(name)
    assert len(stored) == len(AT_ADMISSION) > 40


def test_the_apiserver_stores_the_ordinary_forms(crd, kube_api, namespace):
    for i, (name, url, _) in enumerate(ACCEPTED):
        body = create_kvplan(kube_api, namespace, kvplan_spec(url), name=f"ok-{i}")
        assert body["spec"]["prometheus"]["url"] == url, name
