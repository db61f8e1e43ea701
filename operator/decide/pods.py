"""Engines -> pods, for groups whose pods run several vLLM engines (data parallelism). Pure.

kvcore plans engines: each one TP x PP GPUs, ``replicas`` of them per group. A pod started with
``--data-parallel-size-local D`` (llm-d's decode pods) runs D engines, so it requests D x TP x PP GPUs and the
Deployment needs ``replicas / D`` pods. When the plan's engines are not a multiple of D, the group gets the next
whole number of pods if those still fit the pool's ``gpuCount``, else one fewer (never more GPUs than the pool has);
:func:`pods_note` says so.
"""

from __future__ import annotations


def pods(engines: int, dp_local: int, gpus_per_engine: int, gpu_count: int) -> int:
    """Pods that run ``engines`` engines at ``dp_local`` engines per pod within ``gpu_count`` GPUs."""
    if dp_local <= 1:
        return engines
    up = -(-engines // dp_local)
    return up if up * dp_local * gpus_per_engine <= gpu_count else engines // dp_local


def pods_note(group: str, engines: int, dp_local: int, count: int) -> str | None:
    """A note when ``count`` pods of ``dp_local`` engines do not run exactly the plan's ``engines``; else None."""
    if dp_local <= 1 or count * dp_local == engines:
        return None
    return (f"group {group}: {engines} engine(s) planned, {count} pod(s) of {dp_local} data-parallel engines run "
            f"{count * dp_local}")
