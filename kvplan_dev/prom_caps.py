"""A scripted Prometheus on loopback that answers at the operator's caps (issue 26, item 4): the history range
query gets 1,024 values of the class label x 64 buckets = 65,536 series (``history.MAX_KEYS``, ``MAX_SERIES``) over
48 windows (the CRD's most), about 57 MiB (under the client's 64 MiB); every other query an empty vector (the
groups stay on their profiles). :func:`caps_spec` is a KVPlan spec whose 256 classes (the CRD's most) are 256 of
those values. Used by ``benchmarks/operator_memory.py`` and ``tests/unit/test_op_memory.py``.

The answer is built per request from its ``start`` and ``step`` (timestamps on the range's steps, as Prometheus
answers), one series at a time into one bytes object.
"""

from __future__ import annotations

import http.server
import threading
import urllib.parse
from typing import Any

KEYS, BUCKETS, WINDOWS, CLASSES = 1024, 64, 48, 256
#: Finite bucket bounds (tokens): 16, 32, ..., 1008; then +Inf. Each window counts one request per bucket.
BOUNDS = [str(16 * (i + 1)) for i in range(BUCKETS - 1)] + ["+Inf"]
LABEL = "kvplan_class"


def class_value(i: int) -> str:
    return f"c{i:04d}"


def caps_answer(start: float, step: float, *, keys: int = KEYS, windows: int = WINDOWS) -> bytes:
    """The range-query answer at the caps (module docstring)."""
    times = [int(round(start + k * step)) for k in range(windows)]
    values = [("[" + ",".join(f'[{t},"{j + 1}"]' for t in times) + "]").encode() for j in range(len(BOUNDS))]
    parts = [b'{"status":"success","data":{"resultType":"matrix","result":[']
    first = True
    for i in range(keys):
        key = class_value(i).encode()
        for j, le in enumerate(BOUNDS):
            parts.append((b"" if first else b",") + b'{"metric":{"le":"' + le.encode() + b'","' + LABEL.encode()
                         + b'":"' + key + b'"},"values":' + values[j] + b"}")
            first = False
    parts.append(b"]}}")
    return b"".join(parts)


EMPTY_VECTOR = b'{"status":"success","data":{"resultType":"vector","result":[]}}'


def caps_spec(url: str, *, classes: int = CLASSES, name: str = "caps") -> dict[str, Any]:
    """A KVPlan spec (DryRun) whose classes read the caps answer: ``classes`` classes, one group."""
    return {
        "mode": "DryRun",
        "groups": [{"name": "g", "deployment": f"{name}-vllm", "container": "vllm", "model": "llama-8b",
                    "nodePool": {"gpuCount": 8}, "layouts": [{"tp": 1}, {"tp": 2}]}],
        "classes": [{"name": class_value(i), "inputTokens": 500, "maxOutputTokens": 2048,
                     "history": {"source": "kvplan", "minSamples": 10}, "costs": {"preemption": 10, "waste": 1}}
                    for i in range(classes)],
        "prometheus": {"url": url, "lookback": "48h", "windows": WINDOWS, "timeoutSeconds": 60},
        "capacity": {"fromEngine": False},
    }


class CapsPrometheus:
    """Serves the caps answer on 127.0.0.1 (a daemon thread per request); ``requests`` counts them."""

    def __init__(self, *, keys: int = KEYS) -> None:
        self.requests = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                outer.requests += 1
                path, _, query = self.path.partition("?")
                params = urllib.parse.parse_qs(query)
                if path.endswith("/query_range"):
                    step = float(params["step"][0].rstrip("s"))
                    body = caps_answer(float(params["start"][0]), step, keys=keys)
                else:
                    body = EMPTY_VECTOR
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    def __enter__(self) -> CapsPrometheus:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
