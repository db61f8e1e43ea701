"""Fixtures shared by the integration tests (the control-plane ones come from tests/conftest.py)."""

from __future__ import annotations

from typing import Any

import pytest

from kvplan_operator.kube import Kube
from operator_world import REPO, apply_crds  # type: ignore[import-not-found]


@pytest.fixture(scope="module")
def crd(cluster: Any) -> bool:
    """The KVPlan CRD, applied and Established."""
    apply_crds(cluster, REPO / "crds" / "kvplans.kvplan.io.yaml")
    return True


@pytest.fixture
def kube(kube_api: Any) -> Kube:
    """The operator's own Kubernetes wrapper over the test cluster's admin client."""
    return Kube(kube_api)
