"""Containers and the async-scheduling decision vLLM 0.33 makes for each, read in its ``vllm/config/vllm.py``
(``VllmConfig.__post_init__``, ``use_v2_model_runner``) on a GPU: ``want`` is True (async), False (sync) or None
(kvplan cannot tell from the pod, so it must not guess).

Shared by the unit tier (``tests/unit/operator/test_op_vllm_async.py``: kvplan's rule against ``want``) and the vLLM
tier (``tests/vllm/test_vllm_async_rule.py``: every case with ``judge`` set is run through vLLM 0.33's own config
code, which must agree with ``want``). A case the real vLLM cannot build here says why in ``judge_note``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class AsyncCase:
    args: list[str]
    pp: int
    want: bool | None
    env: list[dict[str, Any]] = field(default_factory=list)
    env_from: bool = False
    #: whether the real vLLM can judge it on CPU here (a custom executor, a valueFrom env: nothing to build)
    judge: bool = True
    #: the executor backend vLLM is given instead when judged (``ray`` is not installed in the vLLM venv)
    judge_executor: str | None = None


def env(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


V2_OFF = [env("VLLM_USE_V2_MODEL_RUNNER", "0")]
V2_ON = [env("VLLM_USE_V2_MODEL_RUNNER", "1")]

CASES: dict[str, AsyncCase] = {
    "default": AsyncCase([], 1, True),
    "pipeline-parallel-mrv2": AsyncCase([], 2, True),
    "tp-and-pp": AsyncCase(["-tp", "2"], 2, True),
    "no-async-flag": AsyncCase(["--no-async-scheduling"], 1, False),
    "no-async-underscores": AsyncCase(["--no_async_scheduling"], 2, False),
    "last-switch-wins-on": AsyncCase(["--no-async-scheduling", "--async-scheduling"], 2, True),
    "last-switch-wins-off": AsyncCase(["--async-scheduling", "--no-async-scheduling"], 1, False),
    "explicit-async-pp": AsyncCase(["--async-scheduling"], 2, True),
    "ray-executor-pp": AsyncCase(["--distributed-executor-backend", "ray"], 2, True, judge_executor="mp"),
    "ray-executor-equals": AsyncCase(["--distributed-executor-backend=ray"], 1, True, judge_executor="mp"),
    "mp-executor-pp": AsyncCase(["--distributed-executor-backend", "mp"], 2, True),
    "v1-runner-forced-pp": AsyncCase([], 2, False, env=V2_OFF),
    "v1-runner-forced-no-pp": AsyncCase([], 1, True, env=V2_OFF),
    "v1-runner-forced-ray-pp": AsyncCase(["--distributed-executor-backend", "ray"], 2, False, env=V2_OFF,
                                         judge_executor="mp"),
    "v2-runner-forced-pp": AsyncCase([], 2, True, env=V2_ON),
    "v1-runner-later-env-wins": AsyncCase([], 2, True, env=V2_OFF + V2_ON),
    "watermark-config-forces-v2": AsyncCase(["--watermark-config", '{"key": 42}'], 2, True, env=V2_OFF),
    "pooling-runner": AsyncCase(["--runner", "pooling"], 1, False),
    "generate-runner-equals": AsyncCase(["--runner=generate"], 2, True),
    "convert-embed-is-pooling": AsyncCase(["--convert", "embed"], 1, False),
    "convert-none": AsyncCase(["--convert=none"], 2, True),
    "generate-runner-beats-convert": AsyncCase(["--runner", "generate", "--convert", "embed"], 1, True),
    "external-launcher-pp": AsyncCase(["--distributed-executor-backend", "external_launcher"], 2, False),
    "dbo-pp": AsyncCase(["--enable-dbo"], 2, False),
    "dbo-no-pp": AsyncCase(["--enable-dbo"], 1, True),
    "dbo-off-pp": AsyncCase(["--enable-dbo", "--no-enable-dbo"], 2, True),
    "dbo-disabled-pp": AsyncCase(["--enable-dbo", "--disable-dbo"], 2, True),
    "dbo-disabled-then-enabled-pp": AsyncCase(["--disable-dbo", "--enable_dbo"], 2, False),
    # kvplan cannot tell these from the pod: no answer, so no class is guessed
    "custom-executor": AsyncCase(["--distributed-executor-backend", "my.pkg.Executor"], 1, None, judge=False),
    "speculative-config": AsyncCase(["--speculative-config", '{"method": "ngram"}'], 1, None, judge=False),
    "speculative-short": AsyncCase(["-sc", '{"method": "ngram"}'], 2, None, judge=False),
    "speculative-dotted": AsyncCase(["--speculative-config.method", "ngram"], 2, None, judge=False),
    "env-from-secret": AsyncCase([], 2, None, env=[{"name": "VLLM_USE_V2_MODEL_RUNNER", "valueFrom": {
        "secretKeyRef": {"name": "s", "key": "k"}}}], judge=False),
    "env-from-configmap-source": AsyncCase([], 2, None, env_from=True, judge=False),
    "env-not-a-number": AsyncCase([], 2, None, env=[env("VLLM_USE_V2_MODEL_RUNNER", "yes")], judge=False),
    # an explicit switch needs none of the above
    "explicit-off-beats-unknowns": AsyncCase(["-sc", '{"method": "ngram"}', "--no-async-scheduling"], 2, False,
                                             env_from=True, judge=False),
}


def container(case: AsyncCase) -> dict[str, Any]:
    """The vLLM container of the case (the image's entrypoint runs ``vllm serve``; kvplan writes the planned PP)."""
    out: dict[str, Any] = {"name": "vllm", "image": "vllm/vllm-openai:v0.33.0",
                           "args": ["--model", "m", *case.args, "--pipeline-parallel-size", str(case.pp)],
                           "env": list(case.env)}
    if case.env_from:
        out["envFrom"] = [{"configMapRef": {"name": "engine-env"}}]
    return out


def vllm_argv(case: AsyncCase) -> list[str]:
    """The argv vLLM is judged on (the model is the caller's); ``ray`` swapped for ``judge_executor``."""
    args = list(case.args)
    if case.judge_executor is not None:
        args = [case.judge_executor if a == "ray" else a.replace("=ray", "=" + case.judge_executor) for a in args]
    return [*args, "--pipeline-parallel-size", str(case.pp)]


def vllm_env(case: AsyncCase) -> dict[str, str]:
    """The process env of the case for vLLM (the last literal entry of a name wins, as the kubelet does)."""
    return {e["name"]: e["value"] for e in case.env if "value" in e}
