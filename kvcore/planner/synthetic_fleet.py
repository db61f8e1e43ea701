"""Seeded multi-group fleet instances for ``kvcore bench fleet``: C classes x K groups x Z layouts x N samples.

What a multi-tenant fleet looks like, and how each part is drawn (``numpy.random.default_rng(seed)``, nothing
global; the same arguments give the same instance):

* **Groups** are node pools x models: each is one of four pool kinds, drawn with the probabilities of
  :data:`POOL_KINDS` — A100-80GB or A100-40GB nodes of 8 GPUs serving ``llama-70b`` or ``llama-8b``. A pool has a
  whole number of nodes from :data:`NODES` (8 to 64 GPUs; real pools are sized in nodes). Every group allows the
  first Z layouts of :data:`LAYOUTS`; a layout whose weights do not fit (``llama-70b`` below 4 GPUs per replica on
  A100-40GB, and at TP = PP = 1 on A100-80GB) is infeasible there, as it would be on the hardware.
* **Classes** are tenants x applications. Class i takes N consecutive requests of one vendored real trace
  (:data:`TRACE_FILES`, chosen at random) starting at a random row (wrapping at the end), so two classes from the
  same trace see different stretches of it. Its input length is the median input of those rows; its prefix (the
  shared system prompt) is a U[0, 0.8] fraction of the input; its L_max is the smallest of :data:`LMAXES` that
  holds the trace's P99 output, and longer samples are **capped** at L_max (counted in :func:`capped_samples`);
  rho = cp/cw is drawn from :data:`RHOS` with cw = 1. Arrival-rate shares are lognormal (sigma 1): a few big
  tenants and a long tail.
* **Load**: the total rate is ``load`` x the fleet's usable capacity (max_utilisation x the sum over groups of the
  fastest layout's service rate, tokens/s) / the rate-weighted mean work per request at the critical-fractile
  reservation with the prefix cached (input - prefix + the rho/(rho+1) quantile of the outputs, tokens). ``load``
  is drawn from U[0.8, 1.1] per seed unless given: a busy fleet, at times over-subscribed, where work is priced and
  reservations, layouts and routing trade against each other (at 0.5 nothing binds and every class simply gets its
  own best reservation).
* **Costs**: the project defaults (:class:`~kvcore.planner.instance.CostSpec`: kappa 0.2, c_slo 5, c_rej 5000) unless
  ``c_slo`` is given. **Radius**: the default drift rule with the operator's default horizon ratio (re-plan
  interval 5 min over a 6 h lookback, 1/72), as the operator would plan this fleet.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kvcore.planner.instance import ClassSpec, CostSpec, GroupSpec, Instance, Layout
from kvcore.profiles import resolve
from kvcore.reservation.radius import DEFAULT_RADIUS, with_horizon
from kvcore.history.samples import History, Samples
from kvcore.planner.synthetic import TRACES_DIR

FloatArray = npt.NDArray[np.float64]

LAYOUTS: tuple[tuple[int, int], ...] = (
    (1, 1), (2, 1), (4, 1), (8, 1), (2, 2), (4, 2), (1, 2), (2, 4), (1, 4), (8, 2), (4, 4), (1, 8),
)
"""Candidate (TP, PP) layouts; a group allows the first Z."""
POOL_KINDS: tuple[tuple[str, str, float], ...] = (
    ("A100-80GB", "llama-70b", 0.35), ("A100-80GB", "llama-8b", 0.15),
    ("A100-40GB", "llama-70b", 0.25), ("A100-40GB", "llama-8b", 0.25),
)
"""(GPU type, model, probability) of a pool."""
NODES: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
"""Nodes per pool (8 GPUs each)."""
GPUS_PER_NODE = 8
TRACE_FILES: tuple[str, ...] = (
    "azure2023_conv.csv", "azure2023_code.csv", "burstgpt_first7d_chatgpt_conv.csv",
    "burstgpt_first7d_gpt4_conv.csv", "burstgpt_first7d_chatgpt_api.csv", "sharegpt_llama2tok_8k.csv",
)
LMAXES: tuple[float, ...] = (2048.0, 4096.0, 8192.0)
RHOS: tuple[float, ...] = (2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
HORIZON_RATIO = 5.0 / 360.0
"""The operator's default horizon ratio: re-plan interval (5 min) / Prometheus lookback (6 h)."""
LOAD_RANGE = (0.8, 1.1)


@lru_cache(maxsize=16)
def _table(path: Path) -> FloatArray:
    data = np.genfromtxt(path, delimiter=",", skip_header=1, usecols=(1, 2), dtype=np.float64)
    table = np.asarray(data[np.isfinite(data).all(axis=1)], dtype=np.float64)
    table.setflags(write=False)
    return table


def _lmax(out: FloatArray) -> float:
    p99 = float(np.quantile(out, 0.99))
    return next((v for v in LMAXES if v >= p99), LMAXES[-1])


def generate_fleet(classes: int, groups: int, configs: int, samples: int, *, seed: int = 0,
                   load: float | None = None, c_slo: float | None = None) -> Instance:
    """A seeded fleet instance; see the module docstring."""
    if classes < 1 or groups < 1 or samples < 1:
        raise ValueError("classes, groups and samples must be >= 1")
    if not 1 <= configs <= len(LAYOUTS):
        raise ValueError(f"configs must be in 1..{len(LAYOUTS)}")
    rng = np.random.default_rng(seed)
    radius = with_horizon(DEFAULT_RADIUS, HORIZON_RATIO)
    specs = []
    works = np.empty(classes)
    for i in range(classes):
        table = _table(TRACES_DIR / TRACE_FILES[int(rng.integers(len(TRACE_FILES)))])
        start = int(rng.integers(table.shape[0]))
        rows = table[(start + np.arange(samples)) % table.shape[0]]
        lmax = _lmax(table[:, 1])
        out = np.minimum(rows[:, 1], lmax)
        lin = float(np.median(rows[:, 0]))
        prefix = float(round(rng.uniform(0.0, 0.8) * lin))
        rho = float(RHOS[int(rng.integers(len(RHOS)))])
        works[i] = lin - prefix + float(np.quantile(out, rho / (rho + 1.0), method="inverted_cdf"))
        specs.append(dict(
            name=f"c{i}", input_tokens=lin, lmax=lmax, prefix_tokens=prefix, cp=rho, cw=1.0, radius=radius,
            history=History.of(Samples.from_arrays(out, field=f"classes[{i}].history"))))
    kinds = rng.choice(len(POOL_KINDS), size=groups, p=[k[2] for k in POOL_KINDS])
    nodes = rng.choice(NODES, size=groups)
    layouts = LAYOUTS[:configs]
    lays = tuple(Layout(tp=tp, pp=pp) for tp, pp in layouts)
    grps = []
    capacity = 0.0
    for k in range(groups):
        gpu, model, _ = POOL_KINDS[int(kinds[k])]
        n = int(nodes[k]) * GPUS_PER_NODE
        grps.append(GroupSpec(name=f"g{k}-{model}-{gpu.lower()}", gpu_type=gpu, gpus=n, gpus_per_node=GPUS_PER_NODE,
                              model=model, layouts=lays))
        rates = [resolve(gpu, model, tp, pp).throughput_tokens_s * (n // (tp * pp)) for tp, pp in layouts
                 if resolve(gpu, model, tp, pp).feasible]
        capacity += max(rates, default=0.0)
    share = rng.lognormal(0.0, 1.0, classes)
    share /= share.sum()
    if load is None:
        load = float(rng.uniform(*LOAD_RANGE))
    costs = CostSpec() if c_slo is None else CostSpec(c_slo=c_slo)
    total = load * costs.max_utilisation * capacity / float(np.dot(share, works))
    cls = tuple(ClassSpec(arrival_rate=float(total * share[i]), **spec) for i, spec in enumerate(specs))
    return Instance(classes=cls, groups=tuple(grps), costs=costs)
