"""Errors that name the offending field.

Every user-facing validation failure in kvcore raises :class:`InputError`, whose message starts with the dotted
path of the field (``classes[2].lmax``, ``samples``, ``line 17``) so the CLI and the operator can report it without
a traceback.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad input. ``field`` is the dotted path of what is wrong; ``hint`` an optional fix."""

    def __init__(self, field: str, message: str, *, hint: str | None = None) -> None:
        self.field = field
        self.message = message
        self.hint = hint
        text = f"{field}: {message}"
        if hint:
            text += f" ({hint})"
        super().__init__(text)
