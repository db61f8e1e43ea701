"""The ``status`` a kubelet writes for a one-container Pod, from what the twin's agent saw (pure).

Phases and conditions as the kubelet sets them for ``restartPolicy: Always``: ``Pending`` until the container
first starts; then ``Running``, with ``ContainersReady``/``Ready`` following the readiness probe; a container that
exited is ``waiting: CrashLoopBackOff`` with its ``lastState.terminated`` (exit code, reason) until its restart,
and ``restartCount`` counts the restarts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class ContainerView:
    """What the agent knows of the container."""

    name: str
    image: str
    started_at: str | None = None
    """RFC 3339 time the running process started; None while not running."""
    ready: bool = False
    restarts: int = 0
    waiting: tuple[str, str] | None = None
    """(reason, message) while not running: ContainerCreating, CreateContainerError, CrashLoopBackOff."""
    last_exit: tuple[int, str, str] | None = None
    """(exit code, reason, finished at) of the last run that ended."""


def pod_status(container: ContainerView, *, pod_ip: str, host_ip: str, start_time: str, now: str) -> dict[str, Any]:
    """The Pod's ``status`` (for a strategic-merge patch of ``pods/status``)."""
    running = container.started_at is not None and container.waiting is None
    ever_started = running or container.last_exit is not None
    state: dict[str, Any]
    if running:
        state = {"running": {"startedAt": container.started_at}}
    else:
        reason, message = container.waiting or ("ContainerCreating", "")
        state = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
    status_container: dict[str, Any] = {
        "name": container.name, "image": container.image, "imageID": "", "ready": bool(running and container.ready),
        "started": running, "restartCount": container.restarts, "state": state, "lastState": {},
    }
    if running:
        status_container["containerID"] = f"kvplan-twin://{container.name}-{container.restarts}"
    if container.last_exit is not None:
        code, reason, finished = container.last_exit
        status_container["lastState"] = {"terminated": {"exitCode": code, "reason": reason, "finishedAt": finished}}
    ready = "True" if running and container.ready else "False"
    conditions = [
        {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": start_time},
        {"type": "Initialized", "status": "True", "lastTransitionTime": start_time},
        {"type": "ContainersReady", "status": ready, "lastTransitionTime": now},
        {"type": "Ready", "status": ready, "lastTransitionTime": now},
    ]
    return {"phase": "Running" if ever_started else "Pending", "podIP": pod_ip, "podIPs": [{"ip": pod_ip}],
            "hostIP": host_ip, "hostIPs": [{"ip": host_ip}], "startTime": start_time, "conditions": conditions,
            "containerStatuses": [status_container]}


def status_key(status: dict[str, Any]) -> tuple[Any, ...]:
    """What decides whether a status must be written again (times of unchanged conditions do not)."""
    c = status["containerStatuses"][0]
    return (status["phase"], c["ready"], c["restartCount"], tuple(sorted(c["state"])),
            (c["state"].get("waiting") or {}).get("reason"), str(c["lastState"]))


__all__ = ["ContainerView", "pod_status", "status_key"]
