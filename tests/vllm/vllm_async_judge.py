"""Run inside the vLLM 0.33 venv: vLLM's own async-scheduling decision for argvs, as it makes it on a GPU.

``python vllm_async_judge.py MODEL_DIR IN.json OUT.json``; IN is ``[{"id", "argv": [...], "env": {...}}]``. Each
argv is parsed by vLLM's ``FlexibleArgumentParser`` with ``EngineArgs.add_cli_args`` and built into a
``VllmConfig`` by ``EngineArgs.create_engine_config()``, with the case's env in ``os.environ`` (vLLM reads
``VLLM_USE_V2_MODEL_RUNNER`` when the config asks for it). Two things differ from a GPU, and only these are patched:

- ``vllm.config.vllm.HAS_TRITON`` is set True: the CPU venv has no Triton, and without it ``use_v2_model_runner``
  picks the V1 runner for that reason alone (a CUDA image has Triton);
- ``CpuPlatform.check_and_update_config`` is wrapped to record ``scheduler_config.async_scheduling`` (and
  ``use_v2_model_runner``) on entry, i.e. after ``VllmConfig.__post_init__`` decided it and before the CPU
  platform forces it off (``vllm/platforms/cpu.py``); the original then runs unchanged.

Also written: ``ray_inherits_async``, whether ``Executor.get_class`` maps ``ray`` to ``RayExecutorV2`` and that class
is a ``MultiprocExecutor`` that does not override ``supports_async_scheduling`` (read from the source: Ray is not
installed here, so a ``ray`` config cannot be built). OUT maps each id to ``{"async", "v2"}`` or ``{"error"}``.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


def ray_inherits_async() -> bool:
    from vllm.v1.executor import abstract

    mapped = "RayExecutorV2" in inspect.getsource(abstract.Executor.get_class)
    src = Path(abstract.__file__).with_name("ray_executor_v2.py").read_text(encoding="utf-8")
    for node in ast.parse(src).body:
        if isinstance(node, ast.ClassDef) and node.name == "RayExecutorV2":
            bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
            overrides = any(isinstance(n, ast.FunctionDef) and n.name == "supports_async_scheduling"
                            for n in node.body)
            from vllm.v1.executor.multiproc_executor import MultiprocExecutor

            return mapped and bases == ["MultiprocExecutor"] and not overrides and \
                MultiprocExecutor.supports_async_scheduling()
    return False


def main() -> None:
    model, src, dst = sys.argv[1], sys.argv[2], sys.argv[3]
    import vllm.config.vllm as config_vllm
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform
    from vllm.platforms.cpu import CpuPlatform
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    assert isinstance(current_platform, CpuPlatform), type(current_platform)
    config_vllm.HAS_TRITON = True
    seen: dict[str, Any] = {}
    original = CpuPlatform.check_and_update_config.__func__  # type: ignore[attr-defined]

    def record(cls: type, vllm_config: Any) -> None:
        seen.update(async_=vllm_config.scheduler_config.async_scheduling, v2=vllm_config.use_v2_model_runner)
        original(cls, vllm_config)

    CpuPlatform.check_and_update_config = classmethod(record)  # type: ignore[method-assign, assignment]
    cases = json.loads(Path(src).read_text(encoding="utf-8"))
    out: dict[str, Any] = {"ray_inherits_async": ray_inherits_async(), "cases": {}}
    base_env = dict(os.environ)
    for case in cases:
        os.environ.clear()
        os.environ.update(base_env)
        os.environ.pop("VLLM_USE_V2_MODEL_RUNNER", None)
        os.environ.update(case["env"])
        seen.clear()
        try:
            parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
            ns = parser.parse_args(["--model", model, "--skip-tokenizer-init", "--enforce-eager", *case["argv"]])
            EngineArgs.from_cli_args(ns).create_engine_config()
            out["cases"][case["id"]] = {"async": seen["async_"], "v2": seen["v2"]}
        except BaseException as exc:  # noqa: BLE001 - reported; the test fails with it
            out["cases"][case["id"]] = {"error": f"{type(exc).__name__}: {str(exc)[:400]}"}
    Path(dst).write_text(json.dumps(out), encoding="utf-8")


if __name__ == "__main__":
    main()
