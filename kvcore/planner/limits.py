"""Sizes the planner refuses up front, before any work: named limits and a cheap estimate of memory and time.

A plan's cost grows with the number of classes C, groups K, layouts per group Z and samples. Rather than run for
hours or be killed for memory on a size it cannot handle, :func:`check_size` refuses it at once with an
:class:`~kvcore.errors.InputError` that names the limit and gives the estimate, e.g.::

    instance: too large to plan in memory: estimated memory 2.3 GiB (1,024 classes x 64 groups x 12 layouts x
    20,480,000 samples, fleet method), more than the 1.0 GiB the planner may use (kvcore.planner.limits: the
    memory limit)

**What the estimate counts** (:func:`estimate`), for the method ``plan`` will use (:mod:`.method`):

* **fleet method** (measured with ``python benchmarks/fleet.py --scaling``, docs/benchmarks.md): memory is a base
  of :data:`BASE_BYTES` (Python, numpy, scipy, HiGHS, pydantic, the instance) plus :data:`FLEET_BYTES_PER_SAMPLE`
  per sample (the samples, their sorted copy, the DRO curve's prefix sums, the dual's laid-out copy) plus
  :data:`FLEET_BYTES_PER_PAIR` per (class, group) pair (routing and prefix arrays, the plan's per-group maps, and
  the routing LP when filling runs out of KV memory); time is :data:`SETUP_SECONDS_PER_SAMPLE` per sample plus
  :data:`FLEET_SECONDS_PER_PAIR` per pair plus :data:`FLEET_BASE_SECONDS`.
* **BCD**: per sweep the z block tries ``2 K Z`` points, the admission
  block ``C`` flips and at most ``C^2 / 4`` swaps, restore and routing about ``C`` more, times :data:`SWEEPS`;
  each subproblem runs :data:`CUT_ROUNDS` LPs of ``K (2C + 1) + 2C`` nonzeros plus a fixed HiGHS call cost of
  :data:`LP_CALL_NONZEROS`; the routing block :data:`ROUTING_SWEEPS` passes of ``C K^2`` moves of
  :data:`ROUTING_MOVE_UNITS` each; one unit is :data:`SECONDS_PER_UNIT` (a HiGHS call, 10,000 units, about 1 ms).
  Checked against BCD runs (docs/benchmarks.md, "Choosing the method"). Time adds the per-sample set-up of the fleet
  method's figure; memory is the base, :data:`BYTES_PER_SAMPLE` per sample, every memoised point's flows and
  solution (``2 C K + C`` float64) and one LP's cuts.

Under ``method="auto"`` with at most :data:`~.method.BCD_MAX_CLASSES` classes the estimate is the larger of the
two (BCD at the most layouts the automatic choice lets it have), since which one runs depends on how many layouts
are feasible, which is known only after the profiles are resolved.

**The limits.** Counts (:data:`MAX_CLASSES` ...) are refused before any trace is read. Memory: the estimate must
stay within ``memory_limit`` bytes, by default :data:`DEFAULT_MEMORY_LIMIT` (the operator chart's container limit,
so a plan the operator starts cannot be killed for memory); the CLI passes what its machine can hold
(:func:`kvcore.cli.machine.memory_limit`). Time: the estimate must stay within :data:`TIME_LIMIT_SECONDS`, one
default re-plan interval of the operator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvcore.errors import InputError
from kvcore.planner.method import BCD_MAX_CLASSES, BCD_SIZE, Method, bcd_fits

if TYPE_CHECKING:
    from kvcore.planner.instance import Instance

# BCD (the hardening lane's model)
SWEEPS = 3
"""BCD sweeps assumed (measured 1-4 on the synthetic instances above; BCD stops at 50)."""
CUT_ROUNDS = 30
"""Cutting-plane LP rounds per subproblem assumed (the warm-started cut pools converge in tens; the cap is 400)."""
LP_CALL_NONZEROS = 10_000
"""The fixed cost of one HiGHS call (model update, presolve, solve set-up; about 1 ms here) in nonzero units."""
ROUTING_SWEEPS = 30
"""Passes of the routing block per BCD sweep (its cap, ``improve_routing(max_sweeps=30)``)."""
ROUTING_MOVE_UNITS = 100.0
"""One pairwise routing transfer (a few numpy operations on length-C arrays), in work units."""
SECONDS_PER_UNIT = 1e-7
"""A work unit in seconds: a HiGHS call (:data:`LP_CALL_NONZEROS` units) takes about 1 ms here."""
BYTES_PER_SAMPLE = 64
"""BCD: samples (values, weights), their sorted copy and the DRO curve's arrays: 8 float64 per sample."""
BYTES_PER_LP_NONZERO = 24
"""HiGHS keeps a value and an index per nonzero, in a row-wise and a column-wise copy."""

# The fleet method (calibrated by `python benchmarks/fleet.py --scaling`: docs/benchmarks.md, "Fleet scale")
BASE_BYTES = 136 * 1024**2
"""Peak resident memory apart from the samples and pairs, bytes: the measured peak at :data:`REFERENCE` less its
per-sample and per-pair parts, plus headroom so the estimate bounds all three supported interpreters (3.13's is the
largest): an estimate is an upper bound, since it decides what is refused."""
FLEET_BYTES_PER_SAMPLE = 110
"""Fleet method, bytes per sample: the slope of the measured peak between 512,000 and 5,120,000 samples, rounded
up."""
FLEET_BYTES_PER_PAIR = 700
"""Fleet method, bytes per (class, group): the measured slope (16,384 to 262,144 pairs) plus the routing LP's
worst case (9 nonzeros of 24 B in HiGHS's two copies, and its solution), which runs only when KV memory is short."""
SETUP_SECONDS_PER_SAMPLE = 0.3e-6
"""Either method, seconds per sample (the radius rule and the DRO curve set-up; the fleet method's dual pass too),
from the fleet method's set-up time at 5,120,000 samples, rounded up."""
FLEET_SECONDS_PER_PAIR = 6e-6
"""Fleet method, seconds per (class, group), measured at 65,536 and 262,144 pairs, rounded up."""
FLEET_BASE_SECONDS = 0.05
"""Fleet method: the price search and the HiGHS calls of a small instance."""

REFERENCE = (256, 64, 12, 2_000)
"""(classes, groups, layouts per group, samples per class): the size the planner is tuned for (the CRD's caps)."""
DEFAULT_MEMORY_LIMIT = 1024**3
"""Bytes a plan may use when the caller does not say: the operator chart's container limit
(``resources.limits.memory: 1Gi``), which the reference size's 166-174 MiB keeps well inside."""
TIME_LIMIT_SECONDS = 300.0
"""Estimated seconds a plan may take: one default re-plan interval of the operator (5 minutes)."""

MAX_CLASSES = 1024
"""Request classes (4x the reference's 256; the CRD allows 64)."""
MAX_GROUPS = 256
"""Groups (4x the reference's 64; the CRD allows 16)."""
MAX_LAYOUTS = 64
"""Layouts of one group (the CRD allows 32; kvcore's synthetic instances use up to 12)."""
MAX_SAMPLES_PER_CLASS = 5_000_000
"""Samples of one class (the exact DRO solver takes about 1 ms at 100,000; 5 million samples are 550 MB)."""
MAX_SAMPLES = 50_000_000
"""Samples over all classes (5.5 GB at :data:`FLEET_BYTES_PER_SAMPLE`; the memory limit usually binds first)."""


@dataclass(frozen=True)
class PlanSize:
    """What the planner's cost depends on: classes, groups, the most layouts of one group, and samples (the
    largest class's and the total)."""

    classes: int
    groups: int
    layouts: int
    samples_per_class: int
    samples: int


@dataclass(frozen=True)
class Estimate:
    """Order-of-magnitude cost of one ``plan()``: peak memory in bytes, time in seconds on the development machine,
    and the method it was estimated for."""

    memory_bytes: float
    seconds: float
    method: str


def _bcd(size: PlanSize, layouts_total: float) -> Estimate:
    c, k = float(size.classes), float(size.groups)
    subproblems = SWEEPS * (2 * layouts_total + 2 * c + c * c / 4)
    nonzeros = k * (2 * c + 1) + 2 * c
    work = subproblems * CUT_ROUNDS * (nonzeros + LP_CALL_NONZEROS)
    work += SWEEPS * ROUTING_SWEEPS * c * k * k * ROUTING_MOVE_UNITS
    memory = (BASE_BYTES + BYTES_PER_SAMPLE * float(size.samples) + subproblems * 8 * (2 * c * k + c)
              + CUT_ROUNDS * nonzeros * BYTES_PER_LP_NONZERO)
    return Estimate(memory, work * SECONDS_PER_UNIT + SETUP_SECONDS_PER_SAMPLE * float(size.samples), "bcd")


def _fleet(size: PlanSize) -> Estimate:
    pairs = float(size.classes) * float(size.groups)
    memory = BASE_BYTES + FLEET_BYTES_PER_SAMPLE * float(size.samples) + FLEET_BYTES_PER_PAIR * pairs
    seconds = FLEET_BASE_SECONDS + SETUP_SECONDS_PER_SAMPLE * float(size.samples) + FLEET_SECONDS_PER_PAIR * pairs
    return Estimate(memory, seconds, "fleet")


def estimate(size: PlanSize, method: Method = "auto") -> Estimate:
    """The estimate of the module docstring (cheap: a few multiplications)."""
    layouts_total = float(size.groups) * float(size.layouts)
    if method == "bcd":
        return _bcd(size, layouts_total)
    if method == "fleet":
        return _fleet(size)
    if bcd_fits(size.classes, size.groups, size.groups * size.layouts):
        return _bcd(size, layouts_total)
    fleet = _fleet(size)
    if size.classes > BCD_MAX_CLASSES:
        return fleet
    bcd = _bcd(size, min(layouts_total, BCD_SIZE / max(1, size.classes * size.groups)))
    return Estimate(max(bcd.memory_bytes, fleet.memory_bytes), max(bcd.seconds, fleet.seconds), "bcd or fleet")


def size_of(instance: Instance) -> PlanSize:
    """The :class:`PlanSize` of an instance (samples counted over every history window)."""
    per_class = [sum(len(w) for w in c.history.windows) for c in instance.classes]
    return PlanSize(classes=len(instance.classes), groups=len(instance.groups),
                    layouts=max((len(g.layouts) for g in instance.groups), default=0),
                    samples_per_class=max(per_class, default=0), samples=sum(per_class))


def reference_estimate() -> Estimate:
    """The estimate at :data:`REFERENCE`."""
    c, k, z, n = REFERENCE
    return estimate(PlanSize(c, k, z, n, c * n))


def format_bytes(value: float) -> str:
    for unit, scale in (("TiB", 1024.0**4), ("GiB", 1024.0**3), ("MiB", 1024.0**2)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value / 1024:.0f} KiB"


def describe(size: PlanSize, method: Method = "auto") -> str:
    """``estimated memory M, time T s (C classes x K groups x Z layouts x N samples, method)`` for messages."""
    est = estimate(size, method)
    return (f"estimated memory {format_bytes(est.memory_bytes)}, time {est.seconds:,.3g} s ({size.classes:,} classes "
            f"x {size.groups:,} groups x {size.layouts:,} layouts x {size.samples:,} samples, {est.method})")


def check_counts(classes: int, groups: int, layouts: int) -> None:
    """Refuse too many classes, groups or layouts; cheap enough to run before any samples are read."""
    size = PlanSize(classes, groups, layouts, 0, 0)
    for field, count, limit, name, what in (
        ("classes", classes, MAX_CLASSES, "MAX_CLASSES", "classes"),
        ("groups", groups, MAX_GROUPS, "MAX_GROUPS", "groups"),
        ("groups.layouts", layouts, MAX_LAYOUTS, "MAX_LAYOUTS", "layouts in one group"),
    ):
        if count > limit:
            raise InputError(field, f"{count} {what} is more than the planner's limit of {limit} "
                                    f"(kvcore.planner.limits.{name}); {describe(size)}")


def check_size(size: PlanSize, *, method: Method = "auto", memory_limit: float | None = None) -> None:
    """Refuse a size past any limit of this module, naming the limit and giving the estimate. ``memory_limit``
    (bytes; default :data:`DEFAULT_MEMORY_LIMIT`) is what the planner may use on this machine."""
    check_counts(size.classes, size.groups, size.layouts)
    for field, count, limit, name in (
        ("classes.samples", size.samples_per_class, MAX_SAMPLES_PER_CLASS, "MAX_SAMPLES_PER_CLASS"),
        ("classes.samples", size.samples, MAX_SAMPLES, "MAX_SAMPLES"),
    ):
        if count > limit:
            raise InputError(field, f"{count:,} samples is more than the planner's limit of {limit:,} "
                                    f"(kvcore.planner.limits.{name}); {describe(size, method)}")
    est = estimate(size, method)
    budget = DEFAULT_MEMORY_LIMIT if memory_limit is None else float(memory_limit)
    if est.memory_bytes > budget:
        raise InputError("instance", f"too large to plan in memory: {describe(size, method)}, more than the "
                                     f"{format_bytes(budget)} the planner may use here (kvcore.planner.limits: "
                                     f"{'DEFAULT_MEMORY_LIMIT' if memory_limit is None else 'memory_limit'})")
    if est.seconds > TIME_LIMIT_SECONDS:
        raise InputError("instance", f"too large to plan in reasonable time: {describe(size, method)}, more than "
                                     f"{TIME_LIMIT_SECONDS:g} s (kvcore.planner.limits.TIME_LIMIT_SECONDS)")
