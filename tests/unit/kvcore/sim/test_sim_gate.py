"""The reservation gate shared by kvplan's vLLM scheduler plugin and the vLLM engine model (``kvcore.sim.gate``):
footprints and claims against hand-computed block counts, and the rule's boundary."""

from __future__ import annotations

import pytest

from kvcore.sim.gate import admits, blocks, footprint, running_claim, waiting_claim


@pytest.mark.parametrize(("tokens", "size", "want"), [(0, 16, 0), (1, 16, 1), (16, 16, 1), (17, 16, 2), (-3, 16, 0)],
                         ids=["zero", "one", "full", "spill", "negative"])
def test_blocks(tokens: int, size: int, want: int) -> None:
    assert blocks(tokens, size) == want


def test_footprint_never_below_what_is_held() -> None:
    assert footprint(100, 0, 50) == 150
    assert footprint(100, 80, 50) == 180  # past its reservation: what it has


def test_claims() -> None:
    # 100-token prompt, y = 60, nothing generated: footprint 160 tokens = 10 blocks of 16; 7 allocated -> 3 owed
    assert running_claim(100, 0, 60, 7, 16) == 3
    assert running_claim(100, 200, 60, 19, 16) == 0  # beyond its reservation, it owes nothing more
    # a new request with 32 cached prompt tokens reuses 2 whole blocks
    assert waiting_claim(100, 0, 60, 32, 16) == 8
    assert waiting_claim(100, 0, 60, 31, 16) == 9  # a partial cached block is not reused


def test_rule_boundary() -> None:
    assert admits(10, [3, 2], 5)
    assert not admits(9, [3, 2], 5)
    assert admits(0, [], 0)
