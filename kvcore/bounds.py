"""The largest magnitudes kvcore accepts for its inputs, in one place.

Every number a user gives is finite and bounded, so that the products and sums the models form stay far inside
float64 (about 1.8e308): the largest product of inputs, a cost per token x a length x a rate x a time,
is at most 1e12 x 1e9 x 1e9 x 1e11 = 1e41. Inputs past a bound are refused with an
:class:`~kvcore.errors.InputError` naming the field and the bound, never carried into a solver as inf or NaN.
Each bound sits orders of magnitude above anything a real fleet produces, so none of them is ever a cap on
real input; they exist to turn 1e308 into a message instead of an overflow.
"""

from __future__ import annotations

MAX_TOKENS = 1e9
"""Lengths in tokens (output and prompt lengths, L_max, prefixes, the radius eps): 100x the longest context of
any model served in 2026 (about 1e7 tokens)."""

MAX_KV_TOKENS = 1e12
"""KV capacity of one replica, tokens: 1e12 tokens at 100 bytes each would be 100 TB of KV cache per replica."""

MAX_RATE = 1e9
"""Arrival rates, requests/s (and throughputs, tokens/s, use :data:`MAX_TOKENS_PER_S`): no fleet serves 1e9
requests per second."""

MAX_TOKENS_PER_S = 1e12
"""Throughput of one replica, tokens/s."""

MAX_COST = 1e12
"""Cost weights (cp, cw, kappa, c_slo, c_rej), in their cost units: the ratios that matter (cp/cw, c_rej/cw) are
at most 1e6 in any sane model (see :data:`kvcore.planner.slo.RHO_MAX`), so 1e12 leaves room for any choice of unit."""

MAX_SECONDS = 1e11
"""Times in seconds (trace arrival times, profile step times): 1e11 s is about 3,000 years; Unix time now is 1.8e9
s (a trace in milliseconds, 1.8e12, is refused rather than read as seconds)."""

MAX_WEIGHT = 1e15
"""Sample weights and histogram counts: 1e15 requests is 30 years at a million requests per second."""

MAX_CONTEXT_S_PER_TOKEN = 1e-3
"""A step's seconds per token of context (the KV read of one token): 1 ms per token is a thousand times any GPU's
KV read (tens of ns per token); past it the number is not a read time."""

MAX_RATIO = 1e3
"""Dimensionless multipliers given by users: output-length shifts, radius fractions, horizon ratios (a plan held
1,000 times as long as its history, or a radius 1,000 times the mean, is already saturated)."""

MAX_POWER = 10.0
"""Exponents given by users (the radius rule's horizon power): MAX_RATIO ** MAX_POWER = 1e30 stays finite."""

MAX_COUNT = 1_000_000
"""Integer counts of physical things (GPUs in a group, GPUs per node, TP and PP sizes): a million GPUs in one
node pool is beyond any cluster."""

MAX_SEED = 2**63 - 1
"""Largest random seed accepted (numpy takes any non-negative integer; a signed 64-bit one is what users type)."""
