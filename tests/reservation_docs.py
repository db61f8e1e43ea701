"""Shared by the tests of the reservation file ``kvplan.reservations.v1`` (``tests/unit/kvcore`` and
``tests/unit/plugin``): documents written as edits of a good one, and the check that a bad document is refused
with a problem naming its field."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import pytest

from kvcore.reservation_file import ReservationsError, parse_reservations


def edited(base: Mapping[str, Any], **changes: Any) -> str:
    """``base`` with each top-level key of ``changes`` set (a value of ``...`` removes the key), as JSON."""
    d = json.loads(json.dumps(base))
    for key, value in changes.items():
        if value is ...:
            d.pop(key)
        else:
            d[key] = value
    return json.dumps(d)


def assert_names_field(text: str, first: str) -> None:
    """``text`` is refused, and one of its problems matches the pattern ``first`` (the field, then the message)."""
    with pytest.raises(ReservationsError) as err:
        parse_reservations(text)
    assert any(re.search(first, p) for p in err.value.problems), err.value.problems
