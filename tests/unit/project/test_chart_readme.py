"""The chart's README is generated from Chart.yaml and the values comments (scripts/chart_readme.py): it is current,
and every leaf value appears in its table with its default."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import yaml

REPO = Path(__file__).resolve().parents[3]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chart_readme", REPO / "scripts" / "chart_readme.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_is_current() -> None:
    script = _script()
    assert script.OUT.read_text() == script.render(), "run `make chart-readme`"


def test_every_value_is_in_the_table() -> None:
    script = _script()
    text = script.OUT.read_text()
    values = yaml.safe_load((script.CHART / "values.yaml").read_text())
    for key, default in script._leaves(values):
        assert f"| `{key}` | " in text, key
        assert f"`{json.dumps(default).replace('|', chr(92) + '|')}`" in text, key
    assert "| `resources.limits.memory` | string | `\"1Gi\"` |" in text
