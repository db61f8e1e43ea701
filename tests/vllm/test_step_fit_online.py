"""The online step-time fit, end to end: a real ``vllm serve`` (0.33.0 on CPU, kvplan_dev's token-fabricating
executor) sleeps every engine step by a known law (intercept, per decoding sequence, per context token, per prefill
token: :mod:`kvplan_dev.twin.step_clock`), Debian's Prometheus scrapes its real ``/metrics`` every second, and the
operator's own code reads them: the capacity query for the engine's KV size, the one step-time range query
(:mod:`kvplan_operator.observe.sources.steptime`), the fit (:func:`kvcore.fit_step_law`), the status it reports
(``status.plan.groups.<g>.capacity.stepTimes`` and the StepTimes condition) and the profile it plans with.

Load: six phases of closed-loop clients (a fixed number of requests in flight, each re-sent as soon as it finishes)
with different batch sizes, prompt and output lengths, so that the windows move the four regressors apart; output
lengths spread around each phase's so the clients do not move in lock-step (a round finishing at once leaves the
engine idle for a moment, which the fit, reading W over the steps of a window, would count as step time). Nothing
waits on time except the phases themselves (a number of requests each, not a duration); the fit is asserted within
10% of the law, as the issue's target. The engine's own CPU time per step adds to the law (it is part of what a
real engine's step takes); the law's intercept of 50 ms and 3 ms per sequence keep it a few percent.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvcore import StepLaw
from kvplan_dev.prom import LocalPrometheus
from kvplan_dev.process import wait_until
from kvplan_dev.tools import ensure_apt
from kvplan_dev.twin.step_clock import ENV as CLOCK_ENV, ClockSpec
from kvplan_dev.vllm_cpu import VllmServer
from kvplan_operator import conditions as C
from kvplan_operator.decide.translate import step_overrides
from kvplan_operator.observe.capacity import SpecProfiles, capacity_view
from kvplan_operator.observe.sources.capacity import capacity_query, engine_capacity
from kvplan_operator.observe.sources.steptime import observe_step_fits
from kvplan_operator.prom import PromClient
from kvplan_operator.record.status import capacity_body, step_times_condition
from kvplan_operator.spec import parse_spec

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.timeout(1800)]  # the load alone is ~4 min

LAW = StepLaw(intercept_s=0.050, per_seq_s=3e-3, per_context_token_s=5e-6, per_prefill_token_s=2e-4)
BLOCKS = 2049  # 2,048 usable blocks of 16 tokens
MAX_MODEL_LEN = 4096
MODEL = "kvplan-fit"
NAMESPACE, POD = "fit", "fitgroup-7d9f8c6b5-x2x4q"
WINDOW_S = 10
#: (requests in flight, prompt tokens, output tokens, requests sent in the phase).
PHASES = [(4, 64, 64, 24), (32, 64, 64, 160), (16, 128, 192, 32), (4, 2048, 16, 60), (8, 1024, 64, 32),
          (24, 512, 128, 48)]


def _scrape_config(target: str) -> str:
    return ("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
            "  - job_name: kubernetes-pods\n    scrape_interval: 1s\n    scrape_timeout: 900ms\n"
            f"    static_configs:\n      - targets: [\"{target}\"]\n"
            f"        labels: {{namespace: {NAMESPACE}, pod: {POD}, container: vllm}}\n")


async def _phase(url: str, inflight: int, prompt: int, output: int, total: int, base: int) -> int:
    """``total`` requests with ``inflight`` at a time (each client sends its next as soon as one finishes); the
    number that came back complete."""
    import aiohttp

    todo = iter(range(total))
    done = 0

    async def client(session: Any) -> None:
        nonlocal done
        for i in todo:
            # output lengths spread over 0.5-1.5x the phase's (a golden-ratio sequence, no randomness), so the
            # clients fall out of step and the engine never waits on a round of them at once, as with real traffic
            tokens = max(2, round(output * (0.5 + (i * 0.6180339887) % 1.0)))
            body = {"model": MODEL, "prompt": [1000 + (base + i) % 20000] * prompt, "max_tokens": tokens,
                    "min_tokens": tokens, "ignore_eos": True}
            async with session.post(f"{url}/v1/completions", json=body) as resp:
                data = await resp.json()
                assert resp.status == 200, data
                done += data["usage"]["completion_tokens"] == tokens

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as session:
        await asyncio.gather(*(client(session) for _ in range(inflight)))
    return done


def _metric(url: str, name: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics") as resp:
        text = resp.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def _prom_value(prom: LocalPrometheus, expr: str) -> float | None:
    with urllib.request.urlopen(f"{prom.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})) as resp:
        result = json.loads(resp.read())["data"]["result"]
    return float(result[0]["value"][1]) if result else None


@pytest.fixture(scope="module")
def served(plugin_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalPrometheus, float]]:
    """The server under load and Prometheus holding its series; yields (Prometheus, the time the load ended)."""
    workdir = tmp_path_factory.mktemp("stepfit")
    clock = ClockSpec("A100-80GB", "llama-8b", law={k: getattr(LAW, k) for k in LAW.__dataclass_fields__})
    server = VllmServer(python=plugin_python, workdir=workdir, num_blocks=BLOCKS, max_model_len=MAX_MODEL_LEN,
                        served_model_name=MODEL, env={CLOCK_ENV: clock.to_env()},
                        extra_args=["--max-num-seqs", "64", "--max-num-batched-tokens", "4096",
                                    "--no-enable-prefix-caching"])
    prom: LocalPrometheus | None = None
    try:
        server.start()
        ensure_apt(["prometheus", "promtool"], print)
        prom = LocalPrometheus(workdir=workdir / "prom", config=_scrape_config(f"127.0.0.1:{server.port}")).start()
        wait_until(lambda: _prom_value(prom, "vllm:num_requests_running") is not None, timeout_s=120,  # type: ignore[union-attr]
                   what="the first scrape of vllm serve")
        base = 0
        for inflight, prompt, output, total in PHASES:
            done = asyncio.run(_phase(server.url, inflight, prompt, output, total, base))
            assert done == total, f"phase {inflight}x{prompt}+{output}: {done} of {total} requests complete"
            base += total
        ended = time.time()
        steps = _metric(server.url, "vllm:iteration_tokens_total_count")
        wait_until(lambda: (_prom_value(prom, "vllm:iteration_tokens_total_count") or 0) >= steps,  # type: ignore[union-attr]
                   timeout_s=120, what="Prometheus to scrape the last step")
        yield prom, ended
    finally:
        if prom is not None:
            prom.stop()
        server.stop()


def _spec(prom_url: str) -> Any:
    return parse_spec({
        "groups": [{"name": "fit", "deployment": "fitgroup", "container": "vllm", "model": "llama-8b",
                    "nodePool": {"gpuType": "A100-80GB", "gpuCount": 2, "nodeSelector": {"pool": "a"}},
                    "layouts": [{"tp": 1}, {"tp": 2}]}],
        "classes": [{"name": "chat", "inputTokens": 256, "maxOutputTokens": 1024, "arrivalRate": 1.0,
                     "history": {"source": "vllm", "group": "fit"}, "costs": {"preemption": 10, "waste": 1}}],
        "prometheus": {"url": prom_url},
        "capacity": {"stepTimes": {"windowSeconds": WINDOW_S, "lookbackSeconds": 1800, "minWindows": 8}},
    })


def test_the_fit_recovers_the_law_the_engine_sleeps_by(served: tuple[LocalPrometheus, float]) -> None:
    prom, ended = served
    spec = _spec(prom.url)
    client = PromClient(prom.url, timeout_s=30)
    now = ended + 2 * WINDOW_S
    engines = engine_capacity(client.query(capacity_query(spec, NAMESPACE, 60), at=now), spec, at=now)
    assert engines["fit"].kv_tokens == (BLOCKS - 1) * 16 or engines["fit"].kv_tokens == BLOCKS * 16, engines
    own = SpecProfiles.of(spec)
    fits = observe_step_fits(client, spec, NAMESPACE, now=now, engines=engines, layouts={"fit": (1, 1)},
                             unsettled={"fit": None}, since={}, models=own.models, gpus=own.gpus)
    fit = fits["fit"]
    print(f"\nfit: {fit}")
    assert fit.source == "fitted", fit
    assert fit.law is not None and fit.windows >= 8 and fit.residual is not None and fit.residual < 0.10
    for name in ("intercept_s", "per_seq_s", "per_context_token_s", "per_prefill_token_s"):
        got, want = getattr(fit.law, name), getattr(LAW, name)
        assert abs(got / want - 1) <= 0.10, f"{name}: fitted {got:.4g}, the law {want:.4g}"

    view = capacity_view(spec, engines, {"fit": (1, 1)}, {"fit": None}, fits)
    body = capacity_body(view["fit"])
    assert body is not None
    steps = body["stepTimes"]
    t0, t1 = LAW.line()
    assert steps["source"] == "fitted" and steps["windows"] == fit.windows
    assert abs(steps["t0Seconds"] / t0 - 1) <= 0.10 and abs(steps["t1Seconds"] / t1 - 1) <= 0.10, steps
    assert step_times_condition(True, view)[:2] == (True, C.STEP_TIMES_FITTED)  # type: ignore[index]

    overrides = {(o.tp, o.pp): o for o in step_overrides(spec, view)[0]}
    assert set(overrides) == {(1, 1), (2, 1)}
    assert overrides[(1, 1)].step_t0_s == pytest.approx(fit.law.intercept_s)
    assert overrides[(1, 1)].step_t1_s == pytest.approx(fit.law.line()[1])
    # TP=2 is the model's own TP=2 profile scaled by fitted / modelled at TP=1: never the TP=1 figures copied.
    assert overrides[(2, 1)].step_t0_s != pytest.approx(overrides[(1, 1)].step_t0_s)
