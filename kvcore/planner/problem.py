"""The planner's numeric view of an :class:`~kvcore.planner.instance.Instance`: classes, groups and candidate configs as
plain arrays and dataclasses, built once per ``plan()`` call (profiles and DRO curves are computed here and reused
by every block and iteration)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvcore.planner.instance import Instance
from kvcore.planner.dro import DroCurve
from kvcore.profiles import Profile, resolve
from kvcore.reservation.radius import DEFAULT_RADIUS, RadiusChoice, choose_radius

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Config:
    """One candidate layout of one group. Rates are per group (all replicas) unless named per replica."""

    tp: int
    pp: int
    feasible: bool
    reason: str
    replicas: int
    kv_per_replica: float
    thr_per_replica: float
    token_interval_s: float
    phi: float
    profile: Profile | None

    @property
    def mu(self) -> float:
        """Service rate mu_k = m_k C(z_k), tokens/s."""
        return self.replicas * self.thr_per_replica

    @property
    def memory(self) -> float:
        """m_k M(z_k), KV tokens."""
        return self.replicas * self.kv_per_replica


@dataclass(frozen=True)
class Group:
    name: str
    configs: tuple[Config, ...]

    @property
    def feasible_indices(self) -> tuple[int, ...]:
        return tuple(j for j, c in enumerate(self.configs) if c.feasible)


@dataclass
class Problem:
    """Arrays indexed by class i (length C) and groups k (length K)."""

    class_names: tuple[str, ...]
    lam: FloatArray
    lin: FloatArray
    lpre: FloatArray
    lmax: FloatArray
    mean_out: FloatArray
    cp: FloatArray
    cw: FloatArray
    radii: tuple[RadiusChoice, ...]
    curves: tuple[DroCurve, ...]
    groups: tuple[Group, ...]
    kappa: float
    c_slo: float
    c_rej: float
    umax: float
    instance: Instance

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @property
    def n_groups(self) -> int:
        return len(self.groups)

    def residence(self, config: Config) -> FloatArray:
        """tau_ik: seconds a class-i request holds its KV reservation at a group in ``config`` (its mean output
        tokens times the token interval at the operating batch)."""
        return self.mean_out * config.token_interval_s


def _config(inst: Instance, k: int, tp: int, pp: int) -> Config:
    g = inst.groups[k]
    n = tp * pp
    if tp > g.gpus_per_node:
        return Config(tp, pp, False, f"TP={tp} spans nodes of {g.gpus_per_node} GPUs", 0, 0.0, 0.0, 0.0, 0.0, None)
    replicas = g.gpus // n
    if replicas == 0:
        return Config(tp, pp, False, f"a replica needs {n} GPUs; the group has {g.gpus}", 0, 0.0, 0.0, 0.0, 0.0, None)
    prof = resolve(g.gpu_type, g.model, tp, pp, inst.profiles, inst.models, inst.gpu_types)
    if not prof.feasible:
        return Config(tp, pp, False, prof.reason, replicas, 0.0, 0.0, 0.0, 0.0, prof)
    return Config(tp, pp, True, prof.reason, replicas, prof.kv_capacity_tokens, prof.throughput_tokens_s,
                  prof.token_interval_s, replicas * prof.phi, prof)


def compile_problem(inst: Instance) -> Problem:
    """Profiles per (group, layout), radius and DRO curve per class."""
    cps, cws, radii, curves, means = [], [], [], [], []
    for c in inst.classes:
        cp, cw = c.costs()
        samples = c.samples()
        choice = choose_radius(c.radius if c.radius is not None else DEFAULT_RADIUS, c.history, lmax=c.lmax, cp=cp,
                               cw=cw)
        cps.append(cp)
        cws.append(cw)
        radii.append(choice)
        curves.append(DroCurve.build(samples, cp=cp, cw=cw, lmax=c.lmax, eps=choice.eps))
        means.append(samples.mean())
    groups = tuple(
        Group(g.name, tuple(_config(inst, k, lay.tp, lay.pp) for lay in g.layouts)) for k, g in enumerate(inst.groups)
    )

    def arr(values: list[float]) -> FloatArray:
        return np.asarray(values, dtype=np.float64)

    return Problem(
        class_names=tuple(c.name for c in inst.classes),
        lam=arr([c.arrival_rate for c in inst.classes]),
        lin=arr([c.input_tokens for c in inst.classes]),
        lpre=arr([c.prefix_tokens for c in inst.classes]),
        lmax=arr([c.lmax for c in inst.classes]),
        mean_out=arr(means), cp=arr(cps), cw=arr(cws), radii=tuple(radii), curves=tuple(curves), groups=groups,
        kappa=inst.costs.kappa, c_slo=inst.costs.c_slo, c_rej=inst.costs.c_rej, umax=inst.costs.max_utilisation,
        instance=inst,
    )
