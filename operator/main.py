"""``kvplan-operator``: run the KVPlan operator (kopf) with kopf's usual flags plus ``--metrics-port``.

Peering: without ``--standalone`` the operator joins kopf peering (``KopfPeering`` in the namespace when
``--namespace`` is given, else ``ClusterKopfPeering``; CRDs in ``crds/kopf-peering.yaml``). Only the live peer with
the highest ``--priority`` acts; kopf pauses peers of equal priority, so each replica draws a distinct random
priority unless one is given, and the others stand by until it stops sending keep-alives.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import threading


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kvplan-operator", description=__doc__.splitlines()[0])
    p.add_argument("-n", "--namespace", action="append", default=[],
                   help="watch only this namespace (repeatable); default: all namespaces (--all-namespaces)")
    p.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (cluster-wide)")
    p.add_argument("--standalone", action="store_true", help="no peering: act even if other operators run")
    p.add_argument("--peering", default="kvplan", help="peering object name (default: kvplan)")
    p.add_argument("--priority", type=int, default=None,
                   help="peering priority; default a random 1..2^30 so two replicas never tie")
    p.add_argument("--liveness", default=None, help="liveness endpoint, e.g. http://0.0.0.0:8081/healthz")
    p.add_argument("--metrics-port", type=int, default=int(os.environ.get("KVPLAN_METRICS_PORT", "8080")),
                   help="prometheus metrics port (0 disables; default 8080 or $KVPLAN_METRICS_PORT)")
    p.add_argument("--prometheus-allowed-hosts", default=os.environ.get("KVPLAN_PROMETHEUS_ALLOWED_HOSTS", ""),
                   help="comma-separated hosts (patterns like *.monitoring.svc, optional :port) a KVPlan's "
                        "spec.prometheus.url may name; empty: any host but link-local and metadata addresses (an "
                        "exact name admits those, a wildcard never) (default $KVPLAN_PROMETHEUS_ALLOWED_HOSTS)")
    p.add_argument("--prometheus-token-files", default=os.environ.get("KVPLAN_PROMETHEUS_TOKEN_FILES", ""),
                   help="comma-separated files (exact paths in the operator's pod) a KVPlan's "
                        "spec.prometheus.bearerTokenFile may name; empty: none (default "
                        "$KVPLAN_PROMETHEUS_TOKEN_FILES)")
    p.add_argument("--cycle-deadline", type=seconds, default=os.environ.get("KVPLAN_CYCLE_DEADLINE_S", "120"),
                   help="seconds one reconcile may take before it applies: past it nothing of the cycle is applied "
                        "(CycleDeadlineExceeded, the last good plan stays); 0: none (default 120 or "
                        "$KVPLAN_CYCLE_DEADLINE_S)")
    p.add_argument("--namespace-concurrency", type=count,
                   default=os.environ.get("KVPLAN_NAMESPACE_CONCURRENCY", "2"),
                   help="reconciles of one namespace in flight at once, so that one tenant's slow Prometheus "
                        "cannot take every worker (default 2 or $KVPLAN_NAMESPACE_CONCURRENCY)")
    p.add_argument("--verbose", action="store_true", help="debug logging")
    p.add_argument("--log-format", choices=sorted(LOG_FORMATS), default=os.environ.get("KVPLAN_LOG_FORMAT", "full"),
                   help="full (default: time, logger, level, message), plain (message only) or json (one JSON "
                        "object per line, with the KVPlan's namespace/name under 'object'); $KVPLAN_LOG_FORMAT")
    return p


def seconds(text: str) -> float:
    """A non-negative finite number of seconds (argparse names the flag in its error)."""
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise ValueError(text)
    return value


def count(text: str) -> int:
    """A positive integer."""
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


LOG_FORMATS = {"plain": "PLAIN", "full": "FULL", "json": "JSON"}
"""``--log-format`` choice -> kopf.LogFormat member (kopf formats the records, including its object reference)."""


def configure_logging(args: argparse.Namespace) -> None:
    """kopf's logging in the chosen format (JSON lines carry the KVPlan reference under ``object``)."""
    import kopf

    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat[LOG_FORMATS[args.log_format]],
                   log_refkey="object" if args.log_format == "json" else None)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.log_format not in LOG_FORMATS:
        parser.error(f"--log-format / $KVPLAN_LOG_FORMAT: {args.log_format!r} is not one of {sorted(LOG_FORMATS)}")
    os.environ["KVPLAN_METRICS_PORT"] = str(args.metrics_port)
    os.environ["KVPLAN_PROMETHEUS_ALLOWED_HOSTS"] = args.prometheus_allowed_hosts
    os.environ["KVPLAN_PROMETHEUS_TOKEN_FILES"] = args.prometheus_token_files
    os.environ["KVPLAN_CYCLE_DEADLINE_S"] = repr(float(args.cycle_deadline))
    os.environ["KVPLAN_NAMESPACE_CONCURRENCY"] = str(args.namespace_concurrency)
    import kopf

    from . import handlers  # registers the handlers on kopf's default registry

    from .kube import ensure_peering

    memo = kopf.Memo()
    memo.runtime = handlers.default_runtime(handlers.Config(
        metrics_port=args.metrics_port, cycle_deadline_s=float(args.cycle_deadline),
        namespace_concurrency=int(args.namespace_concurrency)))
    configure_logging(args)
    priority = args.priority if args.priority is not None else random.SystemRandom().randint(1, 2**30)
    clusterwide = args.all_namespaces or not args.namespace
    if not args.standalone:
        for line in ensure_peering(memo.runtime.deps.kube, name=args.peering, namespaces=args.namespace,
                                   clusterwide=clusterwide):
            print(f"kvplan-operator: peering {line}; priority {priority}", file=sys.stderr, flush=True)
    from . import shutdown

    memo.started = threading.Event()  # set once kopf's startup handlers ran (handlers.configure)
    asyncio.run(shutdown.run(
        kopf.operator, memo.started,
        standalone=args.standalone,
        priority=priority,
        # With a peering name kopf treats peering as mandatory and pauses every watch until a peer object is
        # seen; --standalone means no peering at all.
        peering_name=None if args.standalone else args.peering,
        liveness_endpoint=args.liveness,
        clusterwide=clusterwide,
        namespaces=[] if clusterwide else args.namespace,
        memo=memo,
    ))
    return 0


if __name__ == "__main__":
    sys.exit(main())
