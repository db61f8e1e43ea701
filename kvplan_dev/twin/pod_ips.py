"""Pod IPs on loopback: each twin Pod gets an address of its own in ``127.0.0.0/8`` (Linux routes all of it to
``lo``), so every server listens on its own container port, as in a pod network, and Prometheus scrapes
``<pod IP>:<port>``. The block is picked from the PID, and an address whose port 8000 is taken is skipped, so
two twins on one machine do not collide."""

from __future__ import annotations

import os
import socket


def _free(ip: str, port: int = 8000) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((ip, port))
        except OSError:
            return False
    return True


class PodIps:
    """Hands out ``127.<a>.<b>.<n>`` addresses (``n`` from 2) and takes them back."""

    def __init__(self, block: int | None = None) -> None:
        block = os.getpid() % 60000 if block is None else block
        self.prefix = f"127.{100 + block // 256 % 150}.{block % 256}"
        self.used: set[str] = set()

    def allocate(self) -> str:
        for n in range(2, 255):
            ip = f"{self.prefix}.{n}"
            if ip not in self.used and _free(ip):
                self.used.add(ip)
                return ip
        raise RuntimeError(f"no free pod IP left in {self.prefix}.0/24")

    def release(self, ip: str) -> None:
        self.used.discard(ip)


__all__ = ["PodIps"]
