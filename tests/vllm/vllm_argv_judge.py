"""Run inside the vLLM 0.33 venv: read argvs as vLLM's own command line reads them (issue 26, item 5).

``python vllm_argv_judge.py IN.json OUT.json``; IN is ``[{"id", "prog": "serve"|"api_server", "argv": [...]}]``.
Each argv goes through vLLM's real entry point: ``vllm serve ARGV`` through ``vllm.entrypoints.cli.main.main``
(its subcommands, ``FlexibleArgumentParser``, ``--config`` handling and all), ``api_server`` through
``python -m vllm.entrypoints.openai.api_server``'s ``__main__`` block; the first namespace the parser returns is
kept and the run stopped there (nothing is served). OUT maps each id to ``{"tp", "pp", "seqs", "active", "policy",
"watermark", "dp", "dpl", "dpn"}`` (the data-parallel local size and rank None when not given) or ``{"error"}``.
"""

from __future__ import annotations

import contextlib
import io
import json
import runpy
import sys


class _Stop(Exception):
    pass


def _parser_class() -> type:
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older layouts
        from vllm.utils import FlexibleArgumentParser  # type: ignore[no-redef]
    return FlexibleArgumentParser


def judge(prog: str, argv: list[str]) -> dict[str, object]:
    cls = _parser_class()
    original = cls.parse_args
    seen: dict[str, object] = {}
    depth = [0]

    def parse_args(self, args=None, namespace=None):  # type: ignore[no-untyped-def]
        depth[0] += 1
        try:
            ns = original(self, args, namespace)
        finally:
            depth[0] -= 1
        if depth[0] == 0 and hasattr(ns, "tensor_parallel_size"):
            seen.update(tp=ns.tensor_parallel_size, pp=ns.pipeline_parallel_size,
                        seqs=getattr(ns, "max_num_seqs", None), active=getattr(ns, "max_num_active_seqs", None),
                        policy=getattr(ns, "scheduling_policy", None),
                        watermark=getattr(ns, "watermark", None), dp=ns.data_parallel_size,
                        dpl=ns.data_parallel_size_local, dpn=ns.data_parallel_rank)
            raise _Stop()
        return ns

    cls.parse_args = parse_args
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            if prog == "serve":
                from vllm.entrypoints.cli.main import main
                sys.argv = ["vllm", "serve", *argv]
                main()
            else:
                sys.argv = ["api_server", *argv]
                runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__")
    except _Stop:
        return seen
    except SystemExit as exc:
        return {"error": f"exit {exc.code}: {out.getvalue()[-400:]}"}
    except Exception as exc:  # noqa: BLE001 - reported, the test fails with it
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        cls.parse_args = original
    return {"error": "vLLM returned without parsing"}


def main() -> None:
    src, dst = sys.argv[1], sys.argv[2]  # judge() replaces sys.argv
    with open(src, encoding="utf-8") as f:
        cases = json.load(f)
    results = {c["id"]: judge(c["prog"], c["argv"]) for c in cases}
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
