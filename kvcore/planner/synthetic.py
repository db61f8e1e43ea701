"""Seeded synthetic instances for the scalability benchmark (Table III): C classes x Z configs x N samples.

Choices (documented in docs/benchmarks.md):
* **one group** (K = 1): 24 A100-80GB GPUs (so 8x4 does not fit and 4x4, 8x2 leave GPUs idle) in 8-GPU nodes serving ``llama-70b``; its first Z layouts of
  :data:`LAYOUTS` (Z <= 12; the first four are the paper's k1..k4). One group keeps routing forced, so the exact
  reference (:mod:`.exact`) is exact; the BCD code itself is general in K.
* class i draws N **real output lengths** (and its input length, the median of the drawn rows' inputs) from the
  shared traces, cycling through :data:`TRACE_FILES`; L_max = 4096 (samples are capped there, which the generator
  does explicitly, never silently: the count is in ``Instance`` metadata-free form, see ``capped``).
* rho = cp / cw cycles through {2, 5, 10, 20, 50, 100}, cw = 1; prefix = 25 % of the input; radius: the project
  default; costs are the paper's kappa 0.2 and c_rej 5000, but **c_slo = 50** (paper: 5): with 5 the queueing
  term is below 0.1 % of the objective on these instances, the r block never trades reservation against delay,
  and the gap test would only exercise layout choice.
* total arrival rate = ``load`` x (the fastest layout's service rate) / (mean work per request at the P90
  reservation), split over the classes by a Dirichlet(2) draw; ``load`` is drawn from U[0.8, 2.5] per seed
  unless given, so some instances need rejections (admission is exercised) and some layouts are unstable.
* ``groups=2`` (multi-group option, for the multi-group exact reference): a second pool of :data:`GPUS2` = 16
  A100-80GB GPUs serving the same model with the same Z layouts, so the two groups have different service rates,
  memory and configuration cost and the routing matters; the load is then relative to the sum of the two
  fastest layouts' rates. With ``groups=1`` (default) the random draws and the instance are unchanged.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from kvcore.planner.instance import ClassSpec, CostSpec, GroupSpec, Instance, Layout
from kvcore.profiles import resolve
from kvcore.history.samples import History, Samples

LAYOUTS: tuple[tuple[int, int], ...] = (
    (2, 1), (4, 1), (2, 2), (4, 2), (8, 1), (1, 2), (2, 4), (1, 4), (4, 4), (8, 2), (1, 8), (8, 4),
)
TRACE_FILES: tuple[str, ...] = (
    "azure2023_conv.csv", "burstgpt_first7d_chatgpt_conv.csv", "sharegpt_llama2tok_8k.csv",
    "azure2023_code.csv", "burstgpt_first7d_gpt4_conv.csv", "burstgpt_first7d_chatgpt_api.csv",
)
RHOS = (2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
LMAX = 4096.0
GPUS = 24
GPUS2 = 16
MODEL = "llama-70b"
#: The real traces vendored with kvcore (provenance and licences in ``kvcore/data/traces/README.md``).
TRACES_DIR = Path(__file__).resolve().parent.parent / "data" / "traces"
BUNDLED = TRACES_DIR / "azure2023_conv.csv"


def default_traces_dir() -> Path | None:
    """The vendored traces, ``kvcore/data/traces``, when the installation carries them."""
    return TRACES_DIR if TRACES_DIR.is_dir() else None


def _load(path: Path) -> npt.NDArray[np.float64]:
    data = np.genfromtxt(path, delimiter=",", skip_header=1, usecols=(1, 2), dtype=np.float64)
    return np.asarray(data[np.isfinite(data).all(axis=1)], dtype=np.float64)


def generate(classes: int, configs: int, samples: int, *, seed: int = 0, traces_dir: Path | None = None,
             load: float | None = None, c_slo: float = 50.0, groups: int = 1) -> Instance:
    """A seeded instance; see the module docstring."""
    if not 1 <= configs <= len(LAYOUTS):
        raise ValueError(f"configs must be in 1..{len(LAYOUTS)}")
    if groups not in (1, 2):
        raise ValueError("groups must be 1 or 2")
    rng = np.random.default_rng(seed)
    tdir = traces_dir if traces_dir is not None else default_traces_dir()
    files = [tdir / f for f in TRACE_FILES] if tdir is not None else []
    files = [f for f in files if f.is_file()] or [BUNDLED]
    tables = {f: _load(f) for f in files}
    specs = []
    works = []
    for i in range(classes):
        table = tables[files[i % len(files)]]
        rows = table[rng.integers(0, table.shape[0], samples)]
        out = np.minimum(rows[:, 1], LMAX)
        lin = float(np.median(rows[:, 0]))
        works.append(lin + float(np.quantile(out, 0.9)))
        rho = RHOS[i % len(RHOS)]
        specs.append(dict(name=f"c{i}", input_tokens=lin, lmax=LMAX, prefix_tokens=round(0.25 * lin), cp=rho, cw=1.0,
                          history=History.of(Samples.from_arrays(out, field=f"classes[{i}].history"))))
    layouts = LAYOUTS[:configs]
    pools = (GPUS,) if groups == 1 else (GPUS, GPUS2)
    mu_max = sum(max(resolve("A100-80GB", MODEL, tp, pp).throughput_tokens_s * (n // (tp * pp)) for tp, pp in layouts)
                 for n in pools)
    share = rng.dirichlet(np.full(classes, 2.0))
    if load is None:
        load = float(rng.uniform(0.8, 2.5))
    total = load * mu_max / float(np.dot(share, works))
    cls = [ClassSpec(arrival_rate=float(total * share[i]), **spec) for i, spec in enumerate(specs)]
    lays = tuple(Layout(tp=tp, pp=pp) for tp, pp in layouts)
    grps = tuple(GroupSpec(name="pool" if k == 0 else f"pool{k + 1}", gpu_type="A100-80GB", gpus=n, gpus_per_node=8,
                           model=MODEL, layouts=lays) for k, n in enumerate(pools))
    return Instance(classes=tuple(cls), groups=grps, costs=CostSpec(c_slo=c_slo))
