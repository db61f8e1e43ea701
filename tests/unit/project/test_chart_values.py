"""The chart's ``values.yaml``: every key has a comment, and the defaults are the restricted, least-privilege ones.

A key counts as commented when the lines right above it are comments at the same indentation, or the key's line
ends in an inline comment (the comment the chart README shows for it). The keys the line scanner finds are checked against the keys the YAML parser
finds, so a key the scanner misses is a failure too.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml

CHART = Path(__file__).resolve().parents[3] / "charts" / "kvplan-operator"


def _values() -> dict[str, Any]:
    loaded = yaml.safe_load((CHART / "values.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def _parsed_paths(node: Any, prefix: str = "") -> set[str]:
    paths: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}{key}"
            paths.add(path)
            paths |= _parsed_paths(value, path + ".")
    return paths


def _scanned_keys() -> dict[str, bool]:
    """Dotted key path -> whether it carries a comment, from the raw lines: the comments the chart README shows
    (``scripts/chart_readme.py``'s scanner, one scanner for both)."""
    spec = importlib.util.spec_from_file_location("chart_readme", CHART.parents[1] / "scripts" / "chart_readme.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {path: bool(text.strip()) for path, text in module.comments().items()}


def test_scanner_sees_every_key() -> None:
    assert set(_scanned_keys()) == _parsed_paths(_values())


def test_every_key_has_a_comment() -> None:
    missing = sorted(path for path, ok in _scanned_keys().items() if not ok)
    assert missing == [], f"values.yaml keys without a comment: {missing}"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        pytest.param("podSecurityContext.runAsNonRoot", True, id="pod-runAsNonRoot"),
        pytest.param("podSecurityContext.seccompProfile.type", "RuntimeDefault", id="pod-seccomp"),
        pytest.param("securityContext.allowPrivilegeEscalation", False, id="no-privilege-escalation"),
        pytest.param("securityContext.readOnlyRootFilesystem", True, id="read-only-root"),
        pytest.param("securityContext.runAsNonRoot", True, id="container-runAsNonRoot"),
        pytest.param("securityContext.capabilities.drop", ["ALL"], id="drop-all-capabilities"),
        pytest.param("securityContext.seccompProfile.type", "RuntimeDefault", id="container-seccomp"),
        pytest.param("replicaCount", 1, id="one-replica"),
        pytest.param("peering.enabled", True, id="peering-on"),
        pytest.param("httpRoute.enabled", False, id="httproutes-off"),
        pytest.param("prometheus.authSecrets", [], id="no-secret-access"),
        pytest.param("serviceMonitor.enabled", False, id="servicemonitor-off"),
    ],
)
def test_restricted_defaults(path: str, expected: Any) -> None:
    node: Any = _values()
    for part in path.split("."):
        node = node[part]
    assert node == expected


def test_image_user_matches_dockerfile() -> None:
    dockerfile = (CHART.parents[1] / "Dockerfile").read_text()
    uid = _values()["podSecurityContext"]["runAsUser"]
    assert f"USER {uid}:{uid}" in dockerfile
