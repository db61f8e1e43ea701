"""The GPU catalogue: memory, HBM bandwidth, dense bf16/fp8 FLOPS, interconnect, Kubernetes names and vLLM 0.33's
per-GPU batch defaults (issue 22, part 2).

Figures are the vendors' datasheets (dense, i.e. without structured sparsity); memory in bytes as the driver
reports it where a public readout was found (A100, H100 SXM), else as the part is sold (GB = 1e9), which for the
others may understate what vLLM sees by up to 7%. ``interconnect_bytes_s`` is one GPU's bandwidth to its peers in one
direction where the datasheet gives a bidirectional total, halved (NVLink 3: 600 GB/s total -> the old roofline used
the total; the step-time model uses it only for the bytes part of an all-reduce, calibrated against vidur's NCCL
profiles on DGX A100/H100, see :mod:`kvcore.profiles.calibrate`).

vLLM 0.33 defaults (``EngineArgs.get_batch_defaults`` in ``vllm/engine/arg_utils.py`` of the 0.33.0 wheel, OpenAI
API server context): device memory >= 160 GiB -> ``max_num_seqs`` 1024, ``max_num_batched_tokens`` 16384;
>= 70 GiB and the device name does not contain "a100" -> 1024 and 8192; otherwise 256 and 2048.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from kvcore.errors import InputError

GiB = 1024**3

Interconnect = Literal["nvlink", "pcie", "xgmi"]


@dataclass(frozen=True)
class GpuType:
    """One GPU type. Units: bytes, bytes/s, FLOP/s. ``fp8_flops`` 0 means no fp8 support (weights or KV cache)."""

    name: str
    memory_bytes: float
    hbm_bytes_s: float
    bf16_flops: float
    fp8_flops: float
    interconnect: Interconnect
    interconnect_bytes_s: float
    family: Literal["a100", "h100"]
    """Which vidur-calibrated kernel efficiencies apply (Ampere/Ada/CDNA -> a100, Hopper/Blackwell -> h100)."""
    resource: str = "nvidia.com/gpu"
    node_label: str = ""
    device_name: str = ""
    source: str = ""

    @property
    def has_fp8(self) -> bool:
        return self.fp8_flops > 0

    @property
    def vllm_max_num_seqs(self) -> int:
        return _vllm_defaults(self)[0]

    @property
    def vllm_max_num_batched_tokens(self) -> int:
        return _vllm_defaults(self)[1]


def _vllm_defaults(g: GpuType) -> tuple[int, int]:
    """vLLM 0.33's ``get_batch_defaults`` (OpenAI API server): (max_num_seqs, max_num_batched_tokens)."""
    if g.memory_bytes >= 160 * GiB:
        return 1024, 16384
    if g.memory_bytes >= 70 * GiB and "a100" not in g.device_name.lower():
        return 1024, 8192
    return 256, 2048


def _nv(product: str) -> str:
    return f"nvidia.com/gpu.product={product}"


CATALOGUE: dict[str, GpuType] = {g.name: g for g in (
    GpuType("A100-80GB", 81920 * 1024**2, 2039e9, 312e12, 0.0, "nvlink", 300e9, "a100",
            node_label=_nv("NVIDIA-A100-SXM4-80GB"), device_name="NVIDIA A100-SXM4-80GB",
            source="NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB: HBM2e 2,039 GB/s, 312 TFLOPS bf16, NVLink 3 "
                   "600 GB/s total)"),
    GpuType("A100-40GB", 40960 * 1024**2, 1555e9, 312e12, 0.0, "nvlink", 300e9, "a100",
            node_label=_nv("NVIDIA-A100-SXM4-40GB"), device_name="NVIDIA A100-SXM4-40GB",
            source="NVIDIA A100 Tensor Core GPU datasheet (SXM4 40GB: HBM2 1,555 GB/s)"),
    GpuType("H100-SXM", 81559 * 1024**2, 3.35e12, 989e12, 1979e12, "nvlink", 450e9, "h100",
            node_label=_nv("NVIDIA-H100-80GB-HBM3"), device_name="NVIDIA H100 80GB HBM3",
            source="NVIDIA H100 Tensor Core GPU datasheet (SXM: 80 GB HBM3 3.35 TB/s, bf16 989 / fp8 1,979 TFLOPS "
                   "dense, NVLink 4 900 GB/s total); memory as the driver reports it, 81,559 MiB (nvidia-smi in "
                   "vllm-project/vllm issue 27508), which vLLM's gpu_memory_utilization applies to"),
    GpuType("H100-PCIe", 80e9, 2.0e12, 756e12, 1513e12, "pcie", 64e9, "h100",
            node_label=_nv("NVIDIA-H100-PCIe"), device_name="NVIDIA H100 PCIe",
            source="NVIDIA H100 Tensor Core GPU datasheet (PCIe: 80 GB HBM2e 2.0 TB/s, bf16 756 / fp8 1,513 TFLOPS "
                   "dense, PCIe Gen5 128 GB/s total)"),
    GpuType("H200", 141e9, 4.8e12, 989e12, 1979e12, "nvlink", 450e9, "h100",
            node_label=_nv("NVIDIA-H200"), device_name="NVIDIA H200",
            source="NVIDIA H200 Tensor Core GPU datasheet (SXM: 141 GB HBM3e 4.8 TB/s, bf16 989 / fp8 1,979 TFLOPS "
                   "dense, NVLink 900 GB/s total)"),
    GpuType("B200", 180e9, 7.7e12, 2.25e15, 4.5e15, "nvlink", 900e9, "h100",
            node_label=_nv("NVIDIA-B200"), device_name="NVIDIA B200",
            source="NVIDIA DGX B200 datasheet (1,440 GB HBM3e and 64 TB/s over 8 GPUs; bf16 2.25 / fp8 4.5 PFLOPS "
                   "dense per GPU; NVLink 5 1.8 TB/s total); HGX B200 quotes 7.7 TB/s per GPU"),
    GpuType("L40S", 48e9, 864e9, 362e12, 733e12, "pcie", 32e9, "a100",
            node_label=_nv("NVIDIA-L40S"), device_name="NVIDIA L40S",
            source="NVIDIA L40S datasheet (48 GB GDDR6 864 GB/s, bf16 362 / fp8 733 TFLOPS dense, PCIe Gen4 x16 "
                   "64 GB/s total)"),
    GpuType("L4", 24e9, 300e9, 121e12, 242e12, "pcie", 32e9, "a100",
            node_label=_nv("NVIDIA-L4"), device_name="NVIDIA L4",
            source="NVIDIA L4 datasheet (24 GB GDDR6 300 GB/s, bf16 121 / fp8 242 TFLOPS dense, PCIe Gen4 x16)"),
    GpuType("A10G", 24e9, 600e9, 125e12, 0.0, "pcie", 32e9, "a100",
            node_label=_nv("NVIDIA-A10G"), device_name="NVIDIA A10G",
            source="NVIDIA A10 datasheet (24 GB GDDR6 600 GB/s, bf16 125 TFLOPS dense, PCIe Gen4); A10G is AWS's "
                   "variant of the same GA102 part (clocks may be lower)"),
    GpuType("MI300X", 192e9, 5.3e12, 1307.4e12, 2614.9e12, "xgmi", 448e9, "a100", resource="amd.com/gpu",
            node_label="amd.com/gpu.product-name=AMD_Instinct_MI300X", device_name="AMD Instinct MI300X",
            source="AMD Instinct MI300X datasheet (192 GB HBM3 5.3 TB/s, bf16 1,307.4 / fp8 2,614.9 TFLOPS dense, "
                   "Infinity Fabric 896 GB/s aggregate)"),
)}
"""The GPU types kvplan can plan, by catalogue name (:data:`kvcore.catalogue.GPU_TYPES` lists the same names)."""


_SPEC_KEYS: dict[str, tuple[str, ...]] = {
    "memoryBytes": ("memory_bytes",), "hbmBytesPerSecond": ("hbm_bytes_s",), "bf16Flops": ("bf16_flops",),
    "fp8Flops": ("fp8_flops",), "interconnect": (), "interconnectBytesPerSecond": ("interconnect_bytes_s",),
    "family": (), "resource": (), "nodeLabel": ("node_label",), "deviceName": ("device_name",),
}
"""The keys of a user-given GPU spec (camelCase, as in a KVPlan) and their snake_case spellings."""
_SPEC_MAX: dict[str, float] = {"memoryBytes": 1e13, "hbmBytesPerSecond": 1e15, "bf16Flops": 1e18, "fp8Flops": 1e18,
                               "interconnectBytesPerSecond": 1e14}
"""Upper bound of each figure (10 TB, 1 PB/s, 1 EFLOP/s, 100 TB/s; the CRD's maxima): past it the figure cannot be
a datasheet's, and the profiles built on it would leave :mod:`kvcore.bounds`."""


def gpu_from_spec(spec: Mapping[str, object], *, field: str, name: str = "custom") -> GpuType:
    """A user-given GPU (a KVPlan's ``nodePool.gpuSpec``, an instance's ``gpu_types``). Units as in
    :class:`GpuType`: ``memoryBytes`` (bytes, > 0), ``hbmBytesPerSecond`` (bytes/s, > 0) and ``bf16Flops`` (dense
    FLOP/s, > 0) are required; ``fp8Flops`` (0: no fp8), ``interconnect`` (nvlink, pcie or xgmi; default pcie),
    ``interconnectBytesPerSecond`` (one direction per GPU; default 32e9, PCIe 4 x16), ``family`` (which measured
    kernel efficiencies apply: a100 or h100; default a100), ``resource`` (default nvidia.com/gpu), ``nodeLabel``
    (``key=value``) and ``deviceName`` (as ``torch.cuda.get_device_name`` says it, which vLLM's batch defaults
    read) are optional. Each key may also be spelled in snake_case. A bad value raises :class:`InputError` naming
    ``field``.key."""
    known = {alias: key for key, aliases in _SPEC_KEYS.items() for alias in (key, *aliases)}
    for k in spec:
        if k not in known:
            raise InputError(f"{field}.{k}", "unknown key", hint="known: " + ", ".join(_SPEC_KEYS))
        if k != known[k] and known[k] in spec:
            raise InputError(f"{field}.{k}", f"give {known[k]} or {k}, not both")

    def raw(key: str) -> tuple[str, object] | None:
        return next(((k, spec[k]) for k in (key, *_SPEC_KEYS[key]) if k in spec), None)

    def num(key: str, *, required: bool = True, default: float = 0.0, positive: bool = True) -> float:
        got = raw(key)
        if got is None:
            if required:
                raise InputError(f"{field}.{key}", "is required")
            return default
        k, v = got
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise InputError(f"{field}.{k}", f"must be a finite number >= 0, got {v!r}")
        if positive and v <= 0:
            why = "a GPU with no memory cannot hold weights or KV cache" if key == "memoryBytes" else "must be > 0"
            raise InputError(f"{field}.{k}", why)
        if v > _SPEC_MAX[key]:
            raise InputError(f"{field}.{k}", f"must be at most {_SPEC_MAX[key]:g}, got {v:g}")
        return float(v)

    def text(key: str, default: str, allowed: tuple[str, ...] = ()) -> str:
        got = raw(key)
        if got is None:
            return default
        k, v = got
        if not isinstance(v, str) or (allowed and v not in allowed):
            want = " or ".join(allowed) if allowed else "a string"
            raise InputError(f"{field}.{k}", f"must be {want}, got {v!r}")
        return v

    mem, bw, fl = num("memoryBytes"), num("hbmBytesPerSecond"), num("bf16Flops")
    fp8 = num("fp8Flops", required=False, positive=False)
    kind = text("interconnect", "pcie", ("nvlink", "pcie", "xgmi"))
    link = num("interconnectBytesPerSecond", required=False, default=32e9)
    family = text("family", "a100", ("a100", "h100"))
    label = text("nodeLabel", "")
    if label and ("=" not in label or label.startswith("=")):
        raise InputError(f"{field}.nodeLabel", f"must be key=value, got {label!r}")
    return GpuType(name, mem, bw, fl, fp8, kind, link, family,  # type: ignore[arg-type]
                   resource=text("resource", "nvidia.com/gpu"), node_label=label,
                   device_name=text("deviceName", ""), source="user-given GPU spec")


def get_gpu(name: str, *, field: str = "gpu") -> GpuType:
    if name not in CATALOGUE:
        raise InputError(field, f"unknown GPU type {name!r}", hint="known: " + ", ".join(CATALOGUE))
    return CATALOGUE[name]
