"""``TwinCluster``: :class:`kvplan_dev.cluster.LocalCluster` plus the real kube-controller-manager and
kube-scheduler, built from the same ``k8s.io/kubernetes`` release as its kube-apiserver
(:func:`kvplan_dev.tools.ensure_kube_components`).

Deployments become ReplicaSets and Pods, rollouts follow their strategy, the garbage collector removes what an owner
leaves behind, ServiceAccounts and their tokens appear in new namespaces, and the scheduler binds Pods to Nodes by
``nvidia.com/gpu``, node selectors and taints. Both run with the admin kubeconfig, no leader election and no serving
port. Left out: the node lifecycle controller, since the twin's nodes (:mod:`kvplan_dev.twin.nodes`) send no
kubelet heartbeats and it would taint and evict them. The controllers that need a cloud or ``--allocate-node-cidrs``
do not start without them, as on any cluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvplan_dev.cluster import LocalCluster
from kvplan_dev.process import ManagedProcess, wait_until
from kvplan_dev.tools import Tools, binary_version, locate_kube_components

DISABLED_CONTROLLERS = ("node-lifecycle-controller",)
"""kube-controller-manager ``--controllers`` left out (``-<name>``, by the names in k/k's
``cmd/kube-controller-manager/names``; the flag refuses an unknown name)."""


class TwinCluster(LocalCluster):
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler on loopback."""

    def __init__(self, tools: Tools | None = None, workdir: Path | None = None, ready_timeout_s: float = 180.0,
                 components: dict[str, Path] | None = None) -> None:
        """``components``: name -> binary of kube-controller-manager and kube-scheduler (default: the cached
        builds; :class:`kvplan_dev.gobuild.BuildError` names what is missing)."""
        super().__init__(tools, workdir=workdir, ready_timeout_s=ready_timeout_s)
        self.components = components or locate_kube_components()
        self.component_versions: dict[str, str] = {}

    def _start(self) -> None:
        super()._start()
        for name in ("kube-controller-manager", "kube-scheduler"):
            self.component_versions[name] = binary_version(self.components[name])
            self._start_component(name, self._component_args(name))
        self._wait_default_service_account()

    def _component_args(self, name: str) -> list[str]:
        kubeconfig = f"--kubeconfig={self.kubeconfig}"
        common = [kubeconfig, "--leader-elect=false", "--secure-port=0", "--v=1"]
        if name == "kube-scheduler":
            return common
        disabled = ",".join(f"-{c}" for c in DISABLED_CONTROLLERS)
        return common + [f"--controllers=*,{disabled}",
                         f"--service-account-private-key-file={self.workdir / 'sa.key'}",
                         f"--root-ca-file={self.workdir / 'serving.crt'}",
                         "--use-service-account-credentials=false", "--concurrent-deployment-syncs=2",
                         "--concurrent-replicaset-syncs=2"]

    def _start_component(self, name: str, args: list[str]) -> None:
        proc = ManagedProcess(name, [str(self.components[name]), *args], self.workdir / f"{name}.log",
                              die_with_parent=self.die_with_parent)
        self._procs.append(proc)
        self.history.append(proc.record)

    def _wait_default_service_account(self) -> None:
        """The controller-manager is working once the ServiceAccount controller made ``default/default`` (Pods
        cannot be created in a namespace before its ServiceAccount exists)."""
        kcm = next(p for p in self._procs if p.name == "kube-controller-manager")

        def made() -> bool:
            return self.kubectl("-n", "default", "get", "serviceaccount", "default", check=False).returncode == 0

        wait_until(made, timeout_s=self.ready_timeout_s, what="kube-controller-manager: ServiceAccount default/default",
                   proc=kcm, every_s=0.5)

    def info(self) -> dict[str, Any]:
        """As :meth:`LocalCluster.info`, with the controller-manager's and scheduler's versions."""
        return {**super().info(), **{f"{k.replace('kube-', '').replace('-', '_')}_version": v
                                     for k, v in self.component_versions.items()}}


__all__ = ["DISABLED_CONTROLLERS", "TwinCluster"]
