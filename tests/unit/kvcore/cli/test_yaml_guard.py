"""``kvcore.cli.yaml_guard``: what a YAML instance file may hold.

1. Ordinary anchors and aliases stay usable (a shared block, a merge key), and the example instance loads;
2. the expanded size is counted through aliases of aliases: a document just under :data:`MAX_NODES` loads, one
   just over is refused, naming the line of the alias that crosses the limit;
3. depth: :data:`MAX_DEPTH` levels load, one more is refused;
4. a refused file is never built: the billion-laughs file is refused by the event walk (checked by making the
   loader itself fail if called).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kvcore.cli import yaml_guard
from kvcore.cli.yaml_guard import MAX_DEPTH, MAX_NODES, check_shape, safe_yaml_load
from kvcore.errors import InputError

REPO = Path(__file__).resolve().parents[4]


def test_anchors_and_merge_keys_still_work(tmp_path: Path) -> None:
    path = tmp_path / "i.yaml"
    path.write_text("base: &b {lmax: 100, cp: 2}\nclasses:\n  - {<<: *b, name: a}\n  - {<<: *b, name: b}\n")
    data = safe_yaml_load(path)
    assert [c["lmax"] for c in data["classes"]] == [100, 100]
    assert safe_yaml_load(REPO / "examples" / "instance-70b.yaml")["classes"][0]["name"] == "chat"


def _fan(levels: int, width: int) -> str:
    lines = ["a0: &a0 1"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def test_expansion_is_counted_through_aliases() -> None:
    # a list of width w at each of L levels expands to about w**L nodes (plus the lists themselves)
    check_shape(_fan(3, 100), "ok.yaml")  # 1e6 + 1e4 + ... nodes: under 2e6
    assert 100**3 < MAX_NODES < 10 * 100**3
    with pytest.raises(InputError) as info:
        check_shape(_fan(4, 100), "big.yaml")  # 1e8 nodes
    assert info.value.field == "big.yaml line 5" and "more than" in info.value.message


def test_depth_limit() -> None:
    check_shape("x: " + "[" * (MAX_DEPTH - 1) + "1" + "]" * (MAX_DEPTH - 1) + "\n", "ok.yaml")
    with pytest.raises(InputError) as info:
        check_shape("x: " + "[" * MAX_DEPTH + "1" + "]" * MAX_DEPTH + "\n", "deep.yaml")
    assert info.value.field == "deep.yaml line 1" and f"deeper than {MAX_DEPTH}" in info.value.message


def test_refused_files_are_never_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "lol.yaml"
    path.write_text(_fan(9, 10) + "classes: *a9\n")

    def never(*_: object, **__: object) -> None:
        raise AssertionError("yaml.load ran on a refused file")

    monkeypatch.setattr(yaml, "load", never)
    with pytest.raises(InputError) as info:
        safe_yaml_load(path)
    assert info.value.field.startswith("lol.yaml line")
    assert yaml_guard.MAX_BYTES >= 5 * 1024**2  # a 256-class x 2,000-sample inline instance still fits
