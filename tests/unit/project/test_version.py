"""One version: ``kvcore.__version__``. Every other place that states it must agree: the installed distribution's
metadata (pyproject reads the attribute), the chart's ``version`` and ``appVersion``, the Dockerfile's default
``KVPLAN_VERSION``, and the labels ``make release`` puts on the image (checked on the config it builds).
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import yaml

import kvcore
from kvplan_dev import image

REPO = Path(__file__).resolve().parents[3]


def test_version_is_a_plain_semver() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", kvcore.__version__), kvcore.__version__


def test_pyproject_reads_the_version_from_kvcore() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"], "pyproject.toml must not state the version itself"
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "kvcore.__version__"}
    assert importlib.metadata.version("kvplan") == kvcore.__version__


def test_chart_version_and_app_version() -> None:
    chart = yaml.safe_load((REPO / "charts" / "kvplan-operator" / "Chart.yaml").read_text())
    assert chart["appVersion"] == kvcore.__version__
    assert chart["version"] == kvcore.__version__


def test_dockerfile_default_version() -> None:
    assert f"ARG KVPLAN_VERSION={kvcore.__version__}\n" in (REPO / "Dockerfile").read_text()


def test_release_image_labels_derive_from_it() -> None:
    labels = image.oci_labels(revision="0" * 40)
    assert labels["org.opencontainers.image.version"] == kvcore.__version__
    assert labels["org.opencontainers.image.revision"] == "0" * 40
