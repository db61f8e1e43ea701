"""The data-driven Wasserstein radius (``RadiusPolicy(kind="drift")``, the project default).

The radius eps of a type-1 Wasserstein ball is a distance between distributions of output lengths, in tokens.
This rule sets it from the history and from how long the plan must hold, as the larger of two distances, capped
where a larger ball could no longer change the reservation:

``eps = min(eps_sat, max(floor + drift, horizon))``

- ``floor = floor_scale * S / N_eff``, the sampling term;
- ``drift = max(0, W1_side(older, newest) - drift_z * S * sqrt(1/n_new + 1/n_old))``, the observed drift;
- ``horizon = horizon_frac * mean * horizon_ratio ** horizon_power``, the horizon term;

with ``S = integral over x of sqrt(F(x) (1 - F(x))) dx`` (F the pooled empirical CDF), the spread that sets the
scale of sampling error in W1 (two N-samples of one distribution are about ``0.8 S sqrt(2 / N)`` apart).

- **Sampling floor, ``floor_scale * S / N_eff``.** What the history cannot rule out: that a few more requests
  than it shows sit somewhere else, e.g. beyond its largest value. By the "rule of three", when an event has not
  been seen in N trials its rate can still be up to 3 / N (95% upper bound), so the ball lets ``floor_scale`` = 3
  of the N observed requests be relocated across the spread S. It is ``O(1/N)``: a window of a few dozen
  requests (BurstGPT's API log) gets a radius that flips high-rho reserves to robust, a window of thousands keeps
  SAA's critical fractile at every rho. ``N_eff``: N for raw samples, Kish's ``1 / sum(w^2)`` for weighted ones,
  and the number of requests counted for histogram buckets (``Samples.observations``; Kish on the 10-20 buckets
  of a Prometheus histogram would say "10 samples" for 10,000 requests and make the floor near-saturating).
  The ``O(1/sqrt(N))`` concentration radius of Esfahani and Kuhn was tried first (``0.5 S / sqrt(N)``); it flips
  rho = 100 reserves on windows of thousands of requests where SAA is already right (rolling gm 1.027 / 1.039 /
  1.015 at shifts 1.0 / 1.5 / 2.5 against 1.024 / 1.015 / 1.028 for this floor, both before the horizon term).
- **Drift, on the exposed side.** The part of the 1-Wasserstein distance between the newest window and the pooled
  older windows that moved mass towards the costly side, less what two samples of the same distribution would
  show by chance (``drift_z`` = 6 noise scales), counted at face value. With ``cp > cw`` (an overflowing token
  costs more than an idle slot, every serving setting) only a move to *longer* outputs can hurt a reservation,
  so ``side="up"`` counts ``integral (F_older - F_newest)^+ dx``; ``side="down"`` the mirror image (``cp < cw``);
  ``side="both"`` (costs not given, or equal) the full W1. The noise allowance is the two-sided one, so the
  one-sided test is the stricter of the two. A stationary history gives zero drift; a step up in the newest window
  gives about the size of the step (a 2x rescaling of lengths with mean m moves them by m); a step *down* under
  ``cp > cw`` gives none (Azure 2023 conv: the newest quarter of the training half is 0.26 mean shorter; counting
  that as risk made the reserve robust at rho = 10 and cost 2.4x there).
- **Horizon.** The history can only show drift that has already happened; a plan also has to hold until it is
  re-made. ``horizon_ratio`` is the plan's lifetime over the span of the history it is fitted on (the operator
  passes ``spec.replan.interval / spec.prometheus.lookback``; a one-off ``kvcore reserve`` or ``kvcore plan``
  defaults to 1, "holds as long as its history"). At ratio 1 the term is the paper's ``0.15 E[xi]``, the radius
  the paper recommends for exactly that setting (fit once, serve a period as long as the training data); it falls
  as the square of the ratio, so a plan re-made every 5 minutes from 6 hours of history (ratio 1/72) gets
  ``3e-5 E[xi]`` from it: the drift term re-checks the data every interval instead. The power 2 is the smallest
  integer that keeps the rolling protocol's targets: measured on the shared traces (rolling, re-plan every quarter
  of the history window), power 1 gives gm 1.099 / 1.074 / 1.029 at shifts 1.0 / 1.5 / 2.5, power 2 gives
  1.026 / 1.023 / 1.029 and power 3 1.024 / 1.015 / 1.028; the split protocol is the same for all three.
  ``max`` rather than a sum: floor + drift and the horizon term both estimate how far the served distribution may
  be from the history; adding them would count one shift twice (the sum measured 1.336 against 1.262 in split at
  shift 1.0).
- **Saturation cap.** A ball of radius ``eps_sat = max(mean, L_max - mean)`` already contains both point masses
  at 0 and at L_max, so its worst case is the worst case over every distribution on [0, L_max] and the DRO
  reserve is the fully robust ``cp L_max / (cp + cw)``; a larger eps cannot change anything, so eps never
  exceeds it.

Why this shape: with support [0, L_max], 1-Wasserstein DRO is nearly bang-bang in eps. Its optimum has gamma in
{0, min(cp, cw), max(cp, cw)}, so the reserve is SAA's critical fractile until eps crosses a threshold that falls
like ``1 / rho``, then jumps close to L_max. A radius that is a fixed fraction of the mean (the paper's
0.15 E[xi]) crosses that threshold at high rho on every trace and over-reserves in distribution when the plan is
re-made often; a radius that is only as large as what the data cannot rule out (thin history, observed drift, a
long time until the next look) stays at SAA when the evidence is fresh and goes robust when it is thin, moving or
about to go stale.

Pure numpy; no I/O. :func:`drift_radius` returns every number it used, and its ``reason`` says which term won.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from kvcore.history.samples import FloatArray, History, Samples

DEFAULT_FLOOR_SCALE = 3.0
"""How many of the N observed requests the ball may relocate across the spread S (floor = count x S / N_eff).
Dimensionless. 3: the rule of three (95% upper bound on the rate of an event not seen in N trials is 3 / N). On the
shared traces under the rolling protocol 2, 3 and 4 give gm within 0.01 of each other; 3 is the statistical value,
not a fitted one."""

DEFAULT_DRIFT_Z = 6.0
"""How many noise scales S sqrt(1/n_new + 1/n_old) of window-to-window distance are attributed to chance before
the rest counts as drift. Dimensionless. Two independent samples of one distribution sit about 0.8 scales apart;
a 2x step over a few hundred requests sits about 15 scales apart (a 1.5x step about 6). Measured on the shared
traces under the rolling protocol, before the horizon term existed (gm against the five baselines at shifts
1.0 / 1.5 / 2.5): z = 4 gave 1.034 / 1.023 / 1.032, z = 6 1.024 / 1.015 / 1.028, z = 8 1.022 / 1.015 / 1.028;
the split protocol did not move. 6 keeps a 1.5x step in windows of a few hundred requests at the edge of
detection rather than past it."""


DEFAULT_HORIZON_FRAC = 0.15
"""The horizon term at horizon ratio 1, as a fraction of the pooled mean output length (dimensionless): the paper's
eps = 0.15 E[xi], recommended for a plan fitted once and used for a period as long as its training data."""

DEFAULT_HORIZON_POWER = 2.0
"""How fast the horizon term falls with the ratio plan lifetime / history span (dimensionless exponent). 2: the
smallest integer that keeps the rolling protocol within its targets (module docstring)."""

DEFAULT_HORIZON_RATIO = 1.0
"""Plan lifetime / history span when the caller does not say (dimensionless): a one-off plan is assumed to hold as
long as the history it was fitted on."""

Side = Literal["up", "down", "both"]
"""Which direction of drift counts: towards longer outputs, shorter ones, or either (module docstring)."""

Binning = Literal["open", "all", "none"]
"""Which part of the distance histogram binning can introduce (:attr:`Samples.binning`) joins the sampling floor:
the open ``+Inf`` bucket's (``open``), every bucket's (``all``) or none (docs/model.md, "Histogram buckets")."""

DEFAULT_BINNING: Binning = "open"
"""The binning term counts the open ``+Inf`` bucket only: its requests may sit anywhere up to max_model_len, far
from every sample, which is the kind of error a Wasserstein ball is for. Inside a finite bucket binning can move
a request less than the bucket's width, and the reservation at most within the bucket holding the critical
fractile; counting that (``all``: 0.4-0.5 E[xi] through vLLM's 1-2-5 buckets) crosses DRO's bang-bang threshold at
every rho >= 10 and costs more than the binning itself (docs/model.md, "Histogram buckets", measured)."""


def exposed_side(cp: float | None, cw: float | None) -> Side:
    """The side a reservation is exposed on: ``up`` when overflow costs more (``cp > cw``), ``down`` when waste
    does, ``both`` when they are equal or not given."""
    if cp is None or cw is None or cp == cw:
        return "both"
    return "up" if cp > cw else "down"


@dataclass(frozen=True)
class DriftRadius:
    """Everything the drift rule computed; lengths in output tokens.

    Attributes:
        eps: the chosen radius, ``min(cap, max(floor + drift, horizon))``.
        floor: ``floor_scale * S / n_eff``, the sampling term.
        drift: the drift term (0 when there is one window or no significant change on ``side``).
        distance: W1 between the newest window and the older ones counted on ``side`` (0 with one window).
        horizon: ``horizon_frac * mean * horizon_ratio ** horizon_power``, the horizon term.
        horizon_ratio: plan lifetime / history span the horizon term was computed for (dimensionless).
        binning: the part of the histogram-binning bound (:attr:`Samples.binning` of the pooled history, on
            ``side``) that joined the sampling floor; 0 for raw samples.
        side: which direction of drift counted.
        noise: ``S * sqrt(1/n_new + 1/n_old)``, the chance scale of ``distance``.
        cap: ``max(mean, lmax - mean)``, the saturation radius.
        spread: S, the integral of sqrt(F (1 - F)).
        n_eff: Kish effective sample size of the pooled history.
        mean: pooled mean output length.
        windows: number of windows in the history.
        reason: one line for humans (the operator puts it in the KVPlan status).
    """

    eps: float
    floor: float
    drift: float
    distance: float
    horizon: float
    horizon_ratio: float
    binning: float
    side: Side
    noise: float
    cap: float
    spread: float
    n_eff: float
    mean: float
    windows: int
    reason: str


def spread(samples: Samples) -> float:
    """``S = integral of sqrt(F(x) (1 - F(x))) dx`` over the weighted empirical CDF F, in tokens."""
    sv, sw = samples.sorted()
    if sv.size < 2:
        return 0.0
    cdf = np.clip(np.cumsum(sw)[:-1], 0.0, 1.0)
    return float(np.sum(np.sqrt(cdf * (1.0 - cdf)) * np.diff(sv)))


def wasserstein1(a: Samples, b: Samples) -> float:
    """Exact 1-Wasserstein distance between two weighted empirical distributions: ``integral |F_a - F_b| dx``."""
    return wasserstein1_side(a, b, "both")


def wasserstein1_side(older: Samples, newest: Samples, side: Side) -> float:
    """The part of W1(older, newest) that moves mass up (``integral (F_older - F_newest)^+ dx``), down
    (``integral (F_newest - F_older)^+ dx``) or either (``both``, the full W1); tokens. ``up + down = both``."""
    av, aw = older.sorted()
    bv, bw = newest.sorted()
    grid: FloatArray = np.union1d(av, bv)
    fa = np.where(grid < av[0], 0.0, np.cumsum(aw)[np.searchsorted(av, grid, side="right") - 1])
    fb = np.where(grid < bv[0], 0.0, np.cumsum(bw)[np.searchsorted(bv, grid, side="right") - 1])
    diff = (fa - fb)[:-1]
    if side == "up":
        diff = np.maximum(diff, 0.0)
    elif side == "down":
        diff = np.maximum(-diff, 0.0)
    else:
        diff = np.abs(diff)
    return float(np.sum(diff * np.diff(grid)))


def saturation_radius(samples: Samples, lmax: float) -> float:
    """``max(mean, lmax - mean)``: the smallest radius whose ball holds the point masses at 0 and at ``lmax``."""
    m = samples.mean()
    return float(max(m, lmax - m, 0.0))


def drift_radius(
    history: History,
    lmax: float,
    *,
    floor_scale: float = DEFAULT_FLOOR_SCALE,
    drift_z: float = DEFAULT_DRIFT_Z,
    side: Side = "both",
    horizon_ratio: float = DEFAULT_HORIZON_RATIO,
    horizon_frac: float = DEFAULT_HORIZON_FRAC,
    horizon_power: float = DEFAULT_HORIZON_POWER,
    binning: Binning = DEFAULT_BINNING,
) -> DriftRadius:
    """Apply the drift rule (module docstring) to ``history``; ``lmax`` in tokens bounds the support. ``binning``
    says which part of the pooled history's binning bound joins the sampling floor."""
    pooled = history.pooled()
    n_eff = pooled.effective_size()
    s = spread(pooled)
    floor = floor_scale * s / n_eff
    cap = saturation_radius(pooled, lmax)
    mean = pooled.mean()
    horizon = horizon_frac * mean * horizon_ratio**horizon_power
    binned = 0.0
    if binning != "none" and pooled.binning is not None:
        binned = pooled.binning.term(side, binning)
    distance = noise = drift = 0.0
    windows = [w for w in history.windows if len(w) > 0]
    if len(windows) >= 2:
        newest = windows[-1]
        older = History(tuple(windows[:-1])).pooled()
        distance = wasserstein1_side(older, newest, side)
        noise = s * math.sqrt(1.0 / newest.effective_size() + 1.0 / older.effective_size())
        drift = max(0.0, distance - drift_z * noise)
    data = floor + binned + drift
    eps = min(cap, max(data, horizon))
    hidden = "" if binned <= 0 else (
        f" + binning {binned:.2f} (what the {'open +Inf bucket' if binning == 'open' else 'buckets'} may hide)")
    toward = {"up": "towards longer outputs", "down": "towards shorter outputs", "both": "either way"}[side]
    if max(data, horizon) > cap:
        why = f"capped at the saturation radius max(mean, L_max - mean) = {cap:.1f} tokens"
    elif horizon > data:
        why = (
            f"horizon: the plan holds {horizon_ratio:.3g} x its history span, {horizon_frac:g} x mean x "
            f"{horizon_ratio:.3g}^{horizon_power:g} = {horizon:.2f} tokens, above sampling floor {floor:.2f}{hidden} + "
            f"drift {drift:.2f}"
        )
    elif drift > 0.0:
        why = (
            f"drift: newest window moved {distance:.1f} tokens (W1, {toward}) from the older ones, "
            f"{distance / noise:.1f} noise scales; {drift:.1f} tokens beyond {drift_z:g} scales counted, plus "
            f"sampling floor {floor:.2f}{hidden}"
        )
    elif len(windows) >= 2:
        why = (
            f"sampling floor {floor_scale:g} x spread {s:.1f} / {n_eff:.0f} samples{hidden}; no significant drift "
            f"{toward} (newest window {distance:.1f} tokens from the rest, within {drift_z:g} x {noise:.1f} noise)"
        )
    else:
        why = (f"sampling floor {floor_scale:g} x spread {s:.1f} / {n_eff:.0f} samples{hidden}; one window, drift "
               "not measured")
    reason = f"eps = {eps:.2f} tokens ({eps / mean if mean > 0 else 0.0:.3f} x mean {mean:.1f}): {why}"
    return DriftRadius(
        eps=float(eps), floor=float(floor), drift=float(drift), distance=float(distance), horizon=float(horizon),
        horizon_ratio=float(horizon_ratio), binning=float(binned), side=side, noise=float(noise), cap=float(cap),
        spread=float(s), n_eff=float(n_eff), mean=float(mean), windows=len(windows), reason=reason,
    )
