"""Inputs of the vLLM engine model (:mod:`kvcore.sim.engine`): groups, the workload and the policy.

Groups are frozen pydantic models (``extra="forbid"``); the workload and the policy hold numpy arrays
and are frozen dataclasses whose constructors coerce and check every array and raise
:class:`kvcore.errors.InputError` naming the field (``workload.output_tokens[17]``, ``policy.routing[2]``).
Shapes that depend on each other (classes x groups) are checked by :func:`kvcore.sim.prepare.prepare`, which sees
all inputs together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray
from pydantic import BaseModel, ConfigDict, Field

from kvcore.bounds import MAX_CONTEXT_S_PER_TOKEN
from kvcore.errors import InputError

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


class _StepProfile(Protocol):
    """What :meth:`SimGroup.from_profile` reads from a performance profile."""

    @property
    def kv_capacity_tokens(self) -> float: ...
    @property
    def step_t0_s(self) -> float: ...
    @property
    def step_t1_s(self) -> float: ...


class SimGroup(BaseModel):
    """One serving group k: ``replicas`` identical replicas of one layout (a vLLM Deployment).

    A replica runs continuous batching. One decode step of a batch of B sequences takes
    ``step_time_base_s + step_time_per_seq_s * B`` seconds and produces one token for each of them. A step that
    admits requests also prefills them: it lasts ``prefill tokens / prefill_tokens_per_s`` longer (see
    docs in :mod:`kvcore.sim.engine.reference`). Take t0, t1 and the prefill rate from the performance profile
    (``kvcore.profiles``); they are plain numbers here so the simulator does not depend on it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    """Group name, used in the result (the Deployment name)."""
    replicas: int = Field(ge=0)
    """m_k. A group with 0 replicas must receive no traffic (checked against the routing matrix)."""
    kv_capacity_tokens: int = Field(gt=0)
    """M: KV-cache capacity of one replica, in tokens (the profile's M(z))."""
    step_time_base_s: float = Field(gt=0, allow_inf_nan=False)
    """t0: seconds of one decode step at batch size 0 (weights read once per step)."""
    step_time_per_seq_s: float = Field(ge=0, allow_inf_nan=False)
    """t1: extra seconds per sequence in the batch (KV reads and per-token compute)."""
    decode_step_knots_s: tuple[tuple[int, float], ...] = ()
    """(batch, seconds) points of the decode step time (the measured model's curve at a 1,024-token context,
    :attr:`kvcore.profiles.Profile.decode_knots`). Given, the engine model takes the curve through them instead of
    ``t0 + t1 * B`` (:class:`kvcore.sim.engine.StepTiming`); empty, the line."""
    step_time_per_context_token_s: float = Field(default=0.0, ge=0, le=MAX_CONTEXT_S_PER_TOKEN, allow_inf_nan=False)
    """Seconds a step takes per token of context its requests hold (the KV read of a token); t0, t1 and the curve
    hold at 1,024 tokens of context per sequence and each step moves by this much per token above or below
    (:class:`kvcore.sim.engine.StepTiming`). 0 (the default): context-free; :meth:`from_profile` takes the
    profile's ``context_s_per_token``."""
    prefill_tokens_per_s: float = Field(default=4400.0, gt=0, allow_inf_nan=False)
    """Prefill throughput of one replica, tokens/s. Default 4400, a guess (compute-bound prefill of a 70B model on
    4 A100-80GB at 50% of peak bf16 FLOPS); :meth:`from_profile` takes the profile's measured-model rate
    (``kvcore.profiles.Profile.prefill_tokens_s``: 4,881 tokens/s for that layout)."""

    @classmethod
    def from_profile(
        cls, name: str, replicas: int, profile: _StepProfile, *, prefill_tokens_per_s: float | None = None
    ) -> SimGroup:
        """A group whose replicas follow ``profile`` (a ``kvcore.profiles.Profile`` or anything with its
        ``kv_capacity_tokens``, ``step_t0_s`` and ``step_t1_s``); the capacity is floored to whole tokens, the
        decode curve is the profile's ``decode_knots`` and its context term ``context_s_per_token`` where it has
        them. The prefill rate is ``prefill_tokens_per_s``, else the profile's ``prefill_tokens_s`` where it has
        one, else the default."""
        rate = prefill_tokens_per_s if prefill_tokens_per_s is not None else getattr(profile, "prefill_tokens_s", None)
        extra: dict[str, Any] = {} if rate is None else {"prefill_tokens_per_s": float(rate)}
        extra["decode_step_knots_s"] = tuple(getattr(profile, "decode_knots", ()))
        extra["step_time_per_context_token_s"] = float(getattr(profile, "context_s_per_token", 0.0))
        return cls(
            name=name,
            replicas=replicas,
            kv_capacity_tokens=math.floor(profile.kv_capacity_tokens),
            step_time_base_s=profile.step_t0_s,
            step_time_per_seq_s=profile.step_t1_s,
            **extra,
        )


def _as_1d(value: ArrayLike, field: str, dtype: type[Any]) -> NDArray[Any]:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(field, f"not numeric: {exc}") from None
    if arr.ndim != 1:
        raise InputError(field, f"must be 1-D, got shape {arr.shape}")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise InputError(f"{field}[{bad[0]}]", f"must be finite, got {arr[bad[0]]}")
    if dtype is np.int64:
        frac = np.flatnonzero(arr != np.floor(arr))
        if frac.size:
            raise InputError(
                f"{field}[{frac[0]}]",
                f"must be a whole number, got {arr[frac[0]]}",
                hint="round scaled token counts explicitly (e.g. np.ceil) before building the workload",
            )
        return arr.astype(np.int64)
    return arr


def _check_min(arr: NDArray[Any], field: str, lo: float) -> None:
    bad = np.flatnonzero(arr < lo)
    if bad.size:
        raise InputError(f"{field}[{bad[0]}]", f"must be >= {lo:g}, got {arr[bad[0]]}")


def _frozen(arr: NDArray[Any]) -> NDArray[Any]:
    arr = np.array(arr, copy=True)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, slots=True)
class Workload:
    """Requests to replay, in arrival order. Build it with :meth:`from_arrays`, which checks every field.

    ``arrival_s`` is non-decreasing seconds; ``class_index`` in ``[0, n_classes)``; ``input_tokens`` >= 0;
    ``output_tokens`` >= 1 (the true output length xi; the simulator decodes exactly that many tokens).
    """

    arrival_s: FloatArray
    class_index: IntArray
    input_tokens: IntArray
    output_tokens: IntArray
    n_classes: int

    @classmethod
    def from_arrays(
        cls,
        arrival_s: ArrayLike,
        class_index: ArrayLike,
        input_tokens: ArrayLike,
        output_tokens: ArrayLike,
        *,
        n_classes: int | None = None,
    ) -> Workload:
        arrival = _as_1d(arrival_s, "workload.arrival_s", np.float64)
        back = np.flatnonzero(np.diff(arrival) < 0)
        if back.size:
            i = int(back[0]) + 1
            raise InputError(
                f"workload.arrival_s[{i}]",
                f"arrivals must be non-decreasing, got {arrival[i]} after {arrival[i - 1]}",
                hint="sort the requests by arrival time",
            )
        n = arrival.size
        columns: dict[str, IntArray] = {}
        for name, raw, lo in (
            ("class_index", class_index, 0),
            ("input_tokens", input_tokens, 0),
            ("output_tokens", output_tokens, 1),
        ):
            arr = _as_1d(raw, f"workload.{name}", np.int64)
            if arr.size != n:
                raise InputError(f"workload.{name}", f"has {arr.size} entries, workload.arrival_s has {n}")
            _check_min(arr, f"workload.{name}", lo)
            columns[name] = arr
        top = int(columns["class_index"].max()) + 1 if n else 1
        if n_classes is None:
            n_classes = top
        if n_classes < 1:
            raise InputError("workload.n_classes", f"must be >= 1, got {n_classes}")
        if top > n_classes:
            i = int(np.flatnonzero(columns["class_index"] >= n_classes)[0])
            raise InputError(f"workload.class_index[{i}]", f"must be < n_classes={n_classes}, got {top - 1}")
        return cls(
            arrival_s=_frozen(arrival),
            class_index=_frozen(columns["class_index"]),
            input_tokens=_frozen(columns["input_tokens"]),
            output_tokens=_frozen(columns["output_tokens"]),
            n_classes=int(n_classes),
        )

    def __len__(self) -> int:
        return int(self.arrival_s.size)


def _per_class(value: ArrayLike | None, default: float, n: int, field: str) -> FloatArray:
    if value is None:
        return np.full(n, default, dtype=np.float64)
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(n, float(arr), dtype=np.float64)
    if arr.shape != (n,):
        raise InputError(field, f"must have one entry per class ({n}), got shape {arr.shape}")
    nan = np.flatnonzero(np.isnan(arr))
    if nan.size:
        raise InputError(f"{field}[{nan[0]}]", "must not be NaN")
    return arr


@dataclass(frozen=True, slots=True)
class SimPolicy:
    """What the planner decided, per class i and group k. Build it with :meth:`from_arrays`.

    - ``reserve_tokens[i]``: y_i, output tokens reserved at admission (fractions round up: KV slots are whole).
    - ``routing[i, k]``: pi_ik, each row of an admitted class sums to 1 (within 1e-6).
    - ``prefix_fraction[i, k]``: delta_ik, the probability that a class-i request on group k finds its prefix
      cached; a hit saves ``min(prefix_tokens[i], input tokens)`` of KV and of prefill.
    - ``prefix_tokens[i]``: L_pre, tokens of the shared prefix of class i.
    - ``admission[i]``: a_i in [0, 1], the probability that a class-i request is admitted (0 rejects the class).
    - ``ttft_slo_s[i]``, ``tpot_slo_s[i]``, ``e2e_slo_s[i]``: SLO thresholds in seconds (inf: none): time to first
      token, mean time per output token after the first, end to end (:func:`kvcore.sim.engine.result.meets_slo`).
    - ``cp[i]``, ``cw[i]``: reservation costs per token slot, ``cp (xi - y)^+ + cw (y - xi)^+``.
    """

    reserve_tokens: IntArray
    routing: FloatArray
    prefix_fraction: FloatArray
    prefix_tokens: IntArray
    admission: FloatArray
    ttft_slo_s: FloatArray
    e2e_slo_s: FloatArray
    cp: FloatArray
    cw: FloatArray
    tpot_slo_s: FloatArray

    @classmethod
    def from_arrays(
        cls,
        reserve_tokens: ArrayLike,
        routing: ArrayLike,
        *,
        prefix_fraction: ArrayLike | None = None,
        prefix_tokens: ArrayLike | None = None,
        admission: ArrayLike | None = None,
        ttft_slo_s: ArrayLike | None = None,
        e2e_slo_s: ArrayLike | None = None,
        cp: ArrayLike | None = None,
        cw: ArrayLike | None = None,
        tpot_slo_s: ArrayLike | None = None,
    ) -> SimPolicy:
        reserve = np.asarray(reserve_tokens, dtype=np.float64)
        if reserve.ndim != 1 or reserve.size == 0:
            raise InputError("policy.reserve_tokens", f"must be 1-D with one entry per class, got {reserve.shape}")
        n = reserve.size
        bad = np.flatnonzero(~np.isfinite(reserve) | (reserve < 0))
        if bad.size:
            raise InputError(f"policy.reserve_tokens[{bad[0]}]", f"must be finite and >= 0, got {reserve[bad[0]]}")
        pi = np.asarray(routing, dtype=np.float64)
        if pi.ndim != 2 or pi.shape[0] != n:
            raise InputError("policy.routing", f"must have shape (classes={n}, groups), got {pi.shape}")
        bad2 = np.argwhere(~np.isfinite(pi) | (pi < 0))
        if bad2.size:
            i, k = bad2[0]
            raise InputError(f"policy.routing[{i}][{k}]", f"must be finite and >= 0, got {pi[i, k]}")
        delta = np.zeros_like(pi) if prefix_fraction is None else np.asarray(prefix_fraction, dtype=np.float64)
        if delta.shape != pi.shape:
            raise InputError("policy.prefix_fraction", f"must have shape {pi.shape}, got {delta.shape}")
        bad2 = np.argwhere(~(delta >= 0) | ~(delta <= 1))
        if bad2.size:
            i, k = bad2[0]
            raise InputError(f"policy.prefix_fraction[{i}][{k}]", f"must be in [0, 1], got {delta[i, k]}")
        pre = _per_class(prefix_tokens, 0.0, n, "policy.prefix_tokens")
        _check_min(pre, "policy.prefix_tokens", 0)
        frac = np.flatnonzero(~np.isfinite(pre) | (pre != np.floor(pre)))
        if frac.size:
            raise InputError(f"policy.prefix_tokens[{frac[0]}]", f"must be a whole number, got {pre[frac[0]]}")
        adm = _per_class(admission, 1.0, n, "policy.admission")
        bad = np.flatnonzero((adm < 0) | (adm > 1))
        if bad.size:
            raise InputError(f"policy.admission[{bad[0]}]", f"must be in [0, 1], got {adm[bad[0]]}")
        rows = pi.sum(axis=1)
        bad = np.flatnonzero((adm > 0) & (np.abs(rows - 1.0) > 1e-6))
        if bad.size:
            raise InputError(
                f"policy.routing[{bad[0]}]", f"row of an admitted class must sum to 1, sums to {rows[bad[0]]:.9g}"
            )
        slos = {}
        for name, raw in (("ttft_slo_s", ttft_slo_s), ("e2e_slo_s", e2e_slo_s), ("tpot_slo_s", tpot_slo_s)):
            arr = _per_class(raw, np.inf, n, f"policy.{name}")
            bad = np.flatnonzero(arr <= 0)
            if bad.size:
                raise InputError(f"policy.{name}[{bad[0]}]", f"must be > 0 seconds, got {arr[bad[0]]}")
            slos[name] = arr
        costs = {}
        for name, raw in (("cp", cp), ("cw", cw)):
            arr = _per_class(raw, 1.0, n, f"policy.{name}")
            bad = np.flatnonzero(~np.isfinite(arr) | (arr < 0))
            if bad.size:
                raise InputError(f"policy.{name}[{bad[0]}]", f"must be finite and >= 0, got {arr[bad[0]]}")
            costs[name] = arr
        return cls(
            reserve_tokens=_frozen(np.ceil(reserve).astype(np.int64)),
            routing=_frozen(pi),
            prefix_fraction=_frozen(delta),
            prefix_tokens=_frozen(pre.astype(np.int64)),
            admission=_frozen(adm),
            ttft_slo_s=_frozen(slos["ttft_slo_s"]),
            e2e_slo_s=_frozen(slos["e2e_slo_s"]),
            cp=_frozen(costs["cp"]),
            cw=_frozen(costs["cw"]),
            tpot_slo_s=_frozen(slos["tpot_slo_s"]),
        )

    @property
    def n_classes(self) -> int:
        return int(self.reserve_tokens.size)

    @property
    def n_groups(self) -> int:
        return int(self.routing.shape[1])
