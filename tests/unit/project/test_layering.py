"""Layering and typing of kvcore: it never imports the operator stack (import-linter contract plus a plain
source grep, so a lazy import inside a function is caught too), and ``mypy --strict`` passes over kvcore and over
the operator (configured strict in pyproject.toml)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
VENV_BIN = REPO / ".venv" / "bin"
FORBIDDEN = ("kopf", "kubernetes", "prometheus_api_client", "kvplan_operator")
IMPORT_RE = re.compile(r"^\s*(?:from|import)\s+(" + "|".join(FORBIDDEN) + r")\b", re.MULTILINE)


def _tool(name: str) -> str:
    path = VENV_BIN / name
    if not path.exists():
        pytest.fail(f"{path} missing: run `make venv` (the test extra installs it)")
    return str(path)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONSAFEPATH": "1"}


def test_import_linter_contracts_hold() -> None:
    proc = subprocess.run(
        [_tool("lint-imports")], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("module", FORBIDDEN)
def test_kvcore_source_never_imports(module: str) -> None:
    offenders = [
        f"{p.relative_to(REPO)}: {m.group(0).strip()}"
        for p in sorted((REPO / "kvcore").rglob("*.py"))
        for m in IMPORT_RE.finditer(p.read_text(encoding="utf-8"))
        if m.group(1) == module
    ]
    assert offenders == []


@pytest.mark.slow
@pytest.mark.parametrize("target", [pytest.param("kvcore", id="kvcore"), pytest.param("operator", id="operator")])
def test_mypy_strict(target: str) -> None:
    proc = subprocess.run(
        [_tool("mypy"), target], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


FACADE_USERS = ("operator", "kvplan_vllm")
"""Packages that reach kvcore only through its facade (``kvcore/__init__.py``)."""
KVCORE_IMPORT_RE = re.compile(r"^\s*(?:from\s+(kvcore(?:\.\w+)*)\s+import|import\s+(kvcore(?:\.\w+)*))", re.MULTILINE)


@pytest.mark.parametrize("package", FACADE_USERS)
def test_kvcore_reached_only_through_the_facade(package: str) -> None:
    offenders = [
        f"{p.relative_to(REPO)}: {m.group(0).strip()}"
        for p in sorted((REPO / package).rglob("*.py"))
        for m in KVCORE_IMPORT_RE.finditer(p.read_text(encoding="utf-8"))
        if (m.group(1) or m.group(2)) != "kvcore"
    ]
    assert offenders == []


def test_facade_names_resolve_and_load_lazily() -> None:
    """Every exported name resolves to the object of the module it names; a fresh interpreter that imports
    ``kvcore`` and reads the plugin's names has imported no kvcore submodule it did not ask for, and no scipy."""
    import importlib

    import kvcore

    assert sorted(kvcore.__all__) == sorted(kvcore._EXPORTS)
    for name, (module, attr) in kvcore._EXPORTS.items():
        mod = importlib.import_module(module)
        expected = getattr(mod, attr) if hasattr(mod, attr) else importlib.import_module(f"{module}.{attr}")
        assert getattr(kvcore, name) is expected, name
    code = ("import sys, kvcore; bare = sorted(m for m in sys.modules if m.startswith('kvcore')); "
            "kvcore.Reservations, kvcore.parse_reservations, kvcore.series; "
            "print(bare, 'scipy' in sys.modules, 'highspy' in sys.modules)")
    proc = subprocess.run([str(VENV_BIN / "python"), "-c", code], cwd=REPO, env=_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["['kvcore']", "False", "False"]


def test_facade_type_checking_imports_match_the_table() -> None:
    """The ``if TYPE_CHECKING:`` imports (what mypy and editors see) bind exactly the table's names, each from
    the module and attribute the table reads at run time."""
    import ast

    import kvcore

    tree = ast.parse((REPO / "kvcore" / "__init__.py").read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    seen = {(alias.asname or alias.name): (str(node.module), alias.name)
            for node in block.body if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert seen == kvcore._EXPORTS


def _import_graph(roots: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (AST; imports under ``if TYPE_CHECKING:`` and inside functions
    count too), for folders ``roots`` (folder -> import name)."""
    import ast

    files: dict[str, Path] = {}
    for folder, name in roots.items():
        for p in (REPO / folder).rglob("*.py"):
            rel = p.relative_to(REPO / folder).with_suffix("").parts
            parts = [name, *rel[:-1]] + ([] if rel[-1] == "__init__" else [rel[-1]])
            files[".".join(parts)] = p
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in files:
                    t = t.rsplit(".", 1)[0] if "." in t else ""
                # a module's own package (or an ancestor) is imported before it anyway: not an edge
                if t and t != mod and not mod.startswith(t + "."):
                    graph[mod].add(t)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_circle_finder_finds_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.slow
def test_no_import_circles() -> None:
    graph = _import_graph({"kvcore": "kvcore", "operator": "kvplan_operator", "kvplan_vllm": "kvplan_vllm"})
    assert len(graph) > 100  # the walk found the packages
    assert _circles(graph) == []


def test_kvcore_top_level_stays_small() -> None:
    """The few modules everything uses stay at the top; the rest live in packages by concept."""
    top = sorted(p.name for p in (REPO / "kvcore").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 8, top


TEST_IMPORT_RE = re.compile(r"^\s*(?:from|import)\s+(test_\w+)", re.MULTILINE)


def test_no_test_module_imports_another() -> None:
    """Shared test worlds live in helper modules (``*_world.py``, ``op_fakes.py``, ``operator_world.py``, ...), so a
    test module can be run, moved or deleted alone."""
    offenders = [f"{p.relative_to(REPO)}: {m.group(1)}" for p in sorted((REPO / "tests").rglob("*.py"))
                 for m in TEST_IMPORT_RE.finditer(p.read_text(encoding="utf-8"))]
    assert offenders == []
