"""kvcore: the pure planning core of kvplan.

Only numpy, scipy, highspy and pydantic are imported by the planning modules. It never imports kopf or
kubernetes; the operator (``kvplan_operator``) depends on kvcore, never the reverse.
"""

__version__ = "0.1.0"
