"""``kvplan-operator --log-format``: ``json`` gives one JSON object per log line (kopf's formatter, with the level,
timestamp and message), ``plain`` the bare message; an unknown format from ``$KVPLAN_LOG_FORMAT`` is refused with
the variable's name and no traceback. Run in subprocesses, since logging configuration is process-global."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SNIPPET = ("import logging, sys; from kvplan_operator.main import build_parser, configure_logging; "
           "configure_logging(build_parser().parse_args(sys.argv[1:])); "
           "logging.getLogger('kvplan.test').warning('plan %s ready', 'llm/p')")


def _stderr(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SNIPPET, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONSAFEPATH": "1", **(env or {})}, check=False)


@pytest.mark.slow
def test_json_lines() -> None:
    done = _stderr("--log-format", "json")
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    record = json.loads(lines[-1])
    assert record["message"] == "plan llm/p ready"
    assert record["severity"] == "warn"  # kopf names levels the way Stackdriver-style collectors read them
    assert "timestamp" in record


@pytest.mark.parametrize(("fmt", "expected"), [("plain", "plan llm/p ready"), ("full", "[WARNING ] plan llm/p ready")])
@pytest.mark.slow
def test_text_formats(fmt: str, expected: str) -> None:
    last = _stderr("--log-format", fmt).stderr.strip().splitlines()[-1]
    assert last.endswith(expected) if fmt == "full" else last == expected
    with pytest.raises(json.JSONDecodeError):
        json.loads(last)


@pytest.mark.slow
def test_env_default_and_bad_value() -> None:
    assert json.loads(_stderr(env={"KVPLAN_LOG_FORMAT": "json"}).stderr.strip().splitlines()[-1])["message"]
    done = subprocess.run([sys.executable, "-m", "kvplan_operator.main"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONSAFEPATH": "1", "KVPLAN_LOG_FORMAT": "xml"}, check=False)
    assert done.returncode == 2
    assert "KVPLAN_LOG_FORMAT" in done.stderr and "Traceback" not in done.stderr
