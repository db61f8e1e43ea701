"""A TCP server on 127.0.0.1 that answers every request with a scripted, paced byte stream (issue 26: a slow
Prometheus). Each behaviour is a generator of byte strings; the server sends them one by one with ``pause`` seconds
between, for at most ``duration`` seconds, so a per-read socket timeout larger than ``pause`` never fires while
only a deadline for the whole request can end the wait. Used by the tests of the Prometheus client's deadlines,
the cycle deadline and the operator's stop."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator

Behaviour = Callable[[], Iterator[bytes]]


def _forever(piece: bytes) -> Iterator[bytes]:
    while True:
        yield piece


def _bytes(text: bytes) -> Iterator[bytes]:
    for i in range(len(text)):
        yield text[i:i + 1]


def status_line() -> Iterator[bytes]:
    """The status line itself, one byte at a time, then an endless header line."""
    yield from _bytes(b"HTTP/1.1 200 OK\r\n")
    yield b"X-Slow: "
    yield from _forever(b"a")


def headers() -> Iterator[bytes]:
    """A complete status line, then one header after another, each a byte at a time (http.client reads up to 100)."""
    yield b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    n = 0
    while True:
        yield from _bytes(b"X-H%d: v\r\n" % n)
        n += 1


def body_with_length() -> Iterator[bytes]:
    """Headers with a Content-Length, then the body one byte at a time (whitespace inside the JSON object)."""
    yield b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n"
    yield b'{"status": "success", '
    yield from _forever(b" ")


def body_chunked() -> Iterator[bytes]:
    """Chunked transfer encoding, one one-byte chunk per pause."""
    yield b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    yield b"16\r\n" + b'{"status": "success", ' + b"\r\n"
    yield from _forever(b"1\r\n \r\n")


def body_until_close() -> Iterator[bytes]:
    """No length, ``Connection: close``: the body ends when the server closes, which it never does."""
    yield b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
    yield b'{"status": "success", "data": {"resultType": "matrix", "result": ['
    yield from _forever(b" ")


def series_by_series() -> Iterator[bytes]:
    """A valid, endless matrix answer, one small series per pause (every read returns data)."""
    yield b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
    yield b'{"status": "success", "data": {"resultType": "matrix", "result": ['
    yield b'{"metric": {"le": "+Inf"}, "values": [[0, "1"]]}'
    yield from _forever(b', {"metric": {"le": "+Inf"}, "values": [[0, "1"]]}')


def error_body() -> Iterator[bytes]:
    """A 500 whose body trickles (the error path reads a body too)."""
    yield b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 100000\r\n\r\n"
    yield from _forever(b"x")


BEHAVIOURS: dict[str, Behaviour] = {
    "status-line": status_line,
    "headers": headers,
    "body-content-length": body_with_length,
    "body-chunked": body_chunked,
    "body-until-close": body_until_close,
    "series-by-series": series_by_series,
    "error-body": error_body,
}


class SlowServer:
    """Serves ``behaviour`` to every connection; ``requests`` counts requests whose head was read; ``pause`` and
    ``duration`` in seconds."""

    def __init__(self, behaviour: Behaviour, *, pause: float = 0.2, duration: float = 60.0) -> None:
        self.behaviour, self.pause, self.duration = behaviour, pause, duration
        self.stop = threading.Event()
        self.requests = 0
        #: requests being answered now, and the most at once
        self.in_flight = 0
        self.peak_in_flight = 0
        self.seen = threading.Event()
        lock = threading.Lock()
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock: socket.socket = self.request
                head = b""
                while b"\r\n\r\n" not in head:
                    data = sock.recv(4096)
                    if not data:
                        return
                    head += data
                with lock:
                    outer.requests += 1
                    outer.in_flight += 1
                    outer.peak_in_flight = max(outer.peak_in_flight, outer.in_flight)
                outer.seen.set()
                end = time.monotonic() + outer.duration
                try:
                    for piece in outer.behaviour():
                        if outer.stop.is_set() or time.monotonic() > end:
                            return
                        sock.sendall(piece)
                        outer.stop.wait(outer.pause)
                except OSError:  # the client cut the request
                    return
                finally:
                    with lock:
                        outer.in_flight -= 1

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> SlowServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def slow_prometheus(name: str, **kw: float) -> Iterator[SlowServer]:
    with SlowServer(BEHAVIOURS[name], **kw) as server:
        yield server
