"""The kvplan wheel, built from this checkout: it carries kvcore, kvplan_operator (and kvplan_vllm once that folder
exists) with their data files, never the development tooling kvplan_dev; its metadata states the one version,
Python 3.11-3.13 and the extra ``operator``; the plugins' own distribution is kvplan-vllm
(``tests/unit/project/test_plugin_dist.py``), so this one no longer offers a ``vllm`` extra pulling vLLM in.
"""

from __future__ import annotations

import email.parser
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import kvcore

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                           "-w", str(out), str(REPO)], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    (path,) = out.glob("kvplan-*.whl")
    return zipfile.ZipFile(path)


def _top_levels(wheel: zipfile.ZipFile) -> set[str]:
    return {name.split("/", 1)[0] for name in wheel.namelist() if not name.split("/", 1)[0].endswith(".dist-info")}


@pytest.mark.slow
def test_wheel_carries_the_product_not_the_dev_tooling(wheel: zipfile.ZipFile) -> None:
    tops = _top_levels(wheel)
    expected = {"kvcore", "kvplan_operator"} | ({"kvplan_vllm"} if (REPO / "kvplan_vllm").is_dir() else set())
    assert tops == expected
    names = wheel.namelist()
    assert "kvplan_operator/main.py" in names
    assert any(n.startswith("kvcore/data/traces/") and n.endswith(".csv") for n in names), "bundled traces"
    assert not any("kvplan_dev" in n or n.endswith((".go", "go.mod", "go.sum")) for n in names)


def test_wheel_metadata(wheel: zipfile.ZipFile) -> None:
    (meta_name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    meta = email.parser.Parser().parsestr(wheel.read(meta_name).decode())
    assert meta["Version"] == kvcore.__version__
    assert meta["Requires-Python"] == "<3.14,>=3.11"
    extras = set(meta.get_all("Provides-Extra") or [])
    assert "operator" in extras and "vllm" not in extras
    requires = meta.get_all("Requires-Dist") or []
    assert not [r for r in requires if r.startswith("vllm")], "a serving image installs kvplan-vllm, not kvplan"
    assert any(r.startswith("kopf") and 'extra == "operator"' in r for r in requires)
    (entry,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    scripts = wheel.read(entry).decode()
    assert "kvplan-operator = kvplan_operator.main:main" in scripts
    assert "kvplan-dev" not in scripts
