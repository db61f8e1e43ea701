"""``kvplan-dev``: the developer CLI for the local control plane, tool builds and the demo.

- ``kvplan-dev tools ensure``: install/build every binary (first time: tens of minutes; then instant).
- ``kvplan-dev tools ensure --vllm``: install the cached ``vllm==0.33.0`` venv (:mod:`kvplan_dev.vllm_env`).
- ``kvplan-dev cluster up [--prometheus] [--backfill TRACE] [--json]``: start etcd + kube-apiserver (and
  Prometheus), print one JSON object, and exit leaving them running; state (PIDs) in ``~/.cache/kvplan/run/``.
- ``kvplan-dev cluster down`` / ``cluster status``: stop exactly those PIDs / report them.
- ``kvplan-dev kubectl -- ARGS`` / ``kvplan-dev helm -- ARGS``: the project's binaries, with ``KUBECONFIG`` set to
  the running local cluster unless already set.
- ``kvplan-dev demo``: see :mod:`kvplan_dev.demo`.
- ``kvplan-dev twin``: see :mod:`kvplan_dev.twin.scenario`.

Bad input (an option, the ``--backfill`` trace) is one line ``kvplan-dev <command>: error: <field>: <message>``
and exit status 2, checked before anything is started.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from kvcore.cli.args import OneLineParser, float_arg, remember_parsers, report, unknown_arguments
from kvcore import InputError
from kvcore import load_trace
from kvplan_dev import cluster as cluster_mod
from kvplan_dev import prom as prom_mod
from kvplan_dev.gobuild import BuildError
from kvplan_dev.openmetrics import TraceRow, Window
from kvplan_dev.process import ProcessRecord
from kvplan_dev.tools import Tools, cache_root, ensure_tools, locate_tools


MAX_BACKFILL_HOURS = 24.0 * 366
"""Longest --backfill history: a year (Prometheus keeps it with the 100y retention; more is not a demo)."""


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_dir() -> Path:
    """``$KVPLAN_RUN_DIR`` or ``~/.cache/kvplan/run``: the state of a ``cluster up`` that outlives the command."""
    return Path(os.environ.get("KVPLAN_RUN_DIR", str(cache_root() / "run")))


def state_file() -> Path:
    """The JSON state written by ``cluster up``."""
    return run_dir() / "state.json"


def _read_state() -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(state_file().read_text())
        return data
    except FileNotFoundError:
        return None


def _alive(state: dict[str, Any]) -> list[str]:
    procs = [*state.get("cluster", {}).get("processes", []), *state.get("prometheus", {}).get("processes", [])]
    return [f"{p['name']} (pid {p['pid']})" for p in procs if ProcessRecord.from_json(p).alive()]


def _tools() -> Tools:
    try:
        return locate_tools()
    except BuildError:
        return ensure_tools(progress=_err)


def _summary(state: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {key: state["cluster"][key] for key in
                           ("kubeconfig", "server", "apiserver_version", "etcd_version")}
    out["prometheus_url"] = state.get("prometheus", {}).get("prometheus_url")
    out["state_file"] = str(state_file())
    return out


def backfill_rows(path: Path) -> list[TraceRow]:
    """The rows of a trace to backfill, read and checked by :func:`kvcore.history.traces.load_trace` (every error names the
    file, line and column) before anything is started; the backfill needs arrival times."""
    trace = load_trace(path)
    if trace.arrival_s is None:
        raise InputError(path.name, "has no arrival_s timestamps; a backfill spreads requests over time")
    return [TraceRow(float(a), int(round(i)), int(round(o)))
            for a, i, o in zip(trace.arrival_s.tolist(), trace.input_tokens.tolist(), trace.output_tokens.tolist())]


def cluster_up(args: argparse.Namespace) -> int:
    """Start everything, detach, write the state file, print one JSON object."""
    rows: list[TraceRow] = []
    if args.backfill:  # read the trace first: bad input is refused before anything starts
        try:
            rows = backfill_rows(Path(args.backfill))
        except InputError as exc:
            raise InputError("--backfill", str(exc)) from None
        except FileNotFoundError:
            raise InputError("--backfill", f"{args.backfill}: no such file") from None
    existing = _read_state()
    if existing is not None and _alive(existing):
        _err(f"kvplan-dev: a local cluster is already running ({', '.join(_alive(existing))}); reusing it")
        print(json.dumps({**_summary(existing), "already_running": True}))
        return 0
    tools = _tools()
    started = time.monotonic()
    base = run_dir() / f"up-{int(time.time())}"
    local = cluster_mod.LocalCluster(tools, workdir=base / "cluster", die_with_parent=False)
    state: dict[str, Any] = {}
    local.start()
    try:
        state["cluster"] = {**local.detach(), "remove_workdir": True}
        if args.prometheus or args.backfill:
            prometheus = prom_mod.LocalPrometheus(tools, workdir=base / "prometheus", die_with_parent=False)
            if args.backfill:
                window = Window(end_unix_s=time.time() - 60.0, duration_s=args.hours * 3600.0)
                series = [prom_mod.series_from_trace(rows, labels={"model_name": args.model_name}, window=window)]
                prometheus.backfill(series, window)
            prometheus.start()
            state["prometheus"] = {**prometheus.detach(), "remove_workdir": True}
    except BaseException:
        cluster_mod.stop_detached(state.get("cluster", {}))
        raise
    state["base"] = str(base)
    run_dir().mkdir(parents=True, exist_ok=True)
    state_file().write_text(json.dumps(state, indent=2) + "\n")
    summary = {**_summary(state), "started_in_s": round(time.monotonic() - started, 1)}
    if args.json:
        print(json.dumps(summary))
    else:
        print(json.dumps(summary, indent=2))
    return 0


def cluster_down(args: argparse.Namespace) -> int:
    """Stop exactly the PIDs recorded by ``cluster up``; remove their dirs and the state file."""
    state = _read_state()
    if state is None:
        _err("kvplan-dev: no local cluster recorded; nothing to stop")
        return 0
    stopped = prom_mod.stop_detached(state.get("prometheus", {}))
    stopped += cluster_mod.stop_detached(state.get("cluster", {}))
    if state.get("base"):
        shutil.rmtree(state["base"], ignore_errors=True)
    state_file().unlink(missing_ok=True)
    print(json.dumps({"stopped": stopped}))
    return 0


def cluster_status(args: argparse.Namespace) -> int:
    """Print the recorded state and which of its processes are alive; exit 1 if none is running."""
    state = _read_state()
    if state is None:
        print(json.dumps({"running": False}))
        return 1
    alive = _alive(state)
    print(json.dumps({**_summary(state), "running": bool(alive), "alive": alive}))
    return 0 if alive else 1


def tools_ensure(args: argparse.Namespace) -> int:
    """Install/build every binary (with ``--vllm``: only the cached vLLM venv); print their paths as JSON."""
    started = time.monotonic()
    try:
        if args.vllm:
            from kvplan_dev.vllm_env import VLLM_VERSION, ensure_vllm_env

            paths = {"vllm_python": str(ensure_vllm_env(progress=_err)), "vllm": VLLM_VERSION}
        else:
            paths = ensure_tools(progress=_err).as_dict()
    except BuildError as exc:
        _err(f"kvplan-dev tools ensure: FAILED\n{exc}")
        return 1
    print(json.dumps({**paths, "seconds": round(time.monotonic() - started, 1)}, indent=2))
    return 0


def _exec_tool(binary: Path, argv: Sequence[str]) -> int:
    args = list(argv)
    if args and args[0] == "--":
        args = args[1:]
    env = dict(os.environ)
    state = _read_state()
    if "KUBECONFIG" not in env and state is not None and _alive(state):
        env["KUBECONFIG"] = state["cluster"]["kubeconfig"]
    os.execve(str(binary), [str(binary), *args], env)
    return 127  # pragma: no cover - execve does not return


def parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and --help)."""
    top = OneLineParser(prog="kvplan-dev", description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = top.add_subparsers(dest="command", required=True)
    cl = sub.add_parser("cluster", help="local etcd + kube-apiserver (+ Prometheus)")
    cl_sub = cl.add_subparsers(dest="action", required=True)
    up = cl_sub.add_parser("up", help="start and leave running; prints one JSON object")
    up.add_argument("--prometheus", action="store_true", help="also start Prometheus")
    up.add_argument("--backfill", metavar="TRACE", help="trace CSV to backfill as vllm histograms (implies --prometheus)")
    up.add_argument("--hours", type=float_arg(low=0.0, high=MAX_BACKFILL_HOURS, low_open=True, unit=" h"),
                    default=6.0, help="history length for --backfill (hours, default 6)")
    up.add_argument("--model-name", type=_label_value, default="demo-model", help="model_name label for --backfill")
    up.add_argument("--json", action="store_true", help="print compact JSON on one line")
    up.set_defaults(func=cluster_up)
    cl_sub.add_parser("down", help="stop what `up` started").set_defaults(func=cluster_down)
    cl_sub.add_parser("status", help="show what `up` started").set_defaults(func=cluster_status)
    tl = sub.add_parser("tools", help="binaries")
    tl_sub = tl.add_subparsers(dest="action", required=True)
    ensure = tl_sub.add_parser("ensure", help="install/build every binary")
    ensure.add_argument("--vllm", action="store_true",
                        help="install only the cached vllm==0.33.0 venv the parity tier runs (~4.6 GB download)")
    ensure.set_defaults(func=tools_ensure)
    for name in ("kubectl", "helm"):
        tool = sub.add_parser(name, help=f"run the project's {name}: kvplan-dev {name} -- ARGS")
        tool.add_argument("args", nargs=argparse.REMAINDER)
        tool.set_defaults(func=lambda a, n=name: _exec_tool(Path(getattr(_tools(), n)), a.args))
    rel = sub.add_parser("release", help="make release: image + chart to a local OCI registry, install, run",
                         add_help=False)
    rel.add_argument("args", nargs=argparse.REMAINDER)
    rel.set_defaults(func=_release)
    demo_parser = sub.add_parser("demo", help="the end-to-end demo")
    from kvplan_dev import demo

    add_arguments = getattr(demo, "add_arguments", None)  # the demo owns its options
    if callable(add_arguments):
        add_arguments(demo_parser)
    demo_parser.set_defaults(func=_demo)
    from kvplan_dev.twin import cli as twin_cli

    twin_parser = sub.add_parser("twin", help="the whole loop for real: pods running vLLM, rollouts, re-plans")
    twin_cli.add_arguments(twin_parser)
    twin_parser.set_defaults(func=twin_cli.run)
    remember_parsers(top)
    return top


def _release(args: argparse.Namespace) -> int:
    from kvplan_dev import release

    return release.main(args.args)


def _label_value(text: str) -> str:
    """A Prometheus label value we write into OpenMetrics text: printable, at most 253 characters."""
    if not text or len(text) > 253 or not text.isprintable():
        raise argparse.ArgumentTypeError(f"must be 1-253 printable characters, got {text[:40]!r}")
    return text


def _demo(args: argparse.Namespace) -> int:
    from kvplan_dev import demo

    return demo.run(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvplan-dev`` console script."""
    args, extra = parser().parse_known_args(argv)
    own: argparse.ArgumentParser = args._parser
    if extra and args.command not in ("kubectl", "helm"):
        unknown_arguments(own, extra)
    try:
        code: int = args.func(args)
    except InputError as exc:
        return report(own.prog, str(exc))
    except (BuildError, RuntimeError) as exc:
        _err(f"kvplan-dev: {exc}")
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
