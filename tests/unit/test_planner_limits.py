"""Up-front size refusal (``kvcore.planner.limits``):

1. the reference size the planner is tuned for (256 classes x 64 groups x 12 layouts x 2,000 samples) and the
   paper's and the operator's sizes pass ``check_size`` with the headroom the module documents;
2. 10,000 classes, 1,000 groups, too many layouts or samples, and a combination past the work limit are refused
   with the limit's name and the estimated memory in the message;
3. ``plan()`` refuses before any work: ``compile_problem`` (profiles, DRO curves) is never reached;
4. the estimate grows with every dimension (so a limit on it is a limit on size).
"""

from __future__ import annotations

import pytest

from kvcore.errors import InputError
from kvcore.instance import ClassSpec, GroupSpec, Instance, Layout
from kvcore.planner import limits
from kvcore.planner.limits import PlanSize, check_size, estimate, reference_estimate
from kvcore.samples import Samples

ALLOWED = [
    ("reference", PlanSize(256, 64, 12, 2_000, 256 * 2_000)),
    ("paper-table-iii", PlanSize(15, 1, 12, 2_000, 15 * 2_000)),
    ("crd-maximum", PlanSize(64, 16, 32, 20_000, 64 * 20_000)),
    ("one-class-million-samples", PlanSize(1, 1, 4, 1_000_000, 1_000_000)),
]


@pytest.mark.parametrize("size", [s for _, s in ALLOWED], ids=[n for n, _ in ALLOWED])
def test_sizes_the_planner_is_for_pass(size: PlanSize) -> None:
    check_size(size)
    est, ref = estimate(size), reference_estimate()
    assert est.work <= limits.WORK_HEADROOM * ref.work and est.memory_bytes <= limits.MEMORY_HEADROOM * ref.memory_bytes


REFUSED = [
    ("10000-classes", PlanSize(10_000, 1, 4, 100, 1_000_000), "classes", "MAX_CLASSES"),
    ("1000-groups", PlanSize(3, 1_000, 4, 100, 300), "groups", "MAX_GROUPS"),
    ("100-layouts", PlanSize(3, 1, 100, 100, 300), "groups.layouts", "MAX_LAYOUTS"),
    ("samples-per-class", PlanSize(2, 1, 4, 6_000_000, 6_000_000), "classes.samples", "MAX_SAMPLES_PER_CLASS"),
    ("samples-total", PlanSize(20, 1, 4, 4_000_000, 80_000_000), "classes.samples", "MAX_SAMPLES"),
    ("work", PlanSize(1_000, 200, 12, 100, 100_000), "instance", "WORK_HEADROOM"),
]


@pytest.mark.parametrize(("size", "field", "limit"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_refused_with_the_limit_named(size: PlanSize, field: str, limit: str) -> None:
    with pytest.raises(InputError) as info:
        check_size(size)
    assert info.value.field == field
    assert f"kvcore.planner.limits.{limit}" in info.value.message
    assert "estimated memory" in info.value.message and "x the reference size" in info.value.message


def _instance(classes: int, groups: int) -> Instance:
    samples = Samples.from_arrays([10.0, 20.0])
    return Instance(
        classes=tuple(ClassSpec(name=f"c{i}", arrival_rate=0.1, input_tokens=10, lmax=100, cp=2, cw=1,
                                history=samples) for i in range(classes)),
        groups=tuple(GroupSpec(name=f"g{k}", gpu_type="A100-80GB", gpus=8, model="llama-8b",
                               layouts=(Layout(tp=1, pp=1),)) for k in range(groups)))


@pytest.mark.parametrize(("classes", "groups", "field"), [(2_000, 1, "classes"), (2, 1_000, "groups")],
                         ids=["2000-classes", "1000-groups"])
def test_plan_refuses_before_any_work(monkeypatch: pytest.MonkeyPatch, classes: int, groups: int,
                                      field: str) -> None:
    import kvcore.planner as planner

    def never(*_: object) -> None:
        raise AssertionError("compile_problem ran: the size was not refused up front")

    monkeypatch.setattr(planner, "compile_problem", never)
    with pytest.raises(InputError) as info:
        planner.plan(_instance(classes, groups))
    assert info.value.field == field


@pytest.mark.parametrize("dim", range(5), ids=["classes", "groups", "layouts", "samples-per-class", "samples"])
def test_estimate_grows_with_every_dimension(dim: int) -> None:
    base = [16, 4, 4, 500, 16 * 500]
    bigger = list(base)
    bigger[dim] *= 2
    if dim == 3:
        bigger[4] *= 2  # more samples per class is more samples
    small, large = estimate(PlanSize(*base)), estimate(PlanSize(*bigger))
    assert (large.work, large.memory_bytes) >= (small.work, small.memory_bytes)
    assert large.work > small.work or large.memory_bytes > small.memory_bytes
