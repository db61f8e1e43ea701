"""The CLI's two exits that are not about bad input: a closed output pipe and an internal error.

- :func:`closed_output`: the reader of stdout has gone (``kvcore plan ... | head``). Nothing more can be said to
  it, so the command ends quietly with status 141 (128 + ``SIGPIPE``, what a shell reports for a program killed by
  the signal); stdout is pointed at ``/dev/null`` so that the interpreter's final flush does not fail again.
- :func:`internal_error`: an exception that is neither bad input nor a closed pipe, i.e. a bug in kvcore: one line
  ``<prog>: error: internal: <type>: <message>``, status 70 (``EX_SOFTWARE``); with ``KVPLAN_TRACEBACK=1`` the
  traceback follows on stderr.
"""

from __future__ import annotations

import os
import sys
import traceback

from kvcore.cli.args import report

CLOSED_PIPE_STATUS = 141
INTERNAL_ERROR_STATUS = 70
TRACEBACK_ENV = "KVPLAN_TRACEBACK"


def closed_output() -> int:
    """Stdout's reader has gone: silence stdout for the rest of the process; return status 141."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout without a descriptor (a test's StringIO)
        pass
    return CLOSED_PIPE_STATUS


def internal_error(prog: str, exc: BaseException) -> int:
    """One line naming the exception; the traceback too if ``KVPLAN_TRACEBACK=1``. Returns status 70."""
    if os.environ.get(TRACEBACK_ENV) == "1":
        traceback.print_exception(exc, file=sys.stderr)
    text = " ".join(str(exc).split())[:300] or "(no message)"
    report(prog, f"internal: {type(exc).__name__}: {text} (a bug in kvcore; {TRACEBACK_ENV}=1 shows the traceback)")
    return INTERNAL_ERROR_STATUS
