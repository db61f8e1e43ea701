"""``Twin``: the control plane, the GPU nodes, the node agent and a scraping Prometheus, started and stopped as one
(dev/test tooling; the parts are in the sibling modules).

Start order: :class:`.control.TwinCluster` (etcd, kube-apiserver, kube-controller-manager, kube-scheduler), the
nodes of :attr:`TwinConfig.pools`, Debian's Prometheus scraping the agent's target file every
:attr:`TwinConfig.scrape_s`, then the :class:`.agent.NodeAgent`. ``stop()`` reverses it: the agent stops every
``vllm serve`` it started before the control plane goes.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from kvplan_dev.prom import LocalPrometheus
from kvplan_dev.tools import Tools
from kvplan_dev.twin.agent import AgentConfig, NodeAgent, now_rfc3339
from kvplan_dev.twin.control import TwinCluster
from kvplan_dev.twin.nodes import NodePool, register_pools
from kvplan_dev.twin.scrape import ScrapeTargets, scrape_config

MODEL_ALIASES = {"meta-llama/Llama-3.1-70B-Instruct": "llama-70b", "meta-llama/Llama-3.1-8B-Instruct": "llama-8b"}
"""The examples' models: Llama 3.1 has Llama 3's shapes (layers, heads, KV heads, hidden and MLP sizes), which is
all the step clock reads; only the context length differs."""


@dataclass
class TwinConfig:
    """What the twin runs: its node pools and the agent's scales (see :class:`.agent.AgentConfig`)."""

    pools: list[NodePool] = field(default_factory=lambda: [NodePool("a100-80gb", "A100-80GB", count=2)])
    models: dict[str, str] = field(default_factory=lambda: dict(MODEL_ALIASES))
    time_scale: float = 1.0
    kv_scale: float = 0.05
    scrape_s: float = 2.0
    configmap_delay_s: float = 2.0
    backoff_s: float = 2.0


class Twin:
    """The running twin; use as a context manager. ``python``: the vLLM overlay's interpreter."""

    def __init__(self, python: Path, config: TwinConfig | None = None, tools: Tools | None = None,
                 workdir: Path | None = None) -> None:
        self.python = python
        self.config = config or TwinConfig()
        self.tools = tools
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="kvplan-twin-"))
        self.cluster: TwinCluster | None = None
        self.prometheus: LocalPrometheus | None = None
        self.agent: NodeAgent | None = None
        self.nodes: list[str] = []
        self._stack = ExitStack()

    def __enter__(self) -> "Twin":
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> "Twin":
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        from kubernetes import client, config as kube_config

        cluster = TwinCluster(self.tools, workdir=self.workdir / "cluster")
        self._stack.enter_context(cluster)
        self.cluster = cluster
        self.nodes = register_pools(cluster.kubectl, self.config.pools, now_rfc3339())
        targets = ScrapeTargets(self.workdir / "scrape-targets.json")
        self.prometheus = self._stack.enter_context(LocalPrometheus(
            self.tools, workdir=self.workdir / "prometheus",
            config=scrape_config(targets.path, self.config.scrape_s)))
        api = client.CoreV1Api(kube_config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(cluster.kubeconfig)))
        nodes = {name: pool.gpu for pool in self.config.pools for name in pool.node_names()}
        agent_config = AgentConfig(self.python, self.workdir / "agent", nodes, self.config.models,
                                   self.config.time_scale, self.config.kv_scale,
                                   configmap_delay_s=self.config.configmap_delay_s, backoff_s=self.config.backoff_s)
        self.agent = NodeAgent(api, agent_config, targets).start()
        self._stack.callback(self.agent.stop)

    def stop(self) -> None:
        """Stop the agent (and every server), Prometheus, then the control plane; remove the temp dir if ours."""
        self._stack.close()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def info(self) -> dict[str, Any]:
        """kubeconfig, Prometheus URL, nodes and versions."""
        return {**(self.cluster.info() if self.cluster else {}), "nodes": self.nodes,
                "prometheus": self.prometheus.url if self.prometheus else "",
                "prometheus_version": self.prometheus.version if self.prometheus else ""}


__all__ = ["MODEL_ALIASES", "Twin", "TwinConfig"]
