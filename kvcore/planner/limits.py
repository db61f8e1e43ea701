"""Sizes the planner refuses up front, before any work: named limits and a cheap estimate of memory and work.

A plan's cost grows with the number of classes C, groups K, layouts per group Z and samples. Rather than run for
hours (or exhaust memory) on a size it cannot handle, :func:`check_size` refuses it at once with an
:class:`~kvcore.errors.InputError` that names the limit and gives the estimate, e.g.::

    classes: 10000 classes is more than the planner's limit of 1024 (kvcore.planner.limits.MAX_CLASSES);
    estimated memory 2.6 TiB, work 1.9e+14 (2,600x the reference size)

**What the estimate counts** (:func:`estimate`; every constant is below, with how it was set):

* BCD subproblems (each a cutting-plane (y, delta) solve): per sweep the z block tries ``2 K Z`` points, the
  admission block ``C`` flips and at most ``C^2 / 4`` swaps (refused x admitted), restore and routing about
  ``C`` more; times :data:`SWEEPS` sweeps.
* Each subproblem runs :data:`CUT_ROUNDS` LPs with ``K (2C + 1) + 2C`` nonzeros of cuts per round, plus a fixed
  HiGHS call overhead worth :data:`LP_CALL_NONZEROS` nonzeros. Work unit: one LP nonzero handled.
* The routing block: :data:`ROUTING_SWEEPS` passes of ``C K^2`` pairwise transfers per BCD sweep, each worth
  :data:`ROUTING_MOVE_UNITS` units.
* Memory: :data:`BYTES_PER_SAMPLE` per sample, every memoised BCD point's flows and solution (``2 C K + C``
  float64), and one LP's cuts (:data:`BYTES_PER_LP_NONZERO` per nonzero).

**How the limits were set** (2026-11-30, hardening; the fleet engineer's work on issue 16 makes the planner fast
at the reference size and will recalibrate these constants against ``kvcore bench fleet``): the work and memory
limits are multiples (:data:`WORK_HEADROOM`, :data:`MEMORY_HEADROOM`) of the estimate at :data:`REFERENCE`, the
size the planner is being made fast at (256 classes x 64 groups x 12 layouts x 2,000 samples), so that size is
always allowed with headroom, whatever the constants; the count limits are 4x the reference (classes, groups),
the CRD's 32 layouts doubled, and sample counts whose memory is a few GB. The constants were checked against
today's BCD on seeded ``kvcore.planner.synthetic`` instances: 16x4x500 with 2 groups, 99 subproblems in 3 sweeps
(estimate 3 x (16 + 32 + 64) = 336, the swap term being a worst case); 64x4x300 with 2 groups, 5,973 subproblems
in 3 sweeps, 209 s CPU, 34 MB peak (estimate 3 x (16 + 128 + 1,024) = 3,504, 18 MB).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvcore.errors import InputError

if TYPE_CHECKING:
    from kvcore.instance import Instance

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
BYTES_PER_SAMPLE = 64
"""Samples (values, weights), their sorted copy and the DRO curve's arrays: 8 float64 per sample."""
BYTES_PER_LP_NONZERO = 24
"""HiGHS keeps a value and an index per nonzero, in a row-wise and a column-wise copy."""

REFERENCE = (256, 64, 12, 2_000)
"""(classes, groups, layouts per group, samples per class): the size the planner is tuned for (issue 16)."""
WORK_HEADROOM = 8.0
"""Work allowed, as a multiple of the estimate at :data:`REFERENCE`."""
MEMORY_HEADROOM = 2.0
"""Memory allowed, as a multiple of the estimate at :data:`REFERENCE`."""

MAX_CLASSES = 1024
"""Request classes (4x the reference's 256; the CRD allows 64)."""
MAX_GROUPS = 256
"""Groups (4x the reference's 64; the CRD allows 16)."""
MAX_LAYOUTS = 64
"""Layouts of one group (the CRD allows 32; kvcore's synthetic instances use up to 12)."""
MAX_SAMPLES_PER_CLASS = 5_000_000
"""Samples of one class (the exact DRO solver takes about 1 ms at 100,000; 5 million samples are 320 MB)."""
MAX_SAMPLES = 50_000_000
"""Samples over all classes (3.2 GB at :data:`BYTES_PER_SAMPLE`)."""


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
    """Order-of-magnitude cost of one ``plan()``: peak memory in bytes and work in LP-nonzero units."""

    memory_bytes: float
    work: float
    subproblems: float


def estimate(size: PlanSize) -> Estimate:
    """The estimate of the module docstring (cheap: a few multiplications)."""
    c, k, z = float(size.classes), float(size.groups), float(size.layouts)
    subproblems = SWEEPS * (2 * k * z + 2 * c + c * c / 4)
    nonzeros = k * (2 * c + 1) + 2 * c
    work = subproblems * CUT_ROUNDS * (nonzeros + LP_CALL_NONZEROS)
    work += SWEEPS * ROUTING_SWEEPS * c * k * k * ROUTING_MOVE_UNITS
    memory = (BYTES_PER_SAMPLE * float(size.samples) + subproblems * 8 * (2 * c * k + c)
              + CUT_ROUNDS * nonzeros * BYTES_PER_LP_NONZERO)
    return Estimate(memory_bytes=memory, work=work, subproblems=subproblems)


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


def _bytes(value: float) -> str:
    for unit, scale in (("TiB", 1024.0**4), ("GiB", 1024.0**3), ("MiB", 1024.0**2)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value / 1024:.0f} KiB"


def describe(size: PlanSize) -> str:
    """``estimated memory M, work W (Rx the reference size)`` for messages."""
    est, ref = estimate(size), reference_estimate()
    return (f"estimated memory {_bytes(est.memory_bytes)}, work {est.work:.2g} "
            f"({est.work / ref.work:,.2g}x the reference size {'x'.join(f'{v:,}' for v in REFERENCE)})")


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


def check_size(size: PlanSize) -> None:
    """Refuse a size past any limit of this module, naming the limit and giving the estimate."""
    check_counts(size.classes, size.groups, size.layouts)
    for field, count, limit, name in (
        ("classes.samples", size.samples_per_class, MAX_SAMPLES_PER_CLASS, "MAX_SAMPLES_PER_CLASS"),
        ("classes.samples", size.samples, MAX_SAMPLES, "MAX_SAMPLES"),
    ):
        if count > limit:
            raise InputError(field, f"{count:,} samples is more than the planner's limit of {limit:,} "
                                    f"(kvcore.planner.limits.{name}); {describe(size)}")
    est, ref = estimate(size), reference_estimate()
    if est.work > WORK_HEADROOM * ref.work:
        raise InputError("instance", f"too large to plan in reasonable time: {describe(size)}; the limit is "
                                     f"{WORK_HEADROOM:g}x (kvcore.planner.limits.WORK_HEADROOM)")
    if est.memory_bytes > MEMORY_HEADROOM * ref.memory_bytes:
        raise InputError("instance", f"too large to plan in memory: {describe(size)}; the limit is "
                                     f"{MEMORY_HEADROOM:g}x the reference's memory "
                                     f"(kvcore.planner.limits.MEMORY_HEADROOM)")
