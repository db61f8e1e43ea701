"""``kvcore reserve``: the reservation for one class from a file of output lengths.

    kvcore reserve --samples FILE [--column output_tokens] [--weight-column W] --cp X --cw Y --lmax L
                   [--eps E | --eps-frac F | --horizon-ratio R] [--method dro|dro-lp|saa|p90|...] [--json]

``--samples`` is a trace CSV (``--column`` picks the column, default ``output_tokens``) or a file with one length
per line. ``--eps`` is an absolute radius in tokens, ``--eps-frac`` a fraction of the mean; neither means the
project default (:data:`kvcore.reservation.radius.DEFAULT_RADIUS`, the drift rule), whose horizon term ``--horizon-ratio``
sets: how long the reservation will be used, as a multiple of the time the samples span (default 1). Exit status:
0 optimal, 1 the solver did not reach a trusted optimum, 2 bad input (one line naming the field, never a
traceback).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kvcore.cli.output import format_table, print_json
from kvcore.bounds import MAX_RATIO, MAX_TOKENS, MAX_WEIGHT
from kvcore.errors import InputError
from kvcore.reservation.radius import RadiusPolicy, with_horizon
from kvcore.reservation import METHODS, SolverStatus, reserve
from kvcore.history.samples import Samples
from kvcore.history.traces import load_lengths

# Field names used by kvcore.reservation, as the flags a CLI user typed.
_FLAG_OF = {"cp": "--cp", "cw": "--cw", "lmax": "--lmax", "eps": "--eps", "samples": "--samples"}


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    p = sub.add_parser(
        "reserve",
        help="reserve output tokens for one request class (DRO, SAA or a baseline)",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    p.add_argument("--samples", required=True, metavar="FILE", help="trace CSV or one length per line")
    p.add_argument("--column", default="output_tokens", help="column of a CSV to read (default: output_tokens)")
    p.add_argument("--weight-column", default=None, metavar="W", help="optional column of sample weights")
    p.add_argument("--cp", type=float, required=True, help="cost per overflowing token (token slots), >= 0")
    p.add_argument("--cw", type=float, required=True, help="cost per unused reserved token (token slots), >= 0")
    p.add_argument("--lmax", type=float, required=True, help="maximum output length L_max, tokens")
    radius = p.add_mutually_exclusive_group()
    radius.add_argument("--eps", type=float, default=None, help="Wasserstein radius, tokens")
    radius.add_argument("--eps-frac", type=float, default=None, help="radius as a fraction of the mean length")
    radius.add_argument("--horizon-ratio", type=float, default=None, metavar="R",
                        help="default rule: how long the reservation is used / time span of the samples (default 1)")
    p.add_argument("--method", choices=METHODS, default="dro", help="dro (exact), dro-lp (HiGHS), saa, baselines")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=_run)


def _policy(args: argparse.Namespace) -> RadiusPolicy | None:
    if args.eps is not None:
        if not 0 <= args.eps <= MAX_TOKENS:
            raise InputError("--eps", f"radius must be a finite number >= 0 tokens, at most {MAX_TOKENS:g}, got "
                                      f"{args.eps}")
        return RadiusPolicy(kind="absolute", eps=args.eps)
    if args.eps_frac is not None:
        if not 0 <= args.eps_frac <= MAX_RATIO:
            raise InputError("--eps-frac", f"radius fraction must be a finite number >= 0, at most {MAX_RATIO:g}, "
                                           f"got {args.eps_frac}")
        return RadiusPolicy(kind="fraction", frac=args.eps_frac)
    if args.horizon_ratio is not None:
        if not 0 <= args.horizon_ratio <= MAX_RATIO:
            raise InputError("--horizon-ratio", f"must be a finite number >= 0, at most {MAX_RATIO:g}, got "
                                                f"{args.horizon_ratio}")
        return with_horizon(None, args.horizon_ratio)
    return None


def _run(args: argparse.Namespace) -> int:
    values = load_lengths(args.samples, args.column)
    weights = None
    if args.weight_column is not None:
        weights = load_lengths(args.samples, args.weight_column, what="weight", top=MAX_WEIGHT)
    samples = Samples.from_arrays(values, weights, field=args.column)
    try:
        result = reserve(samples, cp=args.cp, cw=args.cw, lmax=args.lmax, method=args.method, radius=_policy(args))
    except InputError as exc:
        flag = _FLAG_OF.get(exc.field)
        if flag is None:
            raise
        raise InputError(flag, exc.message, hint=exc.hint) from None
    out: dict[str, Any] = {
        "method": result.method,
        "reserve_tokens": result.reserve_tokens,
        "worst_case_cost": result.worst_case_cost,
        "expected_cost": result.expected_cost,
        "gamma": result.gamma,
        "eps": result.eps,
        "radius_rule": result.radius.rule if result.radius else None,
        "radius_reason": result.radius.reason if result.radius else None,
        "status": result.status.value,
        "raw_status": result.raw_status,
        "solve_seconds": result.solve_seconds,
        "samples": len(samples),
        "cp": args.cp,
        "cw": args.cw,
        "lmax": args.lmax,
    }
    if result.detail:
        out["detail"] = result.detail
    if args.json:
        # Pass the stream explicitly: print_json's default is bound to sys.stdout at import time.
        print_json(out, stream=sys.stdout)
    else:
        print(format_table(["field", "value"], [(k, v) for k, v in out.items()]))
    return 0 if result.status is SolverStatus.OPTIMAL else 1
