"""The one place kvcore constructs a HiGHS solver.

``highspy.Highs()``'s C++ constructor prints a banner on file descriptor 1 the first time it runs, which would
corrupt ``--json`` output, so fd 1 points at /dev/null (at the OS level) while it is constructed; solver logging
is then switched off. Callers set their own tolerances.
"""

from __future__ import annotations

import os
import sys

import highspy


def silent_highs() -> highspy.Highs:
    """A ``Highs`` instance that prints nothing."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 1)
            h = highspy.Highs()  # type: ignore[no-untyped-call]
        finally:
            os.dup2(saved, 1)
            os.close(devnull)
    finally:
        os.close(saved)
    h.setOptionValue("output_flag", False)
    return h
