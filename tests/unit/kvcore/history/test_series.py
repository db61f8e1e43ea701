"""Bucket layouts and series names shared by the history sources, the vLLM plugin and the harness
(``kvcore.history.series``): each layout's defining property checked directly, and bad maxima named."""

from __future__ import annotations

import pytest

from kvcore.errors import InputError
from kvcore.history.series import KVPLAN_MAX_RELATIVE_WIDTH, LAYOUTS, kvplan_buckets, powers_of_4_buckets, vllm_buckets


@pytest.mark.parametrize("top", [1, 2, 10, 11, 100, 2048, 8192, 131072], ids=lambda t: f"max{t}")
def test_kvplan_layout_is_fine_and_ends_at_max(top: int) -> None:
    b = kvplan_buckets(top)
    assert b[0] == 1 and b[-1] == top
    assert all(hi > lo for lo, hi in zip(b, b[1:]))
    for lo, hi in zip(b, b[1:]):
        # one-token buckets are exact; wider ones stay within the relative width
        assert hi - lo == 1 or (hi - lo) / lo <= KVPLAN_MAX_RELATIVE_WIDTH + 1e-12, (lo, hi)


def test_kvplan_layout_size_is_logarithmic() -> None:
    assert len(kvplan_buckets(131072)) < 130  # ~ 10 + ln(13107) / ln(1.1)


def test_vllm_and_powers_of_4() -> None:
    assert vllm_buckets(100) == [1, 2, 5, 10, 20, 50, 100]
    assert vllm_buckets(4999)[-1] == 2000
    assert powers_of_4_buckets(100) == [1, 4, 16, 64]
    assert powers_of_4_buckets(1) == [1]
    assert set(LAYOUTS) == {"vllm", "powers-of-4", "kvplan"}


@pytest.mark.parametrize("bad", [0, -5, float("nan"), float("inf"), "100"], ids=repr)
@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_bad_max_is_named(name: str, bad: object) -> None:
    with pytest.raises(InputError, match="max_value"):
        LAYOUTS[name](bad)  # type: ignore[operator]
