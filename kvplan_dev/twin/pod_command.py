"""A Pod's vLLM container as the ``vllm serve`` process the twin runs on CPU (pure: no process, no API call).

What the GPU would do is replaced, and nothing else:

- the image's entrypoint: ``vllm/vllm-openai`` runs ``vllm serve`` on the container's ``args``; a container with a
  ``command`` must start with ``vllm serve`` (or ``python3 -m vllm.entrypoints.openai.api_server``), anything else
  (a shell, a wrapper script) is refused with :class:`PodCommandError`, as a twin limit;
- the model: ``--model`` (or the positional model) names the weights; the twin keeps the name for the step clock and
  serves a one-layer ``config.json`` instead (:func:`kvplan_dev.vllm_cpu.write_model_dir`);
- the layout: ``--tensor-parallel-size`` and ``--pipeline-parallel-size`` leave the argv (one CPU process) and go to
  the step clock and the KV block count, so the engine runs as fast, and holds as many blocks, as that layout would;
- ``--host`` becomes the Pod's IP; the token-fabricating executor, ``--skip-tokenizer-init``, ``--enforce-eager``
  and ``--num-gpu-blocks-override`` are added; ``--gpu-memory-utilization`` is dropped (the block count is given);
- every path under a volume mount, in an argument or an environment value, points into the twin's copy of the
  volume.

Every other flag (``--max-num-seqs``, ``--scheduler-cls``, ``--max-model-len``, ``--enable-prefix-caching``, the
kvplan plugin's flags, ...) reaches vLLM as written, so a bad flag crashes the server as it would on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

ENTRYPOINT = ("vllm", "serve")
"""The ``vllm/vllm-openai`` image's ENTRYPOINT (its Dockerfile: ``ENTRYPOINT ["vllm", "serve"]``)."""
_API_SERVER = ("-m", "vllm.entrypoints.openai.api_server")
_DROPPED = {"--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp", "--host", "--model",
            "--gpu-memory-utilization", "--distributed-executor-backend", "--num-gpu-blocks-override"}
_VALUELESS = {"--enable-prefix-caching", "--no-enable-prefix-caching", "--enforce-eager", "--skip-tokenizer-init",
              "--trust-remote-code", "--disable-log-requests", "--enable-chunked-prefill",
              "--no-enable-chunked-prefill", "--disable-log-stats", "--async-scheduling", "--no-async-scheduling"}
"""Flags without a value (a ``--flag`` followed by another ``--flag`` is one too)."""


class PodCommandError(ValueError):
    """The container cannot run in the twin; the message says why (it becomes the container's waiting reason)."""


@dataclass(frozen=True)
class ServeCommand:
    """What the agent starts: vLLM's own arguments after ``serve`` (without the model), and the layout."""

    model: str
    args: tuple[str, ...]
    tp: int
    pp: int
    port: int
    max_model_len: int | None
    mounts: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    """(mount path in the container, the twin's directory) pairs, longest first."""

    def rewrite(self, value: str) -> str:
        """``value`` with a leading mount path replaced by the twin's directory."""
        for inside, outside in self.mounts:
            root = inside.rstrip("/")
            if value == root or value.startswith(root + "/"):
                return outside + value[len(root):]
        return value


def _vllm_args(container: Mapping[str, object]) -> list[str]:
    command = [str(part) for part in container.get("command") or []]  # type: ignore[attr-defined]
    args = [str(part) for part in container.get("args") or []]  # type: ignore[attr-defined]
    if not command:
        return args
    if tuple(command[:2]) == ENTRYPOINT:
        return command[2:] + args
    if len(command) >= 3 and command[0].startswith("python") and tuple(command[1:3]) == _API_SERVER:
        return command[3:] + args
    raise PodCommandError(f"command {command[:3]}: the twin runs `vllm serve` (the vllm/vllm-openai entrypoint) or "
                          "`python -m vllm.entrypoints.openai.api_server`, not a shell or wrapper")


def _pairs(argv: Sequence[str]) -> list[tuple[str, str | None]]:
    """``--k=v`` / ``--k v`` / ``--flag`` / positional, in order (positional: key ``""``)."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token.startswith("-") and "=" in token:
            key, _, value = token.partition("=")
            out.append((key, value))
        elif token.startswith("-"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if token in _VALUELESS or nxt is None or nxt.startswith("--"):
                out.append((token, None))
            else:
                out.append((token, nxt))
                i += 1
        else:
            out.append(("", token))
        i += 1
    return out


def _int(key: str, value: str | None) -> int:
    try:
        number = int(value or "")
    except ValueError:
        raise PodCommandError(f"{key}={value!r}: not an integer") from None
    if number < 1:
        raise PodCommandError(f"{key}={value!r}: must be >= 1")
    return number


def serve_command(container: Mapping[str, object], mounts: Mapping[str, str] | None = None) -> ServeCommand:
    """The :class:`ServeCommand` of a Pod's container (``mounts``: mount path -> the twin's directory)."""
    pairs = _pairs(_vllm_args(container))
    model = next((v for k, v in pairs if k == "--model" and v), None)
    positional = [v for k, v in pairs if k == "" and v]
    model = model or (positional[0] if positional else None)
    if not model:
        raise PodCommandError("no model: neither --model nor a positional model in the container's command/args")
    tp = pp = 1
    port = 8000
    max_model_len: int | None = None
    kept: list[str] = []
    for key, value in pairs:
        if key in ("--tensor-parallel-size", "-tp"):
            tp = _int(key, value)
        elif key in ("--pipeline-parallel-size", "-pp"):
            pp = _int(key, value)
        elif key == "--port":
            port = _int(key, value)
        elif key == "--max-model-len":
            max_model_len = _int(key, value)
        if key in _DROPPED or key == "":
            continue
        kept += [key] if value is None else [key, value]
    order = sorted((mounts or {}).items(), key=lambda item: -len(item[0]))
    cmd = ServeCommand(model, (), tp, pp, port, max_model_len, tuple(order))
    return ServeCommand(model, tuple(cmd.rewrite(a) for a in kept), tp, pp, port, max_model_len, cmd.mounts)


__all__ = ["ENTRYPOINT", "PodCommandError", "ServeCommand", "serve_command"]
