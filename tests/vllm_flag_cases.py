"""Shell and argv forms of a vLLM container (issue 26, item 5), and a way to see what vLLM really receives from one:
the container's ``command + args`` run by the real ``/bin/sh``/``bash``, with ``vllm``, ``python``/``python3`` and
``pip`` replaced by stubs that record their argv (written here, independently of the operator's parser).

Shared by the unit tier (``tests/unit/test_op_vllm_flags_forms.py``: the recorded argv read by an ``argparse``
model of vLLM's options) and the vLLM tier (``tests/vllm/test_vllm_flags_parser.py``: read by vLLM 0.33's own
parser). Each case says whether kvplan is expected to write TP 4 / PP 2 into it (``apply``) or refuse it
(``refuse``); either way, a container kvplan writes must make vLLM run TP 4 and PP 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class FormCase:
    command: list[str]
    args: list[str]
    expect: str  # "apply" or "refuse"
    env: list[dict[str, Any]] = field(default_factory=list)


def sh(script: str, *positional: str, expect: str = "apply", env: list[dict[str, Any]] | None = None,
       shell: str = "sh") -> FormCase:
    return FormCase([shell, "-c", script, *positional[:1]], list(positional[1:]), expect, env or [])


def argv(command: list[str], args: list[str], expect: str = "apply",
         env: list[dict[str, Any]] | None = None) -> FormCase:
    return FormCase(command, args, expect, env or [])


def val(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


SECRET_TP = {"name": "TP", "valueFrom": {"secretKeyRef": {"name": "s", "key": "tp"}}}
API = "vllm.entrypoints.openai.api_server"

CASES: dict[str, FormCase] = {
    # --- argv (no shell) ---------------------------------------------------------------------------------------
    "argv-entrypoint": argv([], ["--model", "m", "--tensor-parallel-size", "1"]),
    "argv-later-short-tp-wins": argv([], ["m", "--tensor-parallel-size", "1", "-tp", "8"]),
    "argv-underscores": argv([], ["m", "--tensor_parallel_size", "8", "--pipeline_parallel_size", "3"]),
    "argv-equals": argv([], ["m", "--tensor-parallel-size=8"]),
    "argv-short-equals": argv([], ["m", "-tp=8", "-pp=3"]),
    "argv-abbreviation": argv([], ["m", "--tensor-parallel", "2"], "refuse"),
    "argv-abbreviation-equals": argv([], ["m", "--pipeline-parallel=2"], "refuse"),
    "argv-short-abbreviation": argv([], ["m", "-t", "2"], "refuse"),
    "argv-short-glued": argv([], ["m", "-tp8"], "refuse"),
    "argv-config-file": argv([], ["m", "--config", "/etc/vllm/serve.yaml"], "refuse"),
    "argv-config-equals": argv([], ["m", "--config=/etc/vllm/serve.yaml"], "refuse"),
    "argv-end-of-options": argv(["vllm", "serve"], ["m", "--", "x"], "refuse"),
    "argv-kubelet-var-known": argv([], ["m", "--tensor-parallel-size", "$(TP)"], env=[val("TP", "8")]),
    "argv-kubelet-var-from-secret": argv([], ["m", "--tensor-parallel-size", "$(TP)"], "refuse", env=[SECRET_TP]),
    "argv-kubelet-var-is-a-flag": argv([], ["m", "$(EXTRA)"], env=[val("EXTRA", "--tensor-parallel-size=8")]),
    "argv-kubelet-unknown-word-after": argv([], ["m", "--tensor-parallel-size", "1", "$(EXTRA)"], "refuse",
                                            env=[{"name": "EXTRA", "valueFrom": {"configMapKeyRef": {
                                                "name": "c", "key": "k"}}}]),
    "argv-vllm-serve-in-command": argv(["vllm", "serve", "m"], ["--port", "8000", "-tp", "8"]),
    "argv-vllm-serve-split": argv(["vllm"], ["serve", "m", "--tensor-parallel-size", "8"]),
    "argv-python-module": argv(["python3", "-m", API], ["--model", "m", "-tp", "8"]),
    "argv-python-module-all-in-command": argv(["python3", "-u", "-m", API, "--model", "m",
                                               "--tensor-parallel-size", "8"], []),
    # --- sh -c ---------------------------------------------------------------------------------------------------
    "sh-later-short-tp-wins": sh("vllm serve m --tensor-parallel-size 1 -tp 8"),
    "sh-underscores": sh("vllm serve m --tensor_parallel_size 8"),
    "sh-abbreviation": sh("vllm serve m --tensor-parallel 2", expect="refuse"),
    "sh-flag-in-comment": sh("vllm serve m --port 8000 # --tensor-parallel-size 8"),
    "sh-flag-only-in-comment-line": sh("# vllm serve m --tensor-parallel-size 8\nexec vllm serve m"),
    "sh-echo-vllm-serve": sh("echo vllm serve m --tensor-parallel-size 8; exec vllm serve m"),
    "sh-echo-only": sh("echo vllm serve m --tensor-parallel-size 8", expect="refuse"),
    "sh-pass-on-to-another-command": sh('echo "$@"; exec vllm serve m', "sh", "--tensor-parallel-size", "8"),
    "sh-pass-on-to-vllm": sh('exec vllm serve m "$@"', "sh", "-tp", "8", "--port", "8000"),
    "sh-pass-on-with-nothing-for-dollar0": sh('exec vllm serve m "$@"'),
    "sh-pass-on-then-more-flags": sh('exec vllm serve m "$@" --port 8000', "sh", "--tensor-parallel-size", "8"),
    "sh-python-module": sh(f"python3 -m {API} --model m --tensor-parallel-size=8"),
    "sh-quoted-equals": sh('vllm serve m "--tensor-parallel-size=8"'),
    "sh-short-equals": sh("vllm serve m -tp=8"),
    "sh-config-file": sh("vllm serve m --config /etc/vllm/serve.yaml", expect="refuse"),
    "sh-env-var-known": sh("vllm serve m --tensor-parallel-size $TP", env=[val("TP", "8")]),
    "sh-env-var-unknown": sh("vllm serve m --tensor-parallel-size $TP", expect="refuse"),
    "sh-env-var-from-secret": sh("vllm serve m --tensor-parallel-size ${TP}", expect="refuse", env=[SECRET_TP]),
    "sh-env-var-assigned-in-script": sh("TP=8; vllm serve m --tensor-parallel-size $TP"),
    "sh-env-var-exported-in-script": sh("export TP=8 && exec vllm serve m --tensor-parallel-size \"$TP\""),
    "sh-env-var-prefix-assignment": sh("TP=8 vllm serve m --tensor-parallel-size $TP", expect="refuse"),
    "sh-extra-args-after-the-flag": sh("vllm serve m --tensor-parallel-size 1 $EXTRA", expect="refuse"),
    "sh-extra-args-split-into-flags": sh("exec vllm serve m $EXTRA", env=[val("EXTRA", "-tp 8 --port 8000")]),
    "sh-exec": sh("exec vllm serve m --tensor-parallel-size 8"),
    "sh-and-chain": sh("pip install -q extra && vllm serve m -tp 8 && echo done"),
    "sh-semicolon-chain": sh("cd / ; vllm serve m --pipeline-parallel-size 3 ; echo done"),
    "sh-here-document": sh("cat <<EOF > /dev/null\n--tensor-parallel-size 8\nEOF\nexec vllm serve m",
                           expect="refuse"),
    "sh-if": sh("if true; then exec vllm serve m; fi", expect="refuse"),
    "sh-subshell": sh("(exec vllm serve m -tp 8)", expect="refuse"),
    "sh-two-vllm-commands": sh("vllm serve a & vllm serve b", expect="refuse"),
    "sh-nested-sh-c": sh("sh -c 'vllm serve m -tp 8'", expect="refuse"),
    "sh-pipe-to-tee": sh("vllm serve m 2>&1 | tee /dev/null"),
    "sh-redirect-between-words": sh("vllm serve m > /dev/null --tensor-parallel-size 8"),
    "sh-line-continuations": sh("exec vllm serve m \\\n  -tp 8 \\\n  --port 8000"),
    "bash-production-stack-in-args": FormCase(["/bin/bash", "-c"], [
        "pip install -q extra && vllm serve /data/m --host 0.0.0.0 --tensor-parallel-size 1 --enable-prefix-caching"],
        "apply"),
    "sh-kubelet-ref-in-script": sh("vllm serve m -tp $(TP)", expect="refuse", env=[val("TP", "8")]),
    "sh-command-from-variable": sh("$VLLM serve m", expect="refuse"),
    "sh-ansi-c-quote": sh("vllm serve m $'-tp' 8", expect="refuse", shell="bash"),
    "sh-end-of-options": sh("vllm serve m -- x", expect="refuse"),
    "sh-env-wrapper": sh("exec env A=1 vllm serve m -tp 8"),
}

WANT = {"--tensor-parallel-size": "4", "--pipeline-parallel-size": "2"}

#: Forms of the engine knobs kvplan writes (``--max-num-seqs``, ``--scheduling-policy``, ``--watermark``) beside the
#: parallel sizes' aliases: underscores, ``=``, a later duplicate in another spelling. Each is written with
#: :data:`KNOB_WANT`; every occurrence vLLM reads is set in place (none added beside it), and vLLM must run it.
KNOB_CASES: dict[str, FormCase] = {
    "knob-underscores": argv([], ["m", "--max_num_seqs", "256", "--scheduling_policy", "fcfs", "--watermark", "0"]),
    "knob-equals": argv([], ["m", "--max-num-seqs=256", "--scheduling-policy=fcfs", "--watermark=0.01"]),
    "knob-underscore-equals": argv([], ["m", "--max_num_seqs=128", "-tp", "2", "--scheduling_policy=fcfs"]),
    "knob-later-duplicate-other-spelling": argv([], ["m", "--max-num-seqs", "64", "--max_num_seqs=32", "-pp", "3"]),
    "knob-absent-with-aliases": argv([], ["m", "-tp=2", "--pipeline_parallel_size", "3"]),
    "knob-all-aliases-at-once": argv([], ["m", "-tp", "2", "-pp=3", "--max_num_seqs", "16", "--watermark=0.2"]),
    "knob-sh-underscores": sh("exec vllm serve m --max_num_seqs 256 --scheduling_policy=fcfs -tp 2"),
    "knob-active-underscores": argv([], ["m", "--max_num_active_seqs=8", "--max-num-seqs", "64"]),
}
KNOB_WANT = {**WANT, "--max-num-seqs": "48", "--max-num-active-seqs": "24", "--scheduling-policy": "priority",
             "--watermark": "0.05"}

_STUB = """#!{python}
import json, os, sys
with open(os.environ["KVPLAN_ARGV_LOG"], "a", encoding="utf-8") as f:
    f.write(json.dumps({{"prog": os.path.basename(sys.argv[0]), "argv": sys.argv[1:]}}) + "\\n")
"""


def stubs(directory: Path) -> Path:
    """``vllm``, ``python``, ``python3`` and ``pip`` that append their argv to ``$KVPLAN_ARGV_LOG``."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("vllm", "python", "python3", "pip"):
        path = directory / name
        path.write_text(_STUB.format(python=sys.executable), encoding="utf-8")
        path.chmod(0o755)
    return directory


def kubelet(word: str, env: list[dict[str, Any]]) -> str:
    """The kubelet's ``$(NAME)`` expansion (test side; literal values only)."""
    values = {e["name"]: e["value"] for e in env if "value" in e}
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else values.get(m.group(1), m.group(0)), word)


def vllm_invocations(command: list[str], args: list[str], env: list[dict[str, Any]], bindir: Path,
                     log: Path) -> list[list[str]]:
    """Run the container's command (the image's entrypoint ``vllm serve`` when empty) under the stubs; the argv
    of every vLLM invocation it made (after ``serve``, or after ``-m <api_server>``)."""
    full = [kubelet(w, env) for w in (command or ["vllm", "serve"]) + args]
    if log.exists():
        log.unlink()
    environ = {"PATH": f"{bindir}:/usr/bin:/bin", "KVPLAN_ARGV_LOG": str(log), "HOME": str(bindir)}
    environ |= {e["name"]: kubelet(e["value"], env) for e in env if "value" in e}
    head = full[0] if os.path.isabs(full[0]) or "/" in full[0] else str(bindir / full[0]) \
        if (bindir / full[0]).exists() else full[0]
    subprocess.run([head, *full[1:]], env=environ, capture_output=True, timeout=60, check=False)
    out = []
    for line in log.read_text(encoding="utf-8").splitlines() if log.exists() else []:
        rec = json.loads(line)
        a = rec["argv"]
        if rec["prog"] == "vllm" and a[:1] == ["serve"]:
            out.append(a[1:])
        elif rec["prog"].startswith("python") and "-m" in a and a[a.index("-m") + 1:a.index("-m") + 2] == [API]:
            out.append(a[a.index("-m") + 2:])
    return out


def container(case: FormCase) -> dict[str, Any]:
    return {"name": "vllm", "command": list(case.command), "args": list(case.args), "env": list(case.env)}


def params() -> list[Any]:
    return [pytest.param(k, id=k) for k in CASES]


def vllm_like(argv: list[str]) -> argparse.Namespace:
    """A model of vLLM's parser for the options that matter here (test side)."""
    p = argparse.ArgumentParser(allow_abbrev=True, exit_on_error=False)
    p.add_argument("model_tag", nargs="?")
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    p.add_argument("--tensorizer-config")  # makes --tensor ambiguous, as in vLLM
    for name in ("--model", "--host", "--port", "--config-format", "--scheduling-policy"):
        p.add_argument(name)
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-num-active-seqs", type=int)
    p.add_argument("--watermark", type=float)
    p.add_argument("--enable-prefix-caching", action="store_true")
    norm = ["--" + a[2:].split("=", 1)[0].replace("_", "-") + ("=" + a.split("=", 1)[1] if "=" in a else "")
            if a.startswith("--") else a for a in argv]
    ns, _ = p.parse_known_args(norm)
    return ns
