"""Kernel coefficients of the step-time model, fitted on vidur's measured operator profiles (issue 22, part 3).

Data: ``kvcore/data/profiling/vidur_linear.csv`` (per-layer linear and elementwise operators of Llama-2/3 on A100
and H100, by tokens in the step and TP) and ``vidur_network.csv`` (NCCL all-reduce and send/recv on DGX A100/H100),
medians as vidur published them (``kvcore/data/profiling/README.md``). Fitted per GPU family:

* linear layer: ``t = max(bytes / (eta_bw * BW), flops / (eta_fl * F)) + c_lin`` (the larger of the weight-read
  and the matmul time, not their sum, as vidur's isolated kernels show; inside a CUDA graph vLLM's own runs add
  them: :data:`kvcore.profiles.steptime.GRAPH`), ``bytes = K*N*2 + tokens*(K+N)*2``, ``flops = 2*tokens*K*N``;
* elementwise per layer (two RMSNorms, RoPE, SiLU*mul, two residual adds): ``e0 + e1 * tokens * (hidden +
  intermediate/TP)``;
* all-reduce per GPU count and send/recv: ``alpha + bytes / beta``.

Fitting minimises relative (log) error with scipy's ``least_squares``; the fit runs once per process (cached,
~0.3 s) and never at planning time per layout. scipy is imported by the fit only, so a process given fitted
:class:`Coefficients` (the twin's engines, in vLLM's environment) needs numpy alone.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1] / "data" / "profiling"
PEAKS = {"a100": (2039e9, 312e12), "h100": (3.35e12, 989e12)}
"""Datasheet peaks of the profiled parts (A100-SXM4-80GB, H100-SXM) the efficiencies are relative to."""


@dataclass(frozen=True)
class Coefficients:
    eta_bw: float
    eta_fl: float
    c_lin_s: float
    elem0_s: float
    elem1_s_per_elem: float
    allreduce: dict[int, tuple[float, float]]
    """GPUs -> (alpha seconds, beta bytes/s)."""
    p2p: tuple[float, float]
    rel_rms_linear: float
    rel_rms_allreduce: float
    compute_share: float = 0.0
    """Inside a CUDA graph, the share of a linear layer's matmul time at peak that adds to its weight read
    (:class:`kvcore.profiles.steptime.StepCosts`); 0, vidur's larger of the two, everywhere else."""

    def allreduce_s(self, gpus: int, nbytes: float, bw_scale: float = 1.0) -> float:
        if gpus <= 1:
            return 0.0
        key = min(self.allreduce, key=lambda g: (abs(g - gpus), -g))
        alpha, beta = self.allreduce[key]
        return alpha + nbytes / (beta * bw_scale)


def _rows(name: str) -> list[dict[str, str]]:
    with open(DATA / name, newline="") as f:
        return list(csv.DictReader(f))


def _linear_arrays(gpu: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    by, fl, ts, el = [], [], [], []
    for r in _rows("vidur_linear.csv"):
        if r["gpu"] != gpu:
            continue
        h, nh, kv = int(r["n_embd"]), int(r["n_head"]), int(r["n_kv_head"])
        inter, n, tp = int(r["n_expanded_embd"]), int(r["num_tokens"]), int(r["tp"])
        d = h // nh
        shapes = {"attn_pre_proj": (h, (nh + 2 * kv) * d // tp), "attn_post_proj": (nh * d // tp, h),
                  "mlp_up_proj": (h, 2 * inter // tp), "mlp_down_proj": (inter // tp, h)}
        for op, (k, m) in shapes.items():
            t = float(r[op + "_ms"]) * 1e-3
            if t <= 0:
                continue
            by.append(2.0 * k * m + 2.0 * n * (k + m))
            fl.append(2.0 * n * k * m)
            ts.append(t)
        e = sum(float(r[o + "_ms"]) for o in ("input_layernorm", "post_attention_layernorm", "attn_rope",
                                              "mlp_act", "add")) + float(r["add_ms"])
        el.append((n * (h + inter / tp), e * 1e-3))
    return np.array(by), np.array(fl), np.array(ts), np.array(el)


@lru_cache(maxsize=4)
def fit(gpu: str) -> Coefficients:
    """Fit the coefficients of one GPU family ('a100' or 'h100') on the vendored vidur profiles."""
    from scipy.optimize import least_squares

    bw, peak = PEAKS[gpu]
    by, fl, ts, el = _linear_arrays(gpu)

    def model(x: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.maximum(by / (x[0] * bw), fl / (x[1] * peak)) + x[2] * 1e-6
        return out

    res = least_squares(lambda x: np.log(model(x) / ts), x0=[0.7, 0.6, 5.0],
                        bounds=([0.05, 0.05, 0.0], [1.0, 1.0, 100.0]))
    eta_bw, eta_fl, c_us = (float(v) for v in res.x)
    a = np.column_stack([np.ones(len(el)), el[:, 0]])
    (e0, e1), *_ = np.linalg.lstsq(a / el[:, 1:2], np.ones(len(el)), rcond=None)
    ar: dict[int, tuple[float, float]] = {}
    p2p = (30e-6, 20e9)
    net = [r for r in _rows("vidur_network.csv") if r["gpu"] == gpu]
    ar_err: list[float] = []
    for workers in sorted({int(r["num_workers"]) for r in net if r["collective"] == "all_reduce"}):
        sel = [r for r in net if r["collective"] == "all_reduce" and int(r["num_workers"]) == workers
               and int(r["devices_per_node"]) == min(workers, 8)]
        if len(sel) < 5:
            continue
        size = np.array([float(r["size_bytes"]) for r in sel])
        t = np.array([float(r["median_ms"]) for r in sel]) * 1e-3
        fitw = least_squares(lambda x, s=size, t=t: np.log((x[0] * 1e-6 + s / (x[1] * 1e9)) / t),
                             x0=[30.0, 100.0], bounds=([0.0, 1.0], [1000.0, 5000.0]))
        ar[workers] = (float(fitw.x[0]) * 1e-6, float(fitw.x[1]) * 1e9)
        ar_err.extend(np.abs(fitw.fun).tolist())
    sr = [r for r in net if r["collective"] == "send_recv"]
    if sr:
        size = np.array([float(r["size_bytes"]) for r in sr])
        t = np.array([float(r["median_ms"]) for r in sr]) * 1e-3
        f2 = least_squares(lambda x: np.log((x[0] * 1e-6 + size / (x[1] * 1e9)) / t), x0=[30.0, 50.0],
                           bounds=([0.0, 1.0], [1000.0, 5000.0]))
        p2p = (float(f2.x[0]) * 1e-6, float(f2.x[1]) * 1e9)
    return Coefficients(eta_bw, eta_fl, c_us * 1e-6, float(e0), float(e1), ar, p2p,
                        float(np.sqrt(np.mean(res.fun ** 2))), float(np.sqrt(np.mean(np.square(ar_err)))))
