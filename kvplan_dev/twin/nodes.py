"""The twin's GPU nodes: Node objects the real scheduler places Pods on (pure manifests, and their registration).

Each node carries what the NVIDIA device plugin and GPU feature discovery put on a real GPU node: allocatable
``nvidia.com/gpu`` (or the catalogue GPU's own resource), the product label of the catalogue GPU
(:attr:`kvcore.profiles.gpus.GpuType.node_label`, e.g. ``nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB``), the
``nvidia.com/gpu=present:NoSchedule`` taint GPU node pools usually carry, and the pool label a user's node pool
has. ``status`` is written through the status subresource, as a kubelet does, with ``Ready=True``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from kvcore.profiles.gpus import get_gpu

POOL_LABEL = "kvplan.io/twin-pool"
"""The label naming the twin node pool a node belongs to."""


@dataclass(frozen=True)
class NodePool:
    """``count`` nodes of ``gpus`` GPUs of catalogue type ``gpu`` each."""

    name: str
    gpu: str
    count: int = 1
    gpus: int = 8
    cpu: str = "96"
    memory: str = "1Ti"
    taint: bool = True
    labels: tuple[tuple[str, str], ...] = ()
    """More node labels (a cloud's node-pool label, say)."""
    taints: tuple[tuple[str, str, str], ...] = ()
    """More taints, (key, value, effect) (a spot pool's, say)."""

    def node_names(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.count)]


def node_manifest(pool: NodePool, name: str) -> dict[str, Any]:
    """The Node object (metadata and spec; :func:`node_status` is written separately)."""
    gpu = get_gpu(pool.gpu, field=f"pools.{pool.name}.gpu")
    key, _, value = gpu.node_label.partition("=")
    labels = {key: value, POOL_LABEL: pool.name, "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
              "kubernetes.io/arch": "amd64", **dict(pool.labels)}
    taints = [{"key": gpu.resource, "value": "present", "effect": "NoSchedule"}] if pool.taint else []
    taints += [{"key": k, "value": v, "effect": e} for k, v, e in pool.taints]
    spec: dict[str, Any] = {"taints": taints} if taints else {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": spec}


def node_status(pool: NodePool, now: str) -> dict[str, Any]:
    """``status`` with capacity = allocatable (CPU, memory, pods, GPUs) and ``Ready=True`` at ``now`` (RFC 3339)."""
    gpu = get_gpu(pool.gpu, field=f"pools.{pool.name}.gpu")
    resources = {"cpu": pool.cpu, "memory": pool.memory, "pods": "110", gpu.resource: str(pool.gpus)}
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kvplan twin node agent",
             "lastHeartbeatTime": now, "lastTransitionTime": now}
    return {"capacity": resources, "allocatable": resources, "conditions": [ready],
            "nodeInfo": {"kubeletVersion": "twin", "containerRuntimeVersion": "kvplan-twin://vllm-serve",
                         "operatingSystem": "linux", "architecture": "amd64", "machineID": "", "systemUUID": "",
                         "bootID": "", "kernelVersion": "", "osImage": "", "kubeProxyVersion": ""}}


def register_pools(kubectl: Callable[..., Any], pools: list[NodePool], now: str) -> list[str]:
    """Create every pool's nodes and write their status (``kubectl``: :meth:`LocalCluster.kubectl`); names."""
    names: list[str] = []
    for pool in pools:
        for name in pool.node_names():
            kubectl("apply", "-f", "-", input_text=json.dumps(node_manifest(pool, name)))
            kubectl("patch", "node", name, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": node_status(pool, now)}))
            # The apiserver's TaintNodesByCondition admission taints a new node not-ready; the node lifecycle
            # controller lifts it once the node reports Ready. The twin runs without that controller
            # (kvplan_dev.twin.control), so the agent lifts it, as that controller would.
            kubectl("patch", "node", name, "--type=merge",
                    "-p", json.dumps({"spec": {"taints": node_manifest(pool, name)["spec"].get("taints", [])}}))
            names.append(name)
    return names


__all__ = ["POOL_LABEL", "NodePool", "node_manifest", "node_status", "register_pools"]
