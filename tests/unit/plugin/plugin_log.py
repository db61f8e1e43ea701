"""A logger whose messages a plugin test can read: the ``log`` fixture both plugin test modules use."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


class Records(logging.Handler):
    """Keeps every message logged to it."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def log(request: pytest.FixtureRequest) -> Iterator[tuple[logging.Logger, list[str]]]:
    """A private logger (named after the test module) and the list its messages land in."""
    handler = Records()
    logger = logging.getLogger(f"kvplan-test-{request.module.__name__}")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, handler.messages
    logger.removeHandler(handler)
