"""Up-front size refusal (``kvcore.planner.limits``):

1. the reference size the planner is tuned for (256 classes x 64 groups x 12 layouts x 2,000 samples) and the
   paper's and the operator's sizes pass ``check_size`` within the default (operator) memory limit and the time
   limit;
2. 10,000 classes, 1,000 groups, too many layouts or samples, a size past the memory limit and BCD forced onto
   sizes it would take hours or gigabytes on are refused with the limit's name and the estimated memory in the
   message;
3. ``plan()`` refuses before any work: ``compile_problem`` (profiles, DRO curves) is never reached;
4. the estimate grows with every dimension (so a limit on it is a limit on size), and for the fleet method it
   bounds the peak memory measured by ``kvcore bench fleet`` from above, within 1.6x;
5. the CLI's machine memory is positive and at most the physical memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kvcore.cli.machine import machine_memory, memory_limit
from kvcore.errors import InputError
from kvcore.planner.instance import ClassSpec, GroupSpec, Instance, Layout
from kvcore.planner import limits
from kvcore.planner.limits import PlanSize, check_size, estimate, reference_estimate
from kvcore.history.samples import Samples

ALLOWED = [
    ("reference", PlanSize(256, 64, 12, 2_000, 256 * 2_000)),
    ("paper-table-iii", PlanSize(15, 1, 12, 2_000, 15 * 2_000)),
    ("crd-maximum", PlanSize(64, 16, 32, 20_000, 64 * 20_000)),
    ("one-class-million-samples", PlanSize(1, 1, 4, 1_000_000, 1_000_000)),
    ("max-classes-and-groups", PlanSize(1_024, 256, 12, 500, 1_024 * 500)),
]


@pytest.mark.parametrize("size", [s for _, s in ALLOWED], ids=[n for n, _ in ALLOWED])
def test_sizes_the_planner_is_for_pass(size: PlanSize) -> None:
    check_size(size)
    est = estimate(size)
    assert est.memory_bytes <= limits.DEFAULT_MEMORY_LIMIT and est.seconds <= limits.TIME_LIMIT_SECONDS


def test_the_reference_is_planned_by_the_fleet_method_well_inside_the_limits() -> None:
    ref = reference_estimate()
    assert ref.method == "fleet"
    assert ref.memory_bytes < 0.25 * limits.DEFAULT_MEMORY_LIMIT and ref.seconds < 1.0


REFUSED = [
    ("10000-classes", PlanSize(10_000, 1, 4, 100, 1_000_000), "auto", "classes", "MAX_CLASSES"),
    ("1000-groups", PlanSize(3, 1_000, 4, 100, 300), "auto", "groups", "MAX_GROUPS"),
    ("100-layouts", PlanSize(3, 1, 100, 100, 300), "auto", "groups.layouts", "MAX_LAYOUTS"),
    ("samples-per-class", PlanSize(2, 1, 4, 6_000_000, 6_000_000), "auto", "classes.samples",
     "MAX_SAMPLES_PER_CLASS"),
    ("samples-total", PlanSize(20, 1, 4, 4_000_000, 80_000_000), "auto", "classes.samples", "MAX_SAMPLES"),
    ("memory", PlanSize(1_024, 64, 12, 20_000, 1_024 * 20_000), "auto", "instance", "DEFAULT_MEMORY_LIMIT"),
    ("bcd-at-fleet-size", PlanSize(256, 64, 12, 2_000, 256 * 2_000), "bcd", "instance", "DEFAULT_MEMORY_LIMIT"),
    ("bcd-time", PlanSize(128, 8, 12, 300, 128 * 300), "bcd", "instance", "TIME_LIMIT_SECONDS"),
]


@pytest.mark.parametrize(("size", "method", "field", "limit"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_refused_with_the_limit_named(size: PlanSize, method: str, field: str, limit: str) -> None:
    with pytest.raises(InputError) as info:
        check_size(size, method=method)  # type: ignore[arg-type]
    assert info.value.field == field
    assert limit in info.value.message
    assert "estimated memory" in info.value.message and f"{size.classes:,} classes" in info.value.message


def test_memory_limit_is_the_callers() -> None:
    size = PlanSize(256, 64, 12, 20_000, 256 * 20_000)   # about 660 MiB estimated
    check_size(size)
    with pytest.raises(InputError) as info:
        check_size(size, memory_limit=512 * 1024**2)
    assert "more than the 512.0 MiB the planner may use here" in info.value.message
    assert "memory_limit" in info.value.message


def _instance(classes: int, groups: int) -> Instance:
    samples = Samples.from_arrays([10.0, 20.0])
    return Instance(
        classes=tuple(ClassSpec(name=f"c{i}", arrival_rate=0.1, input_tokens=10, lmax=100, cp=2, cw=1,
                                history=samples) for i in range(classes)),
        groups=tuple(GroupSpec(name=f"g{k}", gpu_type="A100-80GB", gpus=8, model="llama-8b",
                               layouts=(Layout(tp=1, pp=1),)) for k in range(groups)))


@pytest.mark.parametrize(("classes", "groups", "method", "field"),
                         [(2_000, 1, "auto", "classes"), (2, 1_000, "auto", "groups"),
                          (300, 64, "bcd", "instance")],
                         ids=["2000-classes", "1000-groups", "bcd-forced-on-300x64"])
def test_plan_refuses_before_any_work(monkeypatch: pytest.MonkeyPatch, classes: int, groups: int, method: str,
                                      field: str) -> None:
    import kvcore.planner as planner

    def never(*_: object) -> None:
        raise AssertionError("compile_problem ran: the size was not refused up front")

    monkeypatch.setattr(planner, "compile_problem", never)
    with pytest.raises(InputError) as info:
        planner.plan(_instance(classes, groups), method=method)  # type: ignore[arg-type]
    assert info.value.field == field


@pytest.mark.parametrize("method", ["auto", "bcd", "fleet"])
@pytest.mark.parametrize("dim", range(5), ids=["classes", "groups", "layouts", "samples-per-class", "samples"])
def test_estimate_grows_with_every_dimension(dim: int, method: str) -> None:
    for base in ([16, 4, 4, 500, 16 * 500], [256, 64, 12, 2_000, 256 * 2_000]):
        bigger = list(base)
        bigger[dim] *= 2
        if dim == 3:
            bigger[4] *= 2  # more samples per class is more samples
        small, large = estimate(PlanSize(*base), method), estimate(PlanSize(*bigger), method)  # type: ignore[arg-type]
        assert (large.seconds, large.memory_bytes) >= (small.seconds, small.memory_bytes)


@pytest.mark.slow
def test_fleet_estimate_bounds_the_measured_peak_memory() -> None:
    # One process, as `kvcore bench fleet` runs: instance generation, a cold and a warm plan.
    cmd = [sys.executable, "-c", "import sys; from kvcore.cli import main; sys.exit(main())", "bench", "fleet",
           "--classes", "256", "--groups", "64", "--configs", "12", "--samples", "2000", "--warm", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=dict(os.environ, PYTHONSAFEPATH="1"))
    measured = json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_mb"] * 1024**2
    est = reference_estimate()
    assert measured <= est.memory_bytes <= 1.6 * measured, (measured / 2**20, est.memory_bytes / 2**20)


def test_machine_memory_is_positive_and_at_most_physical() -> None:
    total, where = machine_memory()
    physical = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    assert 0 < total <= physical and where
    assert memory_limit() == pytest.approx(0.8 * total)
