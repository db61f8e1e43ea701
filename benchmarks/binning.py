"""What histogram buckets cost: the default policy trained on bucket counts against the same policy on raw lengths.

    python benchmarks/binning.py [--traces DIR] [--quick] [--mixture LAYOUT ...]

Issue 14's yardstick: for a policy, the ratio of its cost when it is trained on per-window bucket counts
(``kvcore evaluate --observe LAYOUT``) to its cost when it is trained on the raw lengths, both measured on the raw
test outputs; geometric mean over (trace, rho), per protocol and shift. Targets for the default policy: <= 1.06
through vLLM's 1-2-5 buckets, <= 1.01 through kvplan's fine layout, at every shift under split and rolling.

It measures, in one run: the shipped configuration on every layout (with per-trace numbers), every within-bucket
model of :mod:`kvcore.history.bucket_model` (for the default policy and for SAA, the critical fractile), and the radius's
binning term (``RadiusPolicy.binning`` none / open / all, and the true distance between the model and the requests
in place of the worst case, which no rule can know). ``--mixture LAYOUT`` adds a fitted two-component lognormal
mixture per window as the within-bucket shape (binned maximum likelihood, Nelder-Mead from three starts): slow
(about 20 minutes here), so not part of ``paper_tables.py``. ``benchmarks/paper_tables.py`` embeds the rest as
section 6 of docs/results.md.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent

from kvcore import Buckets, bin_lengths  # noqa: E402
from kvcore import DEFAULT_MODEL, MODELS, Shape, bucket_samples  # noqa: E402
from kvcore import DEFAULT_RHOS, DEFAULT_SHIFTS, Evaluation, run_evaluation as evaluate, register_policy  # noqa: E402
from kvcore import request_cost  # noqa: E402
from kvcore import binned_history  # noqa: E402
from kvcore import get_policy  # noqa: E402
from kvcore import episodes_for, resolve_lmax  # noqa: E402
from kvcore import DEFAULT_RADIUS, RadiusPolicy, with_horizon  # noqa: E402
from kvcore import ReservationResult, reserve  # noqa: E402
from kvcore import wasserstein1_side  # noqa: E402
from kvcore import BinningBound, History, Samples  # noqa: E402
from kvcore import LAYOUTS  # noqa: E402
from kvcore import Trace, load_trace  # noqa: E402

LAYOUT_NAMES = ("vllm", "powers-of-4", "kvplan")
LAYOUT_LABELS = {"vllm": "vLLM 1-2-5", "powers-of-4": "powers of 4", "kvplan": "kvplan fine (<= 10 %)"}
TARGETS = {"vllm": 1.06, "kvplan": 1.01}
BINNING_VARIANTS = ("none", "open", "all")
Key = tuple[str, str, float, float]  # trace, protocol, shift, rho


def _default_with(binning: str) -> Callable[[History, float, float, float], ReservationResult]:
    policy = RadiusPolicy.model_validate({**DEFAULT_RADIUS.model_dump(), "binning": binning})

    def fn(history: History, rho: float, lmax: float, horizon_ratio: float) -> ReservationResult:
        return reserve(history, cp=rho, cw=1.0, lmax=lmax, method="dro", radius=with_horizon(policy, horizon_ratio))

    return fn


for _b in BINNING_VARIANTS:
    register_policy(f"default-binning-{_b}", f"the default with RadiusPolicy(binning={_b!r})", _default_with(_b))


def _costs(evs: Sequence[Evaluation]) -> dict[tuple[str, str, str], dict[Key, float]]:
    """(observe, bucket model, method) -> (trace, protocol, shift, rho) -> cost."""
    out: dict[tuple[str, str, str], dict[Key, float]] = {}
    for ev in evs:
        model = ev.bucket_model if ev.observe != "raw" else "-"
        for r in ev.rows:
            out.setdefault((ev.observe, model, r.method), {})[(r.trace, r.protocol, r.shift, r.rho)] = r.cost
    return out


def _ratios(seen: dict[Key, float], raw: dict[Key, float]) -> dict[Key, float]:
    return {k: seen[k] / raw[k] if raw[k] > 0 else 1.0 for k in seen if k in raw}


def _gm(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _levels(ratios: dict[Key, float]) -> list[tuple[str, float]]:
    return sorted({(k[1], k[2]) for k in ratios}, key=lambda ps: (0 if ps[0] == "split" else 1, ps[1]))


def _cell(ratios: dict[Key, float], protocol: str, shift: float, trace: str | None = None) -> tuple[float, float]:
    v = [r for k, r in ratios.items() if k[1] == protocol and k[2] == shift and (trace is None or k[0] == trace)]
    return _gm(v), max(v)


def _row(label: str, ratios: dict[Key, float], levels: list[tuple[str, float]], trace: str | None = None) -> str:
    cells = []
    for p, s in levels:
        if not any(k[1] == p and k[2] == s and (trace is None or k[0] == trace) for k in ratios):
            cells.append("-")
            continue
        gm, worst = _cell(ratios, p, s, trace)
        cells.append(f"{gm:.3f} ({worst:.2f})")
    return f"| {label} | " + " | ".join(cells) + " |"


def _head(first: str, levels: list[tuple[str, float]]) -> str:
    return (f"| {first} | " + " | ".join(f"{p} {s:g}" for p, s in levels) + " |\n|---|"
            + "---|" * len(levels))


def _bound_row(path: Path) -> str:
    tr = load_trace(path)
    lmax = resolve_lmax(tr, None)
    history = episodes_for(tr, "split", shift=1.0, lmax=lmax)[0].history
    cells = []
    for lay in LAYOUT_NAMES:
        pooled = binned_history(history, lay, lmax=lmax).pooled()
        assert pooled.binning is not None
        mean = pooled.mean()
        cells.append(f"{pooled.binning.up / mean:.3f} / {pooled.binning.open_up / mean:.4f}")
    return f"| {path.stem} | " + " | ".join(cells) + " |"


def run(paths: Sequence[Path], *, rhos: Sequence[float] = DEFAULT_RHOS,
        shifts: Sequence[float] = DEFAULT_SHIFTS) -> dict[tuple[str, str, str], dict[Key, float]]:
    """Every evaluation this benchmark needs, as costs keyed like :func:`_costs`."""
    shipped = ["default", "saa", *(f"default-binning-{b}" for b in BINNING_VARIANTS)]
    evs: list[Evaluation] = []
    for p in paths:
        tr = load_trace(p)
        for proto in ("split", "rolling"):
            if proto == "rolling" and not tr.has_timestamps:
                continue
            t0 = time.perf_counter()
            evs.append(evaluate(tr, protocol=proto, rhos=rhos, shifts=shifts, methods=["default", "saa"]))
            for layout in LAYOUT_NAMES:
                for model in MODELS:
                    methods = shipped if model == DEFAULT_MODEL else ["default", "saa"]
                    evs.append(evaluate(tr, protocol=proto, rhos=rhos, shifts=shifts, methods=methods,
                                        observe=layout, bucket_model=model))
            print(f"  {p.name} {proto}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return _costs(evs)


def markdown(costs: dict[tuple[str, str, str], dict[Key, float]], paths: Sequence[Path], *,
             rhos: Sequence[float] = DEFAULT_RHOS, shifts: Sequence[float] = DEFAULT_SHIFTS) -> str:
    """Section 5 of docs/results.md from :func:`run`'s costs (and the true-distance replay on ``paths``)."""
    raw = {m: costs[("raw", "-", m)] for m in ("default", "saa")}
    shipped = {lay: _ratios(costs[(lay, DEFAULT_MODEL, "default")], raw["default"]) for lay in LAYOUT_NAMES}
    levels = _levels(shipped["vllm"])
    traces = sorted({k[0] for k in shipped["vllm"]})
    out = ["Cell: gm over (trace, rho in {2, 5, 10, 20, 50, 100}) of (cost trained on the layout's bucket counts) / "
           "(cost trained on raw lengths), and in brackets the worst single (trace, rho). Costs on the raw test "
           f"outputs. Shipped: within-bucket model `{DEFAULT_MODEL}`, radius `binning="
           f"'{DEFAULT_RADIUS.binning}'`.", "", "**Default policy, shipped configuration:**", "",
           _head("layout observed", levels)]
    out += [_row(LAYOUT_LABELS[lay], shipped[lay], levels) for lay in LAYOUT_NAMES]
    out += ["", "Issue 14 targets, measured:", ""]
    for lay, target in TARGETS.items():
        cells = [(p, s, *_cell(shipped[lay], p, s)) for p, s in levels]
        ok = all(gm <= target for _p, _s, gm, _w in cells)
        out.append(f"- {LAYOUT_LABELS[lay]}: gm <= {target:g} at every shift, split and rolling: **"
                   + ("met" if ok else "not met") + "** (" + ", ".join(f"{p} {s:g}: {gm:.3f}"
                                                                       for p, s, gm, _w in cells) + ").")
    out += ["", "Size of the binning bound (`kvcore/history/bucket_bound.py`) on each trace's split training half (four "
            "windows, pooled), as a fraction of its mean output: every bucket's / the open +Inf bucket's, on the "
            "side that overflows a reservation (up):", "", "| trace | " + " | ".join(LAYOUT_LABELS[lay] for lay in
                                                                                 LAYOUT_NAMES) + " |",
            "|---|" + "---|" * len(LAYOUT_NAMES)]
    out += [_bound_row(p) for p in paths]
    for lay in LAYOUT_NAMES:
        out += ["", f"Per trace, {LAYOUT_LABELS[lay]} (gm over rho, worst rho in brackets):", "",
                _head("trace", levels)]
        out += [_row(Path(t).stem, shipped[lay], levels, trace=t) for t in traces]
    for method, label in (("default", "default policy"), ("saa", "SAA (the critical fractile, eps = 0)")):
        out += ["", f"**Within-bucket models, {label}** (radius binning term as shipped):", "",
                _head("layout / model", levels)]
        for lay in LAYOUT_NAMES:
            for model in MODELS:
                mark = " (shipped)" if model == DEFAULT_MODEL else ""
                out.append(_row(f"{lay} / {model}{mark}", _ratios(costs[(lay, model, method)], raw[method]), levels))
    out += ["", f"**The radius's binning term** (model `{DEFAULT_MODEL}`, default policy; `open`: the open +Inf "
            "bucket's bound; `all`: every bucket's; docs/model.md, \"Histogram buckets\"):", "",
            _head("layout / binning term", levels)]
    for lay in LAYOUT_NAMES:
        for b in BINNING_VARIANTS:
            mark = " (shipped)" if b == DEFAULT_RADIUS.binning else ""
            out.append(_row(f"{lay} / {b}{mark}", _ratios(costs[(lay, DEFAULT_MODEL, f"default-binning-{b}")],
                                                          raw["default"]), levels))
        if lay in TARGETS:
            true = replay_ratios(paths, lay, true_distance_window, method="default-binning-all", rhos=rhos,
                                 shifts=shifts)
            out.append(_row(f"{lay} / true distance (oracle)", true, levels))
    return "\n".join(out)


# ---- the slow candidate: a fitted lognormal mixture as the within-bucket shape ---------------------------------


def lognormal_mixture_shape(b: Buckets, components: int = 2) -> Shape:
    """A ``components``-lognormal mixture fitted to the bucket counts by binned maximum likelihood (Nelder-Mead
    from three starts), returned as a shape (its CDF); :func:`kvcore.history.bucket_model.bucket_samples` keeps each
    bucket's count and takes only the shape inside buckets from it."""
    from scipy import optimize, stats

    k = components
    keep = b.counts > 0
    n, lo, hi = b.counts[keep], b.lower[keep], b.upper[keep]
    llo = np.where(lo > 0, np.log(np.maximum(lo, 1e-9)), -np.inf)
    lhi = np.log(np.maximum(hi, 1e-9))
    centre = float(np.sum(n * (np.where(np.isfinite(llo), llo, lhi - 1.0) + lhi) / 2.0) / n.sum())

    def unpack(th: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a = np.exp(np.concatenate(([0.0], th[2 * k:])))
        return th[:k], np.exp(th[k:2 * k]), a / a.sum()

    def nll(th: np.ndarray) -> float:
        mu, sig, a = unpack(th)
        p = sum(a[j] * (stats.norm.cdf((lhi - mu[j]) / sig[j]) - stats.norm.cdf((llo - mu[j]) / sig[j]))
                for j in range(k))
        return -float(np.sum(n * np.log(np.maximum(p, 1e-300))))

    best = None
    for spread_ in (0.5, 1.0, 1.5):
        th0 = np.concatenate((centre + spread_ * np.linspace(-1, 1, k), np.zeros(k), np.zeros(k - 1)))
        res = optimize.minimize(nll, th0, method="Nelder-Mead", options={"maxiter": 2000, "xatol": 1e-4,
                                                                          "fatol": 1e-6})
        if best is None or res.fun < best.fun:
            best = res
    assert best is not None
    mu, sig, a = unpack(best.x)

    def g(x: np.ndarray) -> np.ndarray:
        lx = np.log(np.maximum(x, 1e-9))
        return np.asarray(sum(a[j] * stats.norm.cdf((lx - mu[j]) / sig[j]) for j in range(k)), dtype=np.float64)

    return g


def replay_ratios(paths: Sequence[Path], layout: str, window: Callable[[np.ndarray, Buckets], Samples], *,
                  method: str = "default", rhos: Sequence[float] = DEFAULT_RHOS,
                  shifts: Sequence[float] = DEFAULT_SHIFTS, label: str = "") -> dict[Key, float]:
    """Cost ratio of ``method`` trained on ``window(raw lengths, their buckets)`` for every history window, over
    ``method`` trained on the raw lengths; the harness's protocols and costs, for readings ``evaluate`` has no
    name for (a fitted mixture, the true distance)."""
    fn = get_policy(method).fn
    out: dict[Key, float] = {}
    for p in paths:
        tr: Trace = load_trace(p)
        lmax = resolve_lmax(tr, None)
        bounds = LAYOUTS[layout](int(lmax))
        done: dict[bytes, Samples] = {}  # windows repeat across shift levels (split; rolling before the shift)

        def read(raw: np.ndarray) -> Samples:
            key = raw.tobytes()
            if key not in done:
                done[key] = window(raw, bin_lengths(raw, bounds, max_model_len=lmax))
            return done[key]

        for proto in ("split", "rolling"):
            if proto == "rolling" and not tr.has_timestamps:
                continue
            for shift in shifts:
                eps = episodes_for(tr, proto, shift=shift, lmax=lmax)
                seen: dict[int, History] = {}
                for ep in eps:
                    if id(ep.history) not in seen:
                        seen[id(ep.history)] = History(tuple(read(w.values) for w in ep.history.windows))
                for rho in rhos:
                    cost = {"raw": 0.0, "seen": 0.0}
                    for ep in eps:
                        for name, h in (("raw", ep.history), ("seen", seen[id(ep.history)])):
                            base = get_policy("default").fn if name == "raw" else fn
                            y = float(base(h, rho, lmax, ep.horizon_ratio).reserve_tokens)
                            cost[name] += float(request_cost(y, ep.test_outputs, rho).sum())
                    out[(p.name, proto, shift, rho)] = cost["seen"] / cost["raw"] if cost["raw"] > 0 else 1.0
        if label:
            print(f"  {label} {layout} {p.name}", file=sys.stderr, flush=True)
    return out


def mixture_window(raw: np.ndarray, b: Buckets) -> Samples:
    """The fitted lognormal mixture as the within-bucket shape."""
    return bucket_samples(b, shape_fn=lognormal_mixture_shape(b))


def true_distance_window(raw: np.ndarray, b: Buckets) -> Samples:
    """The shipped model's samples, with the binning bound replaced by the *true* distances to the requests they
    stand for (W1 and its one-sided parts): what no rule can know, so with ``binning='all'`` it shows the least any
    radius that contains the binning error must add."""
    s = bucket_samples(b)
    requests = Samples.from_arrays(raw)
    up, down = wasserstein1_side(s, requests, "up"), wasserstein1_side(s, requests, "down")
    true = BinningBound(up=up, down=down, both=up + down)
    return Samples.from_arrays(s.values, s.weights, observations=s.observations, binning=true)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--traces", type=Path, default=REPO / "kvcore" / "data" / "traces")
    ap.add_argument("--quick", action="store_true", help="smoke test: rho 2,100 and shifts 1,2.5")
    ap.add_argument("--mixture", nargs="*", default=[], choices=LAYOUT_NAMES,
                    help="also the fitted lognormal mixture through these layouts (slow)")
    args = ap.parse_args(argv)
    paths = sorted(args.traces.glob("*.csv"))
    if not paths:
        print(f"no traces in {args.traces}", file=sys.stderr)
        return 2
    rhos = (2.0, 100.0) if args.quick else DEFAULT_RHOS
    shifts = (1.0, 2.5) if args.quick else DEFAULT_SHIFTS
    t0 = time.perf_counter()
    print(markdown(run(paths, rhos=rhos, shifts=shifts), paths, rhos=rhos, shifts=shifts))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    for layout in args.mixture:
        r = replay_ratios(paths, layout, mixture_window, rhos=rhos, shifts=shifts, label="mixture")
        levels = _levels(r)
        print("\n" + _head("layout / model", levels))
        print(_row(f"{layout} / lognormal mixture (fitted)", r, levels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
