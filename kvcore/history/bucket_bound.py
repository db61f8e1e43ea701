"""How far samples read from histogram buckets can be from the requests they stand for (1-Wasserstein, tokens).

Let the buckets be ``(lo_b, hi_b]`` with request shares p_b (summing to 1), let P be the requests' true length
distribution and P^ the samples a within-bucket model produced (:mod:`kvcore.history.bucket_model`). Both put exactly p_b
in every bucket, so their CDFs F and F^ agree at every bucket edge, and

    W1(P^, P) = integral |F^ - F| dx = sum_b p_b W1(P^_b, P_b)                                        [tokens]

where P_b, P^_b are the distributions inside bucket b (conditioned on it). The requests in bucket b are whole
tokens in ``[a_b, hi_b]``, with ``a_b`` = 0 for the first bucket (``le`` counts every length up to the bound,
0 included), ``lo_b + 1`` when ``lo_b`` is a whole number and ``lo_b`` otherwise (a supremum, not reached).

**Exact worst case per bucket.** W1(mu, nu) is convex in nu, and the distributions on ``[a_b, hi_b]`` form a convex
set whose extreme points are the point masses, so the largest W1 from P^_b over every P_b is reached at a point
mass delta_c: ``W1(P^_b, delta_c) = E|X^ - c|`` (X^ ~ P^_b), convex in c, hence largest at an end:

    sup_{P_b} W1(P^_b, P_b) = max(m_b - a_b, hi_b - m_b),   m_b = E[X^ | bucket b]                   [tokens]

One-sided: ``integral (F^ - F)^+`` (requests higher than the samples, the side that overflows a reservation) is
largest when F is as small as it can be on the bucket, i.e. every request at hi_b, giving
``integral_{lo_b}^{hi_b} F^_b = hi_b - m_b``; the mirror image (every request at a_b) gives ``m_b - a_b``. Each
bucket reaches its worst case independently (the integral splits at the edges), so the bounds add up:

    up = sum_b p_b (hi_b - m_b),   down = sum_b p_b (m_b - a_b),   both = sum_b p_b max(hi_b - m_b, m_b - a_b)

and each is attained by a placement of every bucket's requests at one of its ends. ``open_*`` are the open
``+Inf`` bucket's terms (closed at max_model_len): the one bucket whose requests may sit far from every sample.

Tested against ``scipy.stats.wasserstein_distance`` on synthetic requests (``tests/unit/kvcore/history/test_binned.py``). Which of
these terms the radius adds, and why, is in :mod:`kvcore.reservation.radius_drift` and docs/model.md ("Histogram buckets").
"""

from __future__ import annotations

import numpy as np

from kvcore.history.buckets import Buckets
from kvcore.history.samples import BinningBound, FloatArray


def support_floor(buckets: Buckets) -> FloatArray:
    """``a_b``: the smallest whole-token length bucket b can hold (module docstring), tokens."""
    lo = np.asarray(buckets.lower, dtype=np.float64)
    whole = np.floor(lo) == lo
    a = np.where(whole & (lo + 1.0 <= buckets.upper), lo + 1.0, lo)
    a[0] = 0.0
    return np.minimum(a, buckets.upper)


def binning_bound(buckets: Buckets, values: FloatArray, weights: FloatArray, bucket: FloatArray) -> BinningBound:
    """The exact worst-case distances (module docstring) between the samples ``values`` / ``weights`` (normalised)
    that came from ``buckets`` (``bucket`` = each sample's bucket index) and any requests with those counts."""
    n = buckets.counts.size
    idx = bucket.astype(np.int64)
    p = np.bincount(idx, weights=weights, minlength=n)
    pm = np.bincount(idx, weights=weights * values, minlength=n)
    a = support_floor(buckets)
    hi = np.asarray(buckets.upper, dtype=np.float64)
    up = np.where(p > 0, p * hi - pm, 0.0)
    down = np.where(p > 0, pm - p * a, 0.0)
    up, down = np.maximum(up, 0.0), np.maximum(down, 0.0)
    both = np.maximum(up, down)
    last = n - 1
    has_open = buckets.open_top and p[last] > 0
    return BinningBound(
        up=float(up.sum()), down=float(down.sum()), both=float(both.sum()),
        open_up=float(up[last]) if has_open else 0.0, open_down=float(down[last]) if has_open else 0.0,
        open_both=float(both[last]) if has_open else 0.0,
    )
