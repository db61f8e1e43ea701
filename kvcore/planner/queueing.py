"""Pollaczek-Khinchine M/G/1 waiting time with consistent units, and its gradient.

A group serves work at ``mu`` tokens/s (``mu = m_k C(z_k)``). Class i arrives at ``x_i`` requests/s and brings
``s_i`` tokens of work (``L_in + y_i - delta_i L_pre``). With ``Lambda = sum x_i``, ``E[s] = sum x_i s_i / Lambda``,
``E[s^2] = sum x_i s_i^2 / Lambda`` and service times ``s / mu``::

    T = Lambda E[(s/mu)^2] / (2 (1 - Lambda E[s]/mu)) = Lambda E[s^2] / (2 mu (mu - Lambda E[s]))   seconds

(the seed's formula lacks one factor mu). The planner's queueing term is ``c_slo Lambda T``, so we work with

    F(x, s) = Lambda T = (sum x)(sum x s^2) / (2 mu (mu - sum x s))      (requests waiting on average),

which is convex in s for fixed x (a sum of quadratic-over-linear terms) but **not** convex in x in general.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def waiting_time(x: FloatArray, s: FloatArray, mu: float) -> float:
    """T in seconds; inf when the load sum x s reaches mu; 0 with no arrivals."""
    lam = float(x.sum())
    if lam <= 0:
        return 0.0
    return lam_t(x, s, mu) / lam


def lam_t(x: FloatArray, s: FloatArray, mu: float) -> float:
    """F = Lambda T (dimensionless: mean number waiting, by Little's law)."""
    lam = float(x.sum())
    if lam <= 0:
        return 0.0
    load = float(np.dot(x, s))
    if mu <= 0 or load >= mu:
        return math.inf
    return lam * float(np.dot(x, s * s)) / (2.0 * mu * (mu - load))


def lam_t_grad_s(x: FloatArray, s: FloatArray, mu: float) -> FloatArray:
    """dF/ds_i = Lambda/(2 mu) (2 x_i s_i / (mu - A) + B x_i / (mu - A)^2), A = sum x s, B = sum x s^2."""
    lam = float(x.sum())
    a = float(np.dot(x, s))
    b = float(np.dot(x, s * s))
    gap = mu - a
    return np.asarray(lam / (2.0 * mu) * (2.0 * x * s / gap + b * x / (gap * gap)), dtype=np.float64)
