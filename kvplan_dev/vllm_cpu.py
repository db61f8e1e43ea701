"""A real ``vllm serve`` on a machine without a GPU, started and stopped by PID (dev/test tooling; pure Python, no
vLLM import: the server runs in the interpreter of a vLLM environment).

What makes it run on CPU (``DATAPLANE.md``): ``VLLM_TARGET_DEVICE=cpu``, a model directory holding only
``config.json`` (:func:`write_model_dir`), ``--skip-tokenizer-init`` (prompts are token ids), ``--enforce-eager``,
``--num-gpu-blocks-override N`` and kvplan's token-fabricating executor
(``--distributed-executor-backend kvplan_dev.vllm_fake.TokenFabricatingExecutor``). vLLM needs the KV cache to hold
one request of ``max_model_len`` tokens besides its null block: ``(N - 1) * block_size >= max_model_len``.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from kvplan_dev.process import ManagedProcess, _start_ticks, free_port, live_children, wait_until
from kvplan_dev.vllm_overlay import vllm_env

EXECUTOR = "kvplan_dev.vllm_fake.TokenFabricatingExecutor"
#: One attention layer of one KV head of 64: tiny, the memory is never touched.
_KV_HEADS = 1
_HEAD_SIZE = 64


def write_model_dir(path: Path, *, max_position_embeddings: int = 32768, vocab_size: int = 32000) -> Path:
    """A model directory holding only ``config.json`` (a one-layer Llama shape; no weights, no tokenizer)."""
    path.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": _KV_HEADS * _HEAD_SIZE,
        "intermediate_size": 128, "num_attention_heads": _KV_HEADS, "num_key_value_heads": _KV_HEADS,
        "num_hidden_layers": 1, "vocab_size": vocab_size, "max_position_embeddings": max_position_embeddings,
        "torch_dtype": "float16", "bos_token_id": 1, "eos_token_id": 2,
    }
    (path / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return path


@dataclass
class VllmServer:
    """``vllm serve`` on 127.0.0.1 with the fabricating executor; ``start()`` waits for ``/health``."""

    python: Path
    workdir: Path
    num_blocks: int
    max_model_len: int
    served_model_name: str = "kvplan-test"
    scheduler_cls: str | None = None
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    process: ManagedProcess | None = None
    startup_s: float = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "vllm-serve.log"

    def argv(self) -> list[str]:
        model = write_model_dir(self.workdir / "model", max_position_embeddings=self.max_model_len)
        argv = [
            str(self.python), "-c", "from vllm.entrypoints.cli.main import main; main()", "serve", str(model),
            "--served-model-name", self.served_model_name, "--host", "127.0.0.1", "--port", str(self.port),
            "--skip-tokenizer-init", "--enforce-eager", "--num-gpu-blocks-override", str(self.num_blocks),
            "--max-model-len", str(self.max_model_len), "--distributed-executor-backend", EXECUTOR,
        ]
        if self.scheduler_cls is not None:
            argv += ["--scheduler-cls", self.scheduler_cls]
        return argv + self.extra_args

    def start(self, *, ready_guard_s: float = 900.0) -> None:
        """Start and wait until ``/health`` answers 200. ``ready_guard_s`` only stops a hung start from hanging the
        caller; readiness itself is the condition."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        env = vllm_env(self.env)
        began = time.monotonic()
        self.process = ManagedProcess("vllm-serve", self.argv(), self.log_path, env=env)
        wait_until(self._healthy, timeout_s=ready_guard_s, what="vllm serve /health", proc=self.process, every_s=0.5)
        self.startup_s = time.monotonic() - began

    def _healthy(self) -> bool:
        with urllib.request.urlopen(self.url + "/health", timeout=5) as resp:
            return bool(resp.status == 200)

    def children(self) -> list[int]:
        """PIDs of the server's descendants (the engine core and anything it started)."""
        if self.process is None or self.process.popen is None:
            return []
        found: list[int] = []
        frontier = [self.process.popen.pid]
        while frontier:
            kids = [pid for pid, _ in live_children(frontier.pop())]
            found += kids
            frontier += kids
        return found

    def stop(self, grace_s: float = 30.0) -> list[int]:
        """SIGTERM the server (vLLM then stops its engine core), wait up to ``grace_s`` for every descendant to
        exit, then SIGTERM and SIGKILL (by PID, start time checked) those still alive. Returns the PIDs still alive
        at the end (none, unless a process ignores SIGKILL)."""
        if self.process is None:
            return []
        descendants = [(pid, ticks) for pid in self.children() if (ticks := _start_ticks(pid)) is not None]
        self.process.stop(grace_s=grace_s)
        self.process = None

        def alive() -> list[int]:
            return [pid for pid, ticks in descendants if _start_ticks(pid) == ticks]

        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            for pid in alive() if sig is not None else []:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace_s
            while alive() and time.monotonic() < deadline:
                time.sleep(0.2)
            if not alive():
                return []
        return alive()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
