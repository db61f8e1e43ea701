"""Whether vLLM 0.33 will schedule asynchronously for a container, so kvplan's plugin class matches it. Pure.

The rule is vLLM 0.33's own, read in ``vllm/config/vllm.py``, ``VllmConfig.__post_init__`` (the block after
``executor_class.supports_async_scheduling()``) and the ``VllmConfig.use_v2_model_runner`` property:

- ``--async-scheduling`` given: async (vLLM raises on an incompatibility rather than turning it off);
  ``--no-async-scheduling``: sync (the last of the two wins, as in argparse);
- unset: sync for a pooling runner (``model_config.runner_type == "pooling"``: ``--runner pooling``, or ``--convert``
  other than ``auto``/``none`` under ``--runner auto``, ``vllm/config/model.py`` ``_get_runner_type``; with both
  ``auto`` the architecture decides, and kvplan, which cannot see the model, takes it to generate), for an
  executor whose ``supports_async_scheduling()`` is False, and when the *V1* model runner is used with pipeline
  parallelism (or a speculative method it cannot run asynchronously); async otherwise. Every built-in executor supports it
  (``vllm/v1/executor/``: ``MultiprocExecutor`` and ``UniProcExecutor`` return True, ``ExecutorWithExternalLauncher``
  inherits it, and ``ray`` maps to ``RayExecutorV2``, a ``MultiprocExecutor``);
- the model runner (``use_v2_model_runner``): V2 when ``--watermark-config`` or a HiSparse attention config is given;
  else what ``VLLM_USE_V2_MODEL_RUNNER`` says (``bool(int(value))``, ``vllm/envs.py`` ``maybe_convert_bool``); else
  V1 for features V2 lacks (``_get_v2_model_runner_unsupported_features``: PP with ``external_launcher``, dual batch
  overlap while that env var is unset, some speculative methods); else V2.

Only the CPU platform then forces async off (``vllm/platforms/cpu.py``, ``check_and_update_config``); kvplan plans
GPU fleets (CUDA, with Triton), so that override and ROCm's DeepEP high-throughput DBO case are not modelled. What
kvplan cannot tell from the pod (a custom executor class, a speculative config, the env var from ``valueFrom`` or
``envFrom``) gives no answer (``on=None``) and the reason. ``tests/vllm/test_vllm_async_rule.py`` checks this rule
against vLLM 0.33's config code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .vllm_argv import scan, value_of
from .vllm_view import view

ASYNC_ON, ASYNC_OFF = "--async-scheduling", "--no-async-scheduling"
#: ``--enable-dbo`` is an ``EnableDisableAction`` (``vllm/utils/argparse_utils.py``): ``--disable-dbo`` and
#: ``--no-enable-dbo`` both turn it off.
DBO_ON, DBO_OFF, DBO_DISABLE = "--enable-dbo", "--no-enable-dbo", "--disable-dbo"
EXECUTOR = "--distributed-executor-backend"
RUNNER = "--runner"
CONVERT = "--convert"
SPECULATIVE = "--speculative-config"
WATERMARK_CONFIG = "--watermark-config"
ATTENTION_CONFIG = "--attention-config"
#: The flags this rule reads; ``-sc`` and ``-ac`` are vLLM 0.33's short names of the two configs.
READS = (ASYNC_ON, ASYNC_OFF, DBO_ON, DBO_OFF, DBO_DISABLE, EXECUTOR, RUNNER, CONVERT, SPECULATIVE, WATERMARK_CONFIG,
         ATTENTION_CONFIG)
SHORT_CONFIGS = {"-sc": SPECULATIVE, "-ac": ATTENTION_CONFIG}
#: The env var that forces a model runner (``vllm/envs.py``).
V2_ENV = "VLLM_USE_V2_MODEL_RUNNER"
#: Built-in executor backends (``Executor.get_class``); all support async scheduling in vLLM 0.33.
BUILTIN_EXECUTORS = frozenset({"mp", "uni", "ray", "external_launcher"})


@dataclass(frozen=True)
class AsyncFacts:
    """What vLLM's rule reads, as the container gives it. ``explicit``: the last of ``--async-scheduling`` /
    ``--no-async-scheduling`` (None: neither); ``executor``: None when absent (vLLM picks ``mp`` or ``uni``), else
    the value (``"?"``: not literal); ``v2_env``: ``"unset"``, ``"?"`` (not knowable) or the literal value."""

    pp: int = 1
    explicit: bool | None = None
    executor: str | None = None
    runner: str | None = None
    convert: str | None = None
    speculative: bool = False
    dbo: bool = False
    forces_v2: bool = False
    v2_env: str = "unset"


@dataclass(frozen=True)
class AsyncChoice:
    """vLLM's async scheduling for the container: True/False, or None (kvplan cannot tell); ``reason`` says why."""

    on: bool | None
    reason: str


def _model_runner_v2(f: AsyncFacts) -> tuple[bool | None, str]:
    """``VllmConfig.use_v2_model_runner`` (None: unknown) and why."""
    if f.forces_v2:
        return True, "--watermark-config or a HiSparse attention config needs Model Runner V2"
    if f.v2_env == "?":
        return None, f"{V2_ENV} comes from valueFrom or envFrom, so the model runner is unknown"
    if f.v2_env != "unset":
        try:
            return bool(int(f.v2_env)), f"{V2_ENV}={f.v2_env}"
        except ValueError:
            return None, f"{V2_ENV}={f.v2_env!r} is not an integer (vLLM fails on it)"
    if f.executor == "external_launcher" and f.pp > 1:
        return False, "Model Runner V2 lacks pipeline parallelism with external_launcher"
    if f.dbo:
        return False, f"Model Runner V2 lacks dual batch overlap while {V2_ENV} is unset"
    if f.speculative:
        return None, "a speculative config may need the V1 model runner (it depends on the method)"
    return True, "Model Runner V2 (the default)"


def decide_async(f: AsyncFacts) -> AsyncChoice:
    """vLLM 0.33's async-scheduling decision for ``f`` (the module docstring gives the rule and its source)."""
    if f.explicit is not None:
        return AsyncChoice(f.explicit, ASYNC_ON if f.explicit else ASYNC_OFF)
    if f.runner == "pooling":
        return AsyncChoice(False, "a pooling runner (--runner pooling)")
    if f.runner in (None, "auto") and f.convert not in (None, "auto", "none"):
        return AsyncChoice(False, f"a pooling runner (--convert {f.convert} with --runner auto)")
    if f.executor == "?":
        return AsyncChoice(None, "the executor backend is known only at run time")
    if f.executor is not None and f.executor not in BUILTIN_EXECUTORS:
        return AsyncChoice(None, f"executor {f.executor!r} is not built in; whether it supports async scheduling "
                                 "is unknown")
    v2, why = _model_runner_v2(f)
    if v2 is None:
        return AsyncChoice(None, why)
    if v2:
        return AsyncChoice(True, f"async by default: {why}")
    if f.speculative:
        return AsyncChoice(None, f"the V1 model runner ({why}) with a speculative config: async depends on the method")
    if f.pp > 1:
        return AsyncChoice(False, f"the V1 model runner ({why}) has no async scheduling with pipeline parallelism")
    return AsyncChoice(True, f"async by default: the V1 model runner ({why}) without pipeline parallelism")


def _env_value(container: Mapping[str, Any], name: str) -> str:
    """The container's value of env var ``name``: ``"unset"``, ``"?"`` (valueFrom, or envFrom may set it) or the
    literal (a later entry of one name wins, as the kubelet does)."""
    found = "?" if container.get("envFrom") else "unset"
    for e in container.get("env") or []:
        if isinstance(e, Mapping) and e.get("name") == name:
            value = e.get("value")
            found = value if isinstance(value, str) and "$(" not in value and "valueFrom" not in e else "?"
    return found


def _configs(argv: Sequence[str | None]) -> set[str]:
    """The JSON configs given by a short name (``-sc``) or by one of their keys (``--speculative-config.method``,
    ``FlexibleArgumentParser``'s dotted form)."""
    out = set()
    for w in argv:
        name = (w or "").split("=", 1)[0]
        if name in SHORT_CONFIGS:
            out.add(SHORT_CONFIGS[name])
        dotted = "--" + name[2:].replace("_", "-").split(".", 1)[0] if name.startswith("--") and "." in name else ""
        if dotted in (SPECULATIVE, ATTENTION_CONFIG):
            out.add(dotted)
    return out


def async_facts(container: Mapping[str, Any], pp: int) -> AsyncFacts | None:
    """The facts of :func:`decide_async` for a container that will run pipeline-parallel size ``pp`` (None: its
    argv cannot be told, see :mod:`.vllm_view`)."""
    v = view(container)
    if v.problem is not None:
        return None
    found, _ = scan(v.argv, READS)
    last = {f: occ[-1] for f, occ in found.items() if occ}
    switch = max((last[f] for f in (ASYNC_ON, ASYNC_OFF) if f in last), key=lambda o: o.index, default=None)
    dbo = max((last[f] for f in (DBO_ON, DBO_OFF, DBO_DISABLE) if f in last), key=lambda o: o.index, default=None)
    executor = None
    if EXECUTOR in last:
        executor = value_of(v.argv, last[EXECUTOR]) or "?"
    runner = value_of(v.argv, last[RUNNER]) if RUNNER in last else None
    convert = value_of(v.argv, last[CONVERT]) if CONVERT in last else None
    configs = _configs(v.argv) | set(last)
    hisparse = ATTENTION_CONFIG in configs and any("hisparse" in (w or "").lower() for w in v.argv)
    return AsyncFacts(pp=pp, explicit=None if switch is None else switch.flag == ASYNC_ON, executor=executor,
                      runner=runner, convert=convert, speculative=SPECULATIVE in configs,
                      dbo=dbo is not None and dbo.flag == DBO_ON,
                      forces_v2=WATERMARK_CONFIG in last or hisparse, v2_env=_env_value(container, V2_ENV))
