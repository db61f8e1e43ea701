"""The kvplan-vllm wheel in the real, hash-pinned vLLM 0.33.0 environment (``vllm_python``), through a throwaway
environment that sees it (:func:`kvplan_dev.plugin_wheel.throwaway_env`; the cached environment is never written):
pip's dry-run report installs the wheel and nothing else, with no index to fetch from; after the real install the
distributions differ by exactly kvplan-vllm; vLLM's plugin loader sees its stat-logger entry point; and the
scheduler and stat logger import there, with every kvcore module they load coming from the wheel.
"""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest

import kvcore
from kvplan_dev.plugin_wheel import build_plugin_wheel, dry_run_report, freeze, install, throwaway_env
from kvplan_dev.vllm_overlay import vllm_env

pytestmark = pytest.mark.vllm
REPO = Path(__file__).resolve().parents[2]

_PROBE = """
import importlib.metadata as m, json, sys
import kvplan_vllm.scheduler, kvplan_vllm.stats
from kvcore import gate, series
eps = [(e.name, e.value, e.dist.metadata['Name']) for e in m.entry_points(group='vllm.stat_logger_plugins')]
kv = {n: getattr(mod, '__file__', None) for n, mod in sys.modules.items() if n == 'kvcore' or n.startswith('kvcore.')}
print(json.dumps({'entry_points': eps, 'kvcore': kv}))
"""


def test_wheel_adds_nothing_but_itself(vllm_python: Path, tmp_path: Path) -> None:
    wheel = build_plugin_wheel(REPO, tmp_path / "wheel")
    python = throwaway_env(Path(vllm_python), tmp_path / "env")
    before = freeze(python)
    assert before.get("vllm") == "0.33.0" and "kvplan-vllm" not in before

    assert dry_run_report(python, wheel, tmp_path / "report.json") == [("kvplan-vllm", kvcore.__version__)]

    install(python, wheel)
    after = freeze(python)
    assert {k: v for k, v in after.items() if before.get(k) != v} == {"kvplan-vllm": kvcore.__version__}
    assert set(before) <= set(after)

    done = subprocess.run([str(python), "-c", _PROBE], capture_output=True, text=True, cwd="/", env=vllm_env(),
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert ["kvplan", "kvplan_vllm.stats:KVPlanStatLogger", "kvplan-vllm"] in probe["entry_points"]
    site = str(tmp_path / "env")
    with zipfile.ZipFile(wheel) as zf:
        shipped = {n for n in zf.namelist() if n.startswith("kvcore/")}
    for name, path in probe["kvcore"].items():
        assert path and path.startswith(site), f"{name} loaded from {path}, not the installed wheel"
        assert path.split("site-packages/", 1)[1] in shipped
