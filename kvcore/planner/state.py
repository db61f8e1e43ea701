"""A point of the joint problem and its exact evaluation: every objective term, every constraint's slack.

Decisions: ``z[k]`` (index into group k's configs, -1 when the group has no feasible layout), ``a[i]`` (admitted),
``x[i, k]`` (class-i requests/s routed to group k; ``sum_k x[i, k] = a_i lambda_i``), ``y[i]`` (reserved output
tokens), ``delta[i, k]`` (prefix-cache fraction). Derived: ``s[i, k] = L_in + y_i - delta_ik L_pre`` tokens of work
and of KV per request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvcore.planner.problem import Config, Problem
from kvcore.planner.queueing import lam_t

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

FEAS_TOL = 1e-6
"""Relative tolerance on constraint violation when a point is checked (LP solutions sit on constraints)."""


@dataclass
class State:
    z: tuple[int, ...]
    a: BoolArray
    x: FloatArray
    y: FloatArray
    delta: FloatArray

    def copy(self) -> State:
        return State(self.z, self.a.copy(), self.x.copy(), self.y.copy(), self.delta.copy())


@dataclass(frozen=True)
class GroupEval:
    load: float          # sum_i x_ik s_ik, tokens/s
    mu: float            # tokens/s
    memory_used: float   # tokens (Little's law + prefix cache)
    memory: float        # m_k M(z_k), tokens
    waiting: float       # T_k, seconds
    arrivals: float      # Lambda_k, requests/s
    lam_t: float         # Lambda_k T_k


@dataclass(frozen=True)
class Evaluation:
    reservation: float
    configuration: float
    queueing: float
    rejection: float
    groups: tuple[GroupEval, ...]
    feasible: bool
    violation: str

    @property
    def total(self) -> float:
        return self.reservation + self.configuration + self.queueing + self.rejection


def config_of(prob: Problem, z: tuple[int, ...], k: int) -> Config | None:
    j = z[k]
    return None if j < 0 else prob.groups[k].configs[j]


def work(prob: Problem, y: FloatArray, delta: FloatArray) -> FloatArray:
    """s[i, k] = L_in + y - delta L_pre (tokens)."""
    return np.asarray((prob.lin + y)[:, None] - delta * prob.lpre[:, None], dtype=np.float64)


def memory_used(prob: Problem, cfg: Config, xk: FloatArray, sk: FloatArray, dk: FloatArray) -> float:
    """KV tokens held at a group: sum_i x_ik tau_ik s_ik (Little's law) + m_k sum_i delta_ik L_pre (prefix cache)."""
    return float(np.dot(xk * prob.residence(cfg), sk)) + cfg.replicas * float(np.dot(dk, prob.lpre))


def evaluate(prob: Problem, st: State) -> Evaluation:
    """Every objective term and whether every constraint holds (to FEAS_TOL)."""
    s = work(prob, st.y, st.delta)
    lam_adm = np.where(st.a, prob.lam, 0.0)
    reservation = sum(float(lam_adm[i]) * prob.curves[i].value(float(st.y[i]))
                      for i in range(prob.n_classes) if lam_adm[i] > 0)
    rejection = prob.c_rej * float(np.where(st.a, 0.0, prob.lam).sum())
    configuration = 0.0
    queueing = 0.0
    groups: list[GroupEval] = []
    violation = ""
    flows = st.x.sum(axis=1)
    if not np.allclose(flows, lam_adm, rtol=1e-9, atol=1e-12):
        violation = "routing does not sum to the admitted rate"
    for k in range(prob.n_groups):
        cfg = config_of(prob, st.z, k)
        xk, sk, dk = st.x[:, k], s[:, k], st.delta[:, k]
        if cfg is None:
            if xk.sum() > 0:
                violation = violation or f"group {prob.groups[k].name} has no layout but receives traffic"
            groups.append(GroupEval(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))
            continue
        configuration += prob.kappa * cfg.phi
        load = float(np.dot(xk, sk))
        mem = memory_used(prob, cfg, xk, sk, dk)
        f = lam_t(xk, sk, cfg.mu)
        if load > prob.umax * cfg.mu * (1 + FEAS_TOL) + FEAS_TOL:
            violation = violation or f"group {prob.groups[k].name}: load {load:.4g} > {prob.umax} x {cfg.mu:.4g}"
        if mem > cfg.memory * (1 + FEAS_TOL) + FEAS_TOL:
            violation = violation or f"group {prob.groups[k].name}: KV {mem:.4g} > {cfg.memory:.4g} tokens"
        queueing += prob.c_slo * f
        arrivals = float(xk.sum())
        groups.append(GroupEval(load, cfg.mu, mem, cfg.memory, f / arrivals if arrivals > 0 else 0.0, arrivals, f))
    if not math.isfinite(queueing):
        violation = violation or "a group is unstable"
    return Evaluation(reservation, configuration, queueing, rejection, tuple(groups), not violation, violation)
