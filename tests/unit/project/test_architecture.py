"""docs/img/architecture.png is drawn from docs/architecture.txt (``make architecture``): the PNG's
``Source-SHA256`` text chunk is the hash of the source it was drawn from, and every layer the source names is a
package or module that exists (so the picture cannot drift from the tree without a test failing)."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SRC = REPO / "docs" / "architecture.txt"
PNG = REPO / "docs" / "img" / "architecture.png"


def _diagram_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("architecture_diagram", REPO / "scripts" / "architecture_diagram.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_png_is_drawn_from_the_current_source() -> None:
    from PIL import Image

    with Image.open(PNG) as img:
        stamped = img.text.get("Source-SHA256")
    assert stamped == hashlib.sha256(SRC.read_bytes()).hexdigest(), "run `make architecture` and commit the PNG"


def test_every_layer_names_a_real_module() -> None:
    cols, edges = _diagram_module().parse(SRC.read_text(encoding="utf-8"))
    folders = {"kvcore": REPO / "kvcore", "operator": REPO / "operator"}
    assert sorted(c.name for c in cols) == sorted(folders)
    missing = [f"{c.name}.{n}" for c in cols for names, _ in c.layers for n in names
               if not ((folders[c.name] / f"{n}.py").exists() or (folders[c.name] / n / "__init__.py").exists())]
    assert missing == []
    names = {f"{c.name}.{n}" for c in cols for names, _ in c.layers for n in names}
    assert all(a in names and b in names for a, b, _ in edges)
    assert len(edges) >= 3


def test_the_picture_lists_the_layers_the_contracts_enforce() -> None:
    """The layer contracts in pyproject.toml and the picture name the same layers in the same order."""
    import tomllib

    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layered = {c["layers"][0].split(".")[0]: c["layers"] for c in contracts if c["type"] == "layers"}
    cols, _ = _diagram_module().parse(SRC.read_text(encoding="utf-8"))
    for col in cols:
        root = "kvcore" if col.name == "kvcore" else "kvplan_operator"
        drawn = [sorted(names) for names, _ in col.layers]
        enforced = [sorted(p.strip().split(".", 1)[1] for p in row.split("|")) for row in layered[root]]
        if root == "kvplan_operator":  # the contract keeps main and handlers in two rows; the picture in one
            enforced = [sorted(enforced[0] + enforced[1])] + enforced[2:]
        assert drawn == enforced, col.name
