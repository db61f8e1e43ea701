"""The one result type every reservation method returns, and the small solver-status set.

Solvers map whatever their backend reports onto :class:`SolverStatus` and keep the backend's own words in
``raw_status``; infeasibility is a result, not an exception.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from kvcore.reservation.radius import RadiusChoice

Method = Literal["dro", "dro-lp", "saa", "p90", "p95", "p99", "mean", "max", "mean+1sigma", "mean+2sigma"]
METHODS: tuple[str, ...] = get_args(Method)
"""Every method name :func:`kvcore.reservation.reserve` accepts, in the order tables list them."""

DRO_METHODS: frozenset[str] = frozenset({"dro", "dro-lp"})


class SolverStatus(str, Enum):
    """What became of a solve. ``optimal``: the answer is trusted (re-checked after the solve);
    ``infeasible``: the backend proved there is no feasible point; ``error``: anything else (limits hit,
    numerical trouble, a post-solve check that failed). ``raw_status`` on the result says which."""

    OPTIMAL = "optimal"
    INFEASIBLE = "infeasible"
    ERROR = "error"


class ReservationResult(BaseModel):
    """The reservation for one class and what it costs. Costs are token slots per request."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: Method = Field(description="Which method produced the reservation.")
    reserve_tokens: float = Field(
        description="Output tokens reserved per request, excluding the input, in [0, lmax]."
    )
    worst_case_cost: float | None = Field(
        default=None,
        description="DRO only: worst-case expected cost over the Wasserstein ball (token slots/request).",
    )
    expected_cost: float = Field(
        description="Empirical expected cost E[Q(y, xi)] on the samples the method was fitted on (token slots)."
    )
    gamma: float | None = Field(
        default=None, description="DRO only: the optimal dual multiplier of the radius constraint (slots/token)."
    )
    eps: float | None = Field(default=None, description="Radius used, output tokens (DRO and SAA, which is 0).")
    radius: RadiusChoice | None = Field(default=None, description="How eps was chosen (DRO only).")
    status: SolverStatus = Field(default=SolverStatus.OPTIMAL, description="Mapped solver status.")
    raw_status: str = Field(default="closed-form", description="The backend's own status, unmapped.")
    solve_seconds: float = Field(default=0.0, ge=0.0, description="Wall time of the solve itself, seconds.")
    detail: str = Field(default="", description="Anything worth telling a human (e.g. a failed post-solve check).")
