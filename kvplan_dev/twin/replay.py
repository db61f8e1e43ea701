"""The trace replayer: a trace segment's requests sent to the serving Pods at their arrival times, each with its class
header, streamed, and every token timed on arrival (dev/test tooling).

No load tool from the registry fits: ``guidellm`` and ``inference-perf`` send text through a tokenizer, and the twin's
servers run with ``--skip-tokenizer-init`` (prompts are token ids), so this one is hand-written on aiohttp (kopf's
own HTTP client, already in the lock). It routes by the weights kvplan writes (:class:`WeightedRoutes`: the
HTTPRoute's ``backendRefs`` weights over each backend Service's ready Pods), in the replayer rather than through a
gateway; the twin's report says so.

A request is ``POST /v1/completions`` with ``prompt`` = its input length of token ids (a per-class shared prefix
first, so prefix caching sees what the trace's classes share), ``max_tokens = min_tokens =`` its output length,
``ignore_eos``, ``stream`` with usage. Bounded: at most ``max_requests``, and a guard (``guard_s``) that cancels
what is still running, counted as ``cancelled``, never silently dropped.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

PREFIX_BASE = 1000
UNIQUE_BASE = 20000


@dataclass(frozen=True)
class ReplayRequest:
    """One request of the segment: when (seconds from the start), which class, how long, which headers."""

    at_s: float
    klass: str
    input_tokens: int
    output_tokens: int
    prefix_tokens: int = 0
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Timing:
    """What the replayer saw of one request (seconds from its send)."""

    klass: str
    backend: str
    output_tokens: int
    sent_s: float = 0.0
    ttft_s: float | None = None
    e2e_s: float | None = None
    tokens: int = 0
    max_gap_s: float = 0.0
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.tokens == self.output_tokens


Route = Callable[[ReplayRequest], str]
"""Request -> the base URL (``http://ip:port``) of the server that gets it."""


class WeightedRoutes:
    """Per class, backends with weights (an HTTPRoute rule's ``backendRefs``), each backend a list of server URLs
    (its Service's ready Pods); a request picks a backend by weight, then a server round-robin. Seeded."""

    def __init__(self, table: Mapping[str, Sequence[tuple[Sequence[str], float]]], seed: int = 0) -> None:
        self.table = {k: [(list(urls), float(w)) for urls, w in v if urls and w > 0] for k, v in table.items()}
        self.rng = random.Random(seed)
        self._turn: dict[int, int] = {}

    def __call__(self, request: ReplayRequest) -> str:
        backends = self.table.get(request.klass) or self.table.get("*") or []
        if not backends:
            raise LookupError(f"class {request.klass!r}: no backend with a ready server and a positive weight")
        urls = self.rng.choices([b for b, _ in backends], weights=[w for _, w in backends])[0]
        turn = self._turn.get(id(urls), 0)
        self._turn[id(urls)] = turn + 1
        return urls[turn % len(urls)]


def prompt_ids(request: ReplayRequest, index: int, class_index: int) -> list[int]:
    """Token ids: the class's shared prefix, then ids unique to the request."""
    shared = min(request.prefix_tokens, request.input_tokens)
    return [PREFIX_BASE + class_index] * shared + [UNIQUE_BASE + index % 10000] * (request.input_tokens - shared)


async def _one(session: Any, url: str, model: str, prompt: list[int], request: ReplayRequest,
               timing: Timing, origin: float) -> None:
    body = {"model": model, "prompt": prompt, "max_tokens": request.output_tokens,
            "min_tokens": request.output_tokens, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    sent = time.monotonic()
    timing.sent_s = sent - origin
    last = sent
    try:
        async with session.post(f"{url}/v1/completions", json=body, headers=dict(request.headers)) as resp:
            if resp.status != 200:
                timing.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                return
            async for raw in resp.content:
                line = raw.decode(errors="replace").strip()
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[5:])
                if chunk.get("usage"):
                    timing.tokens = int(chunk["usage"].get("completion_tokens", timing.tokens))
                if not chunk.get("choices"):
                    continue
                now = time.monotonic()
                if timing.ttft_s is None:
                    timing.ttft_s = now - sent
                else:
                    timing.max_gap_s = max(timing.max_gap_s, now - last)
                last = now
        timing.e2e_s = last - sent
    except asyncio.CancelledError:
        timing.error = "cancelled"
        raise
    except Exception as exc:  # noqa: BLE001 - a failed request is a result, not a crash of the replay
        timing.error = f"{type(exc).__name__}: {exc}"[:200]


async def replay_async(requests: Sequence[ReplayRequest], route: Route, model: str, *, guard_s: float,
                       max_requests: int | None = None, time_scale: float = 1.0) -> list[Timing]:
    """Send ``requests`` (sorted by ``at_s``) at ``at_s * time_scale``; every request's :class:`Timing`."""
    import aiohttp

    chosen = sorted(requests, key=lambda r: r.at_s)[:max_requests]
    classes = {k: i for i, k in enumerate(sorted({r.klass for r in chosen}))}
    timings = [Timing(r.klass, "", r.output_tokens) for r in chosen]
    origin = time.monotonic()
    tasks: list[asyncio.Task[None]] = []
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
        try:
            async with asyncio.timeout(guard_s):
                for index, request in enumerate(chosen):
                    delay = origin + request.at_s * time_scale - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    try:
                        url = route(request)
                    except LookupError as exc:
                        timings[index].error = str(exc)
                        continue
                    timings[index].backend = url
                    prompt = prompt_ids(request, index, classes[request.klass])
                    tasks.append(asyncio.create_task(
                        _one(session, url, model, prompt, request, timings[index], origin)))
                await asyncio.gather(*tasks, return_exceptions=True)
        except TimeoutError:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    for t in timings:
        if not t.backend and not t.error:
            t.error = "cancelled"
    return timings


def replay(requests: Sequence[ReplayRequest], route: Route, model: str, *, guard_s: float,
           max_requests: int | None = None, time_scale: float = 1.0) -> list[Timing]:
    """:func:`replay_async` on a new event loop."""
    return asyncio.run(replay_async(requests, route, model, guard_s=guard_s, max_requests=max_requests,
                                    time_scale=time_scale))


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def summarize(timings: Sequence[Timing], *, ttft_slo_s: float, tpot_slo_s: float, duration_s: float,
              gpus: int) -> dict[str, Any]:
    """Per phase: counts, TTFT and e2e P50/P99 (s), the stalled share (a gap between two tokens over 4x the
    TPOT SLO), and goodput: requests within SLO (TTFT <= ttft_slo_s and mean TPOT <= tpot_slo_s) per second and
    per GPU-second."""
    done = [t for t in timings if t.ok and t.ttft_s is not None and t.e2e_s is not None]
    ttft = [t.ttft_s for t in done if t.ttft_s is not None]
    e2e = [t.e2e_s for t in done if t.e2e_s is not None]

    def within(t: Timing) -> bool:
        assert t.ttft_s is not None and t.e2e_s is not None
        tpot = (t.e2e_s - t.ttft_s) / max(1, t.tokens - 1)
        return t.ttft_s <= ttft_slo_s and tpot <= tpot_slo_s

    good = sum(1 for t in done if within(t))
    return {
        "requests": len(timings), "completed": len(done),
        "failed": sum(1 for t in timings if t.error and t.error != "cancelled"),
        "cancelled": sum(1 for t in timings if t.error == "cancelled"),
        # what went wrong, once each (at most 5): a failed request says why in the report and in a test's message
        "errors": list(dict.fromkeys(t.error for t in timings if t.error and t.error != "cancelled"))[:5],
        "ttft_p50_s": _pct(ttft, 0.5), "ttft_p99_s": _pct(ttft, 0.99),
        "e2e_p50_s": _pct(e2e, 0.5), "e2e_p99_s": _pct(e2e, 0.99),
        "stalled_share": (sum(1 for t in done if t.max_gap_s > 4 * tpot_slo_s) / len(done)) if done else None,
        "within_slo": good, "goodput_per_s": good / duration_s if duration_s > 0 else None,
        "goodput_per_gpu_s": good / duration_s / gpus if duration_s > 0 and gpus > 0 else None,
    }


__all__ = ["ReplayRequest", "Route", "Timing", "WeightedRoutes", "prompt_ids", "replay", "replay_async",
           "summarize"]
