"""What the KVPlan spec's modules share (:mod:`.spec`, :mod:`.spec_engine`, :mod:`.spec_prometheus`): the model base,
the name patterns and durations. Pure, no I/O.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

_DURATION = re.compile(r"^([0-9]+)(s|m|h|d)$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DNS_SUBDOMAIN = r"^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$"
#: A ConfigMap data key (``[-._a-zA-Z0-9]+``, as the apiserver requires).
CONFIGMAP_KEY = r"^[-._a-zA-Z0-9]+$"
#: An HTTP header name (RFC 9110 token).
HEADER_NAME = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$"
#: A header value: printable ASCII and spaces only (no CR/LF: no header injection).
HEADER_VALUE = r"^[ -~]*$"


def parse_duration(text: str) -> float:
    """``"90s"``, ``"5m"``, ``"6h"``, ``"1d"`` -> seconds."""
    m = _DURATION.match(text.strip())
    if not m or int(m.group(1)) <= 0:
        raise ValueError(f"not a positive duration like 30s, 5m, 6h: {text!r}")
    return float(int(m.group(1)) * _UNIT_S[m.group(2)])


class SpecModel(BaseModel):
    """Frozen, no unknown fields, camelCase aliases (the CR's spelling) and snake_case names both accepted."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)
