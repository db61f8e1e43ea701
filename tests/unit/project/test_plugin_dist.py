"""The kvplan-vllm wheel (``kvplan_vllm/pyproject.toml``, built by :mod:`kvplan_dev.plugin_wheel`): it carries all
of ``kvplan_vllm`` and exactly the kvcore modules the plugins import, directly or through each other (found here by
walking the imports of the source, not read from the project file); those modules import nothing outside the
standard library, vLLM and prometheus-client; every dependency it declares is in vLLM 0.33's locked environment;
the stat logger's entry point is in its metadata; two builds from the same commit are byte-identical; importing
the gate imports neither numpy nor the simulator; and the release's wheel layer gives the wheel back byte for byte.
The install into the real vLLM environment is ``tests/vllm/test_plugin_dist_install.py``.
"""

from __future__ import annotations

import ast
import email.parser
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import kvcore
from kvplan_dev.plugin_wheel import build_plugin_wheel
from kvplan_dev.release_plugin import WHEEL_DIR, sha256, wheel_in_export, wheel_layer

REPO = Path(__file__).resolve().parents[3]
VLLM_LOCK = REPO / "requirements" / "vllm-0.33.0.lock"
ALLOWED_THIRD_PARTY = {"vllm", "prometheus_client"}
"""What a vLLM image has and the plugins may import besides the standard library and their own packages."""
EPOCH = 1_700_000_000


def _module_file(module: str) -> Path:
    base = REPO / Path(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _facade(name: str) -> str:
    """The module ``from kvcore import name`` loads: the attribute's module, or the submodule it names."""
    module, attr = kvcore._EXPORTS[name]
    return f"{module}.{attr}" if _module_file(f"{module}.{attr}").exists() else module


def _statements(tree: ast.Module) -> list[ast.stmt]:
    """Every statement that runs, at any depth, leaving out ``if TYPE_CHECKING:`` bodies."""
    out: list[ast.stmt] = []
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            todo += node.orelse
            continue
        out.append(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                todo.append(child)
            else:  # except handlers, match cases: their bodies
                todo += [grand for grand in ast.iter_child_nodes(child) if isinstance(grand, ast.stmt)]
    return out


def _imports(module: str) -> set[str]:
    """Absolute module names ``module`` imports (``from kvcore import X`` resolved through kvcore's facade)."""
    found: set[str] = set()
    for node in _statements(ast.parse(_module_file(module).read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "kvcore":
                found |= {_facade(alias.name) for alias in node.names}
                continue
            found.add(node.module)
            if node.module.split(".")[0] in {"kvcore", "kvplan_vllm"}:
                found |= {f"{node.module}.{a.name}" for a in node.names
                          if _module_file(f"{node.module}.{a.name}").exists()}
    return found


def _closure() -> tuple[set[str], set[str]]:
    """(the kvplan_vllm and kvcore modules the plugins load, the top-level names of everything else imported)."""
    todo = [f"kvplan_vllm.{p.stem}" if p.stem != "__init__" else "kvplan_vllm"
            for p in (REPO / "kvplan_vllm").glob("*.py")]
    seen: set[str] = set()
    external: set[str] = set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # parents' __init__ run first
        for name in _imports(module):
            if name.split(".")[0] in {"kvcore", "kvplan_vllm"}:
                todo.append(name)
            else:
                external.add(name.split(".")[0])
    return seen, external


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_plugin_wheel(REPO, tmp_path_factory.mktemp("plugin-wheel"), EPOCH)


def _metadata(path: Path, name: str) -> str:
    with zipfile.ZipFile(path) as zf:
        (member,) = [n for n in zf.namelist() if n.endswith(f".dist-info/{name}")]
        return zf.read(member).decode()


@pytest.mark.slow
def test_wheel_carries_exactly_the_import_closure(wheel: Path) -> None:
    modules, _ = _closure()
    expected = {str(_module_file(m).relative_to(REPO)) for m in modules}
    with zipfile.ZipFile(wheel) as zf:
        carried = {n for n in zf.namelist() if not n.split("/", 1)[0].endswith(".dist-info")}
    assert carried == expected
    assert {p.name for p in (REPO / "kvplan_vllm").glob("*.py")} <= {Path(n).name for n in carried
                                                                     if n.startswith("kvplan_vllm/")}


def test_closure_imports_only_what_a_vllm_image_has() -> None:
    _, external = _closure()
    outside = external - set(sys.stdlib_module_names) - ALLOWED_THIRD_PARTY
    assert not outside, f"the plugins would need {sorted(outside)} in the serving image"


def _lock_names() -> set[str]:
    pins = re.finditer(r"^([A-Za-z0-9_.-]+)==", VLLM_LOCK.read_text(), re.M)
    return {m.group(1).lower().replace("_", "-") for m in pins}


def test_declared_dependencies_are_in_vllm_environment(wheel: Path) -> None:
    meta = email.parser.Parser().parsestr(_metadata(wheel, "METADATA"))
    assert meta["Name"] == "kvplan-vllm" and meta["Version"] == kvcore.__version__
    requires = meta.get_all("Requires-Dist") or []
    names = {re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requires}
    assert names, "the wheel declares what it runs against"
    assert names <= _lock_names(), f"not in vLLM 0.33's environment: {sorted(names - _lock_names())}"
    locked = {name.lower().replace("_", "-"): version
              for name, version in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", VLLM_LOCK.read_text(), re.M)}
    for text in requires:  # every declared range admits the version vLLM's environment has
        req = Requirement(text)
        version = locked[req.name.lower().replace("_", "-")]
        assert req.specifier.contains(version, prereleases=True), (text, version)


def test_entry_points_in_metadata(wheel: Path) -> None:
    text = _metadata(wheel, "entry_points.txt")
    groups = dict(re.findall(r"^\[([^\]]+)\]\n((?:[^\[\n].*\n?)*)", text, re.M))
    assert "vllm.stat_logger_plugins" in groups
    target = groups["vllm.stat_logger_plugins"].split("=", 1)[1].strip()
    module, cls = target.split(":")
    tree = ast.parse(_module_file(module).read_text())
    assert cls in {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    # the kvplan distribution (the checkout's editable install) registers the same plugin under the same name
    kvplan = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]
    name, value = (part.strip() for part in groups["vllm.stat_logger_plugins"].split("=", 1))
    assert kvplan["vllm.stat_logger_plugins"] == {name: value}


@pytest.mark.slow
def test_two_builds_are_identical(wheel: Path, tmp_path: Path) -> None:
    again = build_plugin_wheel(REPO, tmp_path, EPOCH)
    assert again.read_bytes() == wheel.read_bytes()


def test_gate_imports_neither_numpy_nor_the_simulator() -> None:
    code = ("import sys, kvcore; from kvcore import gate, series, parse_reservations, read_regular_file; "
            "print(sorted(m for m in sys.modules if m == 'numpy' or m.startswith(('kvcore.sim.', 'pydantic'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True)
    assert done.stdout.strip() == "['kvcore.sim.gate']"


def test_release_layer_gives_the_wheel_back(wheel: Path, tmp_path: Path) -> None:
    layer = wheel_layer(wheel, tmp_path / "layer.tar.gz", EPOCH)
    assert wheel_layer(wheel, tmp_path / "again.tar.gz", EPOCH).read_bytes() == layer.read_bytes()
    with tarfile.open(layer) as tar:
        assert [m.name for m in tar if m.isreg()] == [f"{WHEEL_DIR}/{wheel.name}"]
    served = wheel_in_export(layer, wheel.name)
    assert served == wheel.read_bytes()
    assert wheel_in_export(layer, "other.whl") is None
