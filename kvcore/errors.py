"""Errors that name the offending field.

Every user-facing validation failure in kvcore raises :class:`InputError`, whose message starts with the dotted
path of the field (``classes[2].lmax``, ``samples``, ``line 17``) so the CLI and the operator can report it without
a traceback. Field and message are cut to :data:`MAX_FIELD_CHARS` and :data:`MAX_MESSAGE_CHARS`.
"""

from __future__ import annotations


MAX_FIELD_CHARS = 200
"""Longest field path kept (a key or header taken from a file can be as long as the file)."""
MAX_MESSAGE_CHARS = 500
"""Longest message kept; the rest is cut and counted, so an error stays one readable line."""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit:,} more characters)"


class InputError(ValueError):
    """Bad input. ``field`` is the dotted path of what is wrong; ``hint`` an optional fix."""

    def __init__(self, field: str, message: str, *, hint: str | None = None) -> None:
        self.field = _cut(field, MAX_FIELD_CHARS)
        self.message = _cut(message, MAX_MESSAGE_CHARS)
        self.hint = hint
        text = f"{field}: {message}"
        if hint:
            text += f" ({hint})"
        super().__init__(text)
