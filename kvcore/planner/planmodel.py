"""The joint planner's result: :class:`Plan` and its parts. Frozen pydantic models, ``extra="forbid"``.

A plan carries its own explanation: status and reason, the decisions per group and per class, every objective
term, the slack of every constraint, iterations, solve time and the diff against the previous plan.
Units: tokens, tokens/s, requests/s, seconds; objective terms are cost units per second.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

from kvcore.reservation.radius import RadiusChoice

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class PlanStatus(str, Enum):
    """optimal: certified (exact reference, or BCD with nothing left to improve in any block and a proven bound);
    feasible: a feasible plan without a global certificate (BCD); infeasible: no layout/admission is feasible
    (``reason`` says why); error: a solver failed (``raw_status`` keeps what it said)."""

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    ERROR = "error"


class GroupPlan(BaseModel):
    """Decisions and derived figures for one group."""

    model_config = _FROZEN

    name: str
    tp: int = Field(description="Chosen tensor-parallel size (0 when the group is idle / infeasible).")
    pp: int = Field(description="Chosen pipeline-parallel size (0 when idle / infeasible).")
    replicas: int = Field(description="m_k = floor(G_k / (tp * pp)).")
    gpus_per_replica: int = Field(description="tp * pp (the Deployment's nvidia.com/gpu).")
    kv_capacity_tokens: float = Field(description="M(z_k), KV capacity per replica, tokens.")
    throughput_tokens_s: float = Field(description="C(z_k), decode throughput per replica, tokens/s.")
    utilisation: float = Field(description="Offered work / service rate, sum_i x_ik s_ik / (m_k C(z_k)), in [0, 1).")
    memory_utilisation: float = Field(default=0.0, description="KV tokens held (Little's law) / (m_k M(z_k)).")
    waiting_seconds: float = Field(default=0.0, description="T_k, P-K M/G/1 mean waiting time, seconds.")
    arrival_rate: float = Field(default=0.0, description="Lambda_k, requests/s routed to the group.")
    phi: float = Field(default=0.0, description="phi_k(z_k): GPUs in use (cost units before kappa).")


class ClassPlan(BaseModel):
    """Decisions for one class."""

    model_config = _FROZEN

    name: str
    reserve_tokens: float = Field(description="y_i: reserved output tokens per request (r_i = L_in + y_i).")
    radius: RadiusChoice | None = Field(default=None, description="The Wasserstein radius used and why.")
    admitted: bool = Field(description="a_i.")
    routing: dict[str, float] = Field(default_factory=dict, description="pi_ik per group name; sums to 1 if admitted.")
    prefix_fraction: dict[str, float] = Field(default_factory=dict, description="delta_ik per group name, in [0, 1].")
    worst_case_cost: float = Field(default=0.0, description="DRO_i(y_i), token-slot cost per request.")
    cp: float = Field(default=0.0, description="Cost per overflowing token used (from cp or the SLO).")
    cw: float = Field(default=0.0, description="Cost per unused reserved token used.")


class ObjectiveTerms(BaseModel):
    """The four terms of the objective (cost units per second) and their sum."""

    model_config = _FROZEN

    reservation: float = Field(description="sum_i a_i lambda_i DRO_i(y_i).")
    configuration: float = Field(description="kappa sum_k phi_k(z_k).")
    queueing: float = Field(description="c_slo sum_k Lambda_k T_k.")
    rejection: float = Field(description="c_rej sum_i (1 - a_i) lambda_i.")
    total: float


class GroupSlack(BaseModel):
    """Slack of a group's constraints at the plan (>= 0 when feasible)."""

    model_config = _FROZEN

    group: str
    stability_tokens_s: float = Field(description="max_utilisation * m_k C(z_k) - sum_i x_ik s_ik, tokens/s.")
    memory_tokens: float = Field(description="m_k M(z_k) - (KV tokens held by Little's law + prefix cache), tokens.")


class PlanDiff(BaseModel):
    """What changed against the previous plan (empty lists when nothing did)."""

    model_config = _FROZEN

    layouts: list[str] = Field(default_factory=list, description="'group: TPxPP -> TPxPP'.")
    replicas: list[str] = Field(default_factory=list, description="'group: m -> m'.")
    reservations: list[str] = Field(default_factory=list, description="'class: y -> y' (changes > 0.5 token).")
    admission: list[str] = Field(default_factory=list, description="'class: admitted -> refused' etc.")
    routing: list[str] = Field(default_factory=list, description="'class->group: w -> w' (changes > 1e-3).")

    @property
    def empty(self) -> bool:
        return not (self.layouts or self.replicas or self.reservations or self.admission or self.routing)


class Plan(BaseModel):
    """The planner's result. ``objective`` is None only when status is infeasible or error."""

    model_config = _FROZEN

    status: PlanStatus
    reason: str = Field(description="One human line: why this status.")
    raw_status: str = Field(default="", description="What the underlying solver(s) said, unmapped.")
    method: str = Field(default="bcd", description="'bcd' or 'exact'.")
    groups: list[GroupPlan] = Field(default_factory=list)
    classes: list[ClassPlan] = Field(default_factory=list)
    objective: ObjectiveTerms | None = None
    slack: list[GroupSlack] = Field(default_factory=list)
    iterations: int = Field(default=0, description="BCD sweeps (or subproblems solved by the exact reference).")
    solve_seconds: float = 0.0
    lower_bound: float | None = Field(
        default=None,
        description="A certified lower bound on the optimum of the same model, cost units per second, when the "
                    "method gives one (the fleet method's Lagrangian bound, docs/model.md); None otherwise.",
    )
    diff: PlanDiff | None = Field(default=None, description="Against `previous`; None when there was none.")
