"""vLLM 0.33's own config code as the judge of kvplan's async-scheduling rule (marker ``vllm``).

Every case of ``tests/vllm_async_cases.py`` that vLLM can build here (switches, executors, the model-runner env
var, pooling, DBO, the watermark config, with PP 1 and 2) is built into a ``VllmConfig`` by the real vLLM in its
venv (``vllm_async_judge.py``: only Triton's presence and the CPU platform's final override are patched, as that
module says), and vLLM's decision must be the case's ``want`` and kvplan's. A ``ray`` case is built with ``mp``
(Ray is not installed), which is sound only because ``ray`` maps to ``RayExecutorV2``, a ``MultiprocExecutor`` that
keeps its ``supports_async_scheduling``: that is checked in vLLM's source too.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kvplan_dev.vllm_cpu import write_model_dir
from kvplan_dev.vllm_overlay import vllm_env
from kvplan_operator.targets.vllm_async import async_facts, decide_async
from vllm_async_cases import CASES, container, vllm_argv, vllm_env as case_env  # type: ignore[import-not-found]

pytestmark = pytest.mark.vllm

JUDGE = Path(__file__).with_name("vllm_async_judge.py")
JUDGED = [k for k, c in CASES.items() if c.judge]


@pytest.fixture(scope="module")
def verdicts(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("vllm-async")
    # eight heads: TP 2 must divide them
    model = write_model_dir(tmp / "model")
    cfg = json.loads((model / "config.json").read_text())
    cfg.update(hidden_size=512, num_attention_heads=8, num_key_value_heads=8)
    (model / "config.json").write_text(json.dumps(cfg))
    jobs = [{"id": k, "argv": vllm_argv(CASES[k]), "env": case_env(CASES[k])} for k in JUDGED]
    src, out = tmp / "in.json", tmp / "out.json"
    src.write_text(json.dumps(jobs), encoding="utf-8")
    proc = subprocess.run([str(vllm_python), str(JUDGE), str(model), str(src), str(out)], capture_output=True,
                          text=True, timeout=900, check=False, cwd="/", env=vllm_env())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return result


def test_the_table_is_mostly_judged() -> None:
    """The cases vLLM cannot build here are the ones kvplan gives no answer for, and only those."""
    assert {k for k, c in CASES.items() if not c.judge} == {k for k, c in CASES.items() if c.want is None} | {
        "explicit-off-beats-unknowns"}
    assert len(JUDGED) >= 20


def test_ray_executor_v2_inherits_async_support(verdicts: dict[str, Any]) -> None:
    assert verdicts["ray_inherits_async"] is True


@pytest.mark.parametrize("case_id", JUDGED)
def test_vllm_and_kvplan_decide_alike(case_id: str, verdicts: dict[str, Any]) -> None:
    case = CASES[case_id]
    answer = verdicts["cases"][case_id]
    assert "error" not in answer, answer
    assert answer["async"] is case.want, answer
    facts = async_facts(container(case), case.pp)
    assert facts is not None
    assert decide_async(facts).on is answer["async"]
