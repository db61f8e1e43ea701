"""What each part of the default radius rule buys: the rule with one choice changed at a time, on the shared traces.

    python benchmarks/radius_ablation.py [--traces DIR] [--json]

Variants of :func:`kvcore.reservation.radius_drift.drift_radius` (the project default, ``RadiusPolicy(kind="drift")``):

- ``default``: eps = min(cap, max(floor + drift towards the costly side, 0.15 E[xi] h^2));
- ``p=1`` / ``p=3``: the horizon term's power (h = plan lifetime / history span);
- ``no horizon``: h = 0 (the data terms alone);
- ``two-sided drift``: drift counted in both directions (the full W1 between newest and older windows);
- ``sum``: floor + drift + horizon instead of the max;
- ``scale mixture S``: instead of the horizon term, the reserve is at least the critical fractile of the history
  rescaled log-uniformly over [1, S^(h^2)] (9 scales, capped at L_max): an ambiguity over multiplicative
  rescaling, averaged rather than worst-case, aiming between SAA's fractile and the paper's near-L_max reserve;
- ``paper``: eps = 0.15 E[xi] (the reference the split protocol must not lose to).

Each cell is the gm over (trace, rho in {2, 5, 10, 20, 50, 100}) of cost / the cheapest of the issue's five policies
(SAA, DRO 0.15 E, DRO 0.02 E, P95, P99) on the traces with timestamps, under the split (h = 1) and rolling (h = 1/4)
protocols of :mod:`kvcore.evaluate`, at shifts 1.0 / 1.5 / 2.5, with the worst scenario in brackets. Every number
comes from this run; ``docs/model.md`` ("Radius policy") quotes them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kvcore import run_evaluation as evaluate, ratio_cells, register_policy
from kvcore import RadiusPolicy
from kvcore import Side, drift_radius, exposed_side
from kvcore import ReservationResult, reserve
from kvcore import History, Samples
from kvcore import load_trace

REPO = Path(__file__).resolve().parent.parent
BASELINES = ("saa", "dro-paper", "dro-0.02", "p95", "p99")


def _variant(*, power: float = 2.0, side: Side | None = None, combine: str = "max",
             horizon: bool = True) -> Callable[[History, float, float, float], ReservationResult]:
    """A policy function: the drift rule's eps with one choice changed, then the exact DRO reserve at that eps."""

    def fn(history: History, rho: float, lmax: float, ratio: float) -> ReservationResult:
        d = drift_radius(history, lmax, side=side or exposed_side(rho, 1.0), horizon_ratio=ratio if horizon else 0.0,
                         horizon_power=power)
        eps = d.eps if combine == "max" else min(d.cap, d.floor + d.drift + d.horizon)
        return reserve(history, cp=rho, cw=1.0, lmax=lmax, method="dro", radius=RadiusPolicy(kind="absolute", eps=eps))

    return fn


def _scale_mixture(top: float) -> Callable[[History, float, float, float], ReservationResult]:
    """The data terms' DRO reserve, raised to the critical fractile of the history rescaled over [1, top^(h^2)]."""
    data_only = _variant(horizon=False)

    def fn(history: History, rho: float, lmax: float, ratio: float) -> ReservationResult:
        res = data_only(history, rho, lmax, ratio)
        top_h = top ** (ratio**2)
        pooled = history.pooled()
        scales = np.exp(np.linspace(0.0, np.log(top_h), 9))
        mixed = Samples.from_arrays(np.concatenate([np.minimum(pooled.values * s, lmax) for s in scales]),
                                    np.concatenate([pooled.weights] * scales.size))
        y = max(res.reserve_tokens, mixed.quantile(rho / (rho + 1.0)))
        return res.model_copy(update={"reserve_tokens": y})  # the harness scores reserve_tokens only

    return fn


VARIANTS: dict[str, Callable[[History, float, float, float], ReservationResult]] = {
    "default": _variant(),
    "p=1": _variant(power=1.0),
    "p=3": _variant(power=3.0),
    "no horizon": _variant(horizon=False),
    "two-sided drift": _variant(side="both"),
    "sum": _variant(combine="sum"),
    "scale mixture 1.5": _scale_mixture(1.5),
    "scale mixture 2": _scale_mixture(2.0),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--traces", type=Path, default=REPO / "kvcore" / "data" / "traces")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args(argv)
    paths = sorted(args.traces.glob("*.csv"))
    if not paths:
        print(f"no traces in {args.traces}", file=sys.stderr)
        return 2
    names = []
    for name, fn in VARIANTS.items():
        key = f"ablation:{name}"
        register_policy(key, f"radius ablation: {name}", fn)
        names.append(key)
    methods = (*BASELINES, *names)
    started = time.perf_counter()
    evs = []
    for p in paths:
        tr = load_trace(p)
        if not tr.has_timestamps:
            continue
        for proto in ("split", "rolling"):
            evs.append(evaluate(tr, protocol=proto, methods=methods))
            print(f"  {p.name} {proto}", file=sys.stderr, flush=True)
    cells = ratio_cells(evs, methods, reference=BASELINES)
    keys = sorted(cells, key=lambda k: (k[0] != "split", k[1]))
    rows = {"paper": "dro-paper", **{n: f"ablation:{n}" for n in VARIANTS}}
    if args.json:
        out = {label: {f"{k[0]} {k[1]:g}": {"gm": cells[k][m].gm, "worst": cells[k][m].worst} for k in keys}
               for label, m in rows.items()}
        json.dump(out, sys.stdout, indent=2)
        print()
        return 0
    print(f"radius ablation, {len(evs) // 2} traces with timestamps, {time.perf_counter() - started:.0f} s; "
          "gm of cost / best of the five baselines (worst scenario)")
    print("| variant | " + " | ".join(f"{proto} {shift:g}" for proto, shift in keys) + " |")
    print("|---|" + "---|" * len(keys))
    for label, m in rows.items():
        print(f"| {label} | " + " | ".join(f"{cells[k][m].gm:.3f} ({cells[k][m].worst:.2f})" for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
