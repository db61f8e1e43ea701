"""``kvcore profile``: one layout's KV capacity, step times, prefill and first-token times and throughput from the
time model.

    kvcore profile (--gpu G | --gpu-config F) (--model M | --model-config F) --tp T [--pp P]
                   [--kv-dtype bf16|fp8] [--json] [--plot F.png]

``--gpu`` is a catalogue GPU type (``kvcore.profiles.gpus.CATALOGUE``), or ``--gpu-config`` a JSON or YAML file of a
GPU's datasheet figures (``kvcore.profiles.gpus.gpu_from_spec``: memoryBytes, hbmBytesPerSecond, bf16Flops, ...;
named after the file); ``--model`` a catalogue model
(``kvcore.profiles.models.CONFIGS``) or ``--model-config`` a Hugging Face ``config.json``. Exit status 0, or 2 on
bad input (one line naming the flag or the config key).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kvcore.cli.args import int_arg
from kvcore.cli.output import format_table, print_json
from kvcore.errors import InputError


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser("profile", help="KV capacity, step and prefill times of one (GPU, model, TP, PP) layout",
                       description=__doc__.split("\n\n")[0] if __doc__ else None)
    gpu = p.add_mutually_exclusive_group(required=True)
    gpu.add_argument("--gpu", help="GPU type, e.g. A100-80GB, H100-SXM, H200, L40S, MI300X")
    gpu.add_argument("--gpu-config", metavar="F", help="a JSON or YAML file of a GPU's figures (memoryBytes, "
                                                      "hbmBytesPerSecond, bf16Flops, fp8Flops, interconnect, ...)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="catalogue model, e.g. llama-3.1-70b, qwen3-32b, mixtral-8x7b")
    src.add_argument("--model-config", metavar="F", help="a Hugging Face config.json")
    p.add_argument("--tp", type=int_arg(low=1, high=64), required=True, help="tensor-parallel size")
    p.add_argument("--pp", type=int_arg(low=1, high=64), default=1, help="pipeline-parallel size (default 1)")
    p.add_argument("--kv-dtype", choices=("bf16", "fp8"), default="bf16", help="KV-cache dtype (default bf16)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--plot", metavar="F.png", default=None, help="draw step time against batch and context")
    p.set_defaults(func=_run)


def _relabel(exc: InputError, flags: dict[str, str]) -> InputError:
    for prefix, flag in flags.items():
        if exc.field == prefix or exc.field.startswith(prefix + "."):
            return InputError(flag + exc.field[len(prefix):] if flag.startswith("--model-config") else flag,
                              exc.message, hint=exc.hint)
    return exc


def _gpu_file(path: Path) -> Any:
    """The GPU spec in ``path`` (JSON or YAML), named after the file; bad figures name ``--gpu-config.KEY``."""
    from kvcore.cli.yaml_guard import safe_yaml_load
    from kvcore.profiles.gpus import gpu_from_spec

    try:
        spec = safe_yaml_load(path)   # JSON is YAML
    except InputError as exc:
        raise InputError("--gpu-config", f"{path}: {exc.field}: {exc.message}") from None
    if not isinstance(spec, dict):
        raise InputError("--gpu-config", f"{path}: must hold a mapping of GPU figures")
    return gpu_from_spec(spec, field="--gpu-config", name=path.stem)


def _run(args: argparse.Namespace) -> int:
    from kvcore.profiles.arch import from_hf_config
    from kvcore.profiles.gpus import get_gpu
    from kvcore.profiles.models import get_model
    from kvcore.profiles.report import profile_report
    from kvcore.profiles.steptime import check_fits, layout

    gpu = get_gpu(args.gpu, field="--gpu") if args.gpu is not None else _gpu_file(Path(args.gpu_config))
    if args.model is not None:
        model = get_model(args.model, args.kv_dtype, field="--model")
    else:
        path = Path(args.model_config)
        try:
            cfg = json.loads(path.read_text())
        except FileNotFoundError:
            raise
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError("--model-config", f"{path}: not a readable JSON file ({exc})") from None
        model = from_hf_config(cfg, name=path.stem if path.stem != "config" else path.parent.name or "custom",
                               field="--model-config", kv_dtype=args.kv_dtype)
    try:
        lay = layout(gpu, model, args.tp, args.pp, field="profile")
        check_fits(lay, field="profile")
    except InputError as exc:
        raise _relabel(exc, {"profile.tp": "--tp", "profile.pp": "--pp", "profile.kv_dtype": "--kv-dtype",
                             "profile.model": "--model-config" if args.model is None else "--model",
                             "profile.gpu": "--gpu"}) from None
    rep = profile_report(lay)
    if args.plot:
        _plot(lay, args.plot)
        rep["plot"] = args.plot
    if args.json:
        print_json(rep)
        return 0
    print(f"{rep['gpu']} {rep['model']} TP={rep['tp']} PP={rep['pp']} KV {rep['kv_dtype']}: "
          f"{rep['kv_tokens']:.0f} KV tokens, operating batch {rep['operating_batch']} "
          f"(max_num_seqs {rep['max_num_seqs']}), {rep['tokens_per_s_per_gpu']:.0f} tokens/s per GPU")
    rows: list[list[Any]] = [["decode, ctx 1024", f"batch {b}", f"{t * 1e3:.2f}"]
                             for b, t in rep["decode_step_s"].items()]
    rows += [["decode, batch 32", f"ctx {c}", f"{t * 1e3:.2f}"] for c, t in rep["decode_step_s_ctx"].items()]
    rows += [["prefill, batch 1", f"prompt {p}", f"{t * 1e3:.2f}"] for p, t in rep["prefill_s"].items()]
    rows += [["first token, idle server", f"prompt {p}", f"{t * 1e3:.2f}"] for p, t in rep["first_token_s"].items()]
    print(format_table(["step", "at", "ms"], rows))
    print(f"source: {rep['source']}")
    return 0


def _plot(lay: Any, out: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - matplotlib is a dev dependency
        raise InputError("--plot", "needs matplotlib") from None
    from kvcore.profiles.steptime import step_time

    fig, ax = plt.subplots(figsize=(6, 4))
    batches = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    for ctx in (512, 1024, 2048, 8192):
        ax.plot(batches, [step_time(lay, float(ctx), batch=b) * 1e3 for b in batches], marker="o",
                label=f"context {ctx}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("running sequences (batch)")
    ax.set_ylabel("decode step, ms")
    ax.set_title(f"{lay.gpu.name} {lay.model.name} TP={lay.tp} PP={lay.pp}")
    ax.legend()
    try:
        fig.savefig(out, dpi=100)
    except OSError as exc:
        raise InputError("--plot", f"cannot write {out}: {exc}") from None
    finally:
        plt.close(fig)
    sys.stdout.flush()
