"""Render docs/architecture.txt (the layer stacks and the calls between them) to docs/img/architecture.png.

The PNG carries the SHA-256 of its source in a ``Source-SHA256`` text chunk, so a test can tell a stale picture
from a current one without comparing pixels. Usage: ``python scripts/architecture_diagram.py [SRC [PNG]]``.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "docs" / "architecture.txt"
PNG = REPO / "docs" / "img" / "architecture.png"


@dataclass
class Column:
    name: str
    title: str
    layers: list[tuple[list[str], list[str]]] = field(default_factory=list)
    """Per row: sibling names, and their captions (one per sibling, or one for the row)."""


def parse(text: str) -> tuple[list[Column], list[tuple[str, str, str]]]:
    """Columns and edges of the source (module docstring of architecture.txt); a malformed line raises
    ValueError naming its number."""
    cols: list[Column] = []
    edges: list[tuple[str, str, str]] = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        head, _, caption = rest.partition(":")
        if word == "column":
            cols.append(Column(head.strip(), caption.strip()))
        elif word == "layer" and cols:
            names = [n.strip() for n in head.split("|")]
            caps = [c.strip() for c in caption.split("|")] if caption.strip() else []
            cols[-1].layers.append((names, caps))
        elif word == "edge" and "->" in head:
            a, _, b = head.partition("->")
            edges.append((a.strip(), b.strip(), caption.strip()))
        else:
            raise ValueError(f"{SRC.name} line {no}: cannot read {raw!r}")
    return cols, edges


def render(src: Path, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    text = src.read_text(encoding="utf-8")
    cols, edges = parse(text)
    rows = max(len(c.layers) for c in cols)
    width, gap, row_h = 6.2, 2.6, 0.62
    fig, ax = plt.subplots(figsize=(2 * width + gap + 0.6, rows * row_h + 1.4), dpi=110)
    ax.set_xlim(-0.3, 2 * width + gap + 0.3)
    ax.set_ylim(-0.4, rows * row_h + 0.9)
    ax.axis("off")
    where: dict[str, tuple[float, float, float]] = {}  # "col.layer" -> (x0, x1, y centre)
    for ci, col in enumerate(cols):
        x0 = ci * (width + gap)
        ax.text(x0 + width / 2, rows * row_h + 0.45, col.title, ha="center", va="center", fontsize=10,
                fontweight="bold")
        for ri, (names, caps) in enumerate(col.layers):
            y = (rows - ri - 1) * row_h
            w = width / len(names)
            for k, name in enumerate(names):
                bx = x0 + k * w
                ax.add_patch(FancyBboxPatch((bx + 0.04, y + 0.05), w - 0.08, row_h - 0.1,
                                            boxstyle="round,pad=0.01,rounding_size=0.08", linewidth=0.8,
                                            edgecolor="#35506b", facecolor="#e8f0f8" if ci == 0 else "#f4ede4"))
                cap = caps[k] if len(caps) == len(names) else ""
                ax.text(bx + w / 2, y + row_h * 0.64, name, ha="center", va="center", fontsize=8.5,
                        fontweight="bold")
                if cap:
                    ax.text(bx + w / 2, y + row_h * 0.3, cap, ha="center", va="center", fontsize=6.3,
                            color="#333333")
                where[f"{col.name}.{name}"] = (bx, bx + w, y + row_h / 2)
            if len(caps) == 1 and len(names) > 1:  # one caption for the whole row
                ax.text(x0 + width / 2, y + row_h * 0.3, caps[0], ha="center", va="center", fontsize=6.3,
                        color="#333333")
    for a, b, label in edges:
        if a not in where or b not in where:
            raise ValueError(f"edge {a} -> {b}: no such layer")
        (ax0, _ax1, ay), (_bx0, bx1, by) = where[a], where[b]
        ax.annotate("", xy=(bx1 + 0.02, by), xytext=(ax0 - 0.02, ay),
                    arrowprops={"arrowstyle": "-|>", "color": "#7a3b2e", "lw": 1.0})
        ax.text((ax0 + bx1) / 2, (ay + by) / 2 + 0.1, label, ha="center", va="bottom", fontsize=6.3,
                color="#7a3b2e", wrap=True)
    ax.text(width / 2, -0.25, "top imports bottom; siblings in a row do not import each other", ha="center",
            fontsize=7, style="italic")
    png.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    fig.savefig(png, bbox_inches="tight", pad_inches=0.15, metadata={"Software": None, "Source-SHA256": digest})
    plt.close(fig)


if __name__ == "__main__":
    args = sys.argv[1:]
    render(Path(args[0]) if args else SRC, Path(args[1]) if len(args) > 1 else PNG)
