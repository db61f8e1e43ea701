"""What of a Prometheus answer may appear in a message (status conditions, ``lastError``, Events, the log).

Status and Events are read by everyone who may read the KVPlan, and an answer's text is whatever the server (or
whoever wrote the series: an exporter, another tenant's pods) put there, so no string of an answer is copied:
a value that is not a number is "not a number", a class-label value no class names is "a value of <label> that
no class names" (the label's name is the spec's), a result type is quoted only from the API's own four, and a
bucket bound is shown as the number the operator parsed (``le=100``), never as the label text it came in.
"""

from __future__ import annotations

import math
import re
from typing import Any

#: The API's result types (quoted in a message; anything else is "another type").
RESULT_TYPES = ("matrix", "vector", "scalar", "string")
#: An ``le`` label as Prometheus and client libraries write one (``10``, ``0.25``, ``1e+06``, ``+Inf``): kept
#: as written; any other spelling of a number is replaced by the number's own (``repr``) spelling.
_PLAIN_LE = re.compile(r"^(\+Inf|[0-9]{1,20}(\.[0-9]{1,20})?([eE][-+]?[0-9]{1,3})?)$")


def result_type_text(raw: Any) -> str:
    return repr(raw) if isinstance(raw, str) and raw in RESULT_TYPES else "another type"


def le_text(bound: float) -> str:
    """A bucket bound for a message."""
    return "+Inf" if math.isinf(bound) and bound > 0 else f"{bound:g}"


def le_label(raw: Any, bound: float) -> str:
    """The ``le`` text the binning reads (and its errors may quote): ``raw`` if plainly written, else the bound's."""
    if isinstance(raw, str) and _PLAIN_LE.match(raw):
        return raw
    return "+Inf" if math.isinf(bound) and bound > 0 else repr(bound)


def series_key_text(key_label: str | None) -> str:
    """How a message names a series whose class-label value no class names (never the value itself)."""
    return f"a value of {key_label} that no class names" if key_label else ""
