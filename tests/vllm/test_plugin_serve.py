"""kvplan's vLLM plugins in a real ``vllm serve`` (vLLM 0.33.0 on CPU, kvplan's token-fabricating executor),
receiving ``/v1/completions`` requests with token-id prompts and ``vllm_xargs``.

The server runs ``--scheduler-cls kvplan_dev.vllm_hold.HeldAsyncReservationScheduler``: kvplan's
``AsyncReservationScheduler`` (async scheduling switched back on, as on a GPU) behind a test-only burst hold that
waits, in vLLM's own ``PAUSED_ALL`` state, until a burst of N requests is queued, so a burst is scheduled at once
whatever the machine's speed. The stat logger is loaded by vLLM from the entry point that ``pip install`` registered.
The reservation file is a ConfigMap-style volume (``..data`` symlink swaps) read with the default check interval
(16 steps). Which requests a step admitted comes from the executor's step log.

Shown, in order (one server):

1. admissions are gated by the reservations (hand-computed: 5 of 7 fit; the unknown class and the request naming
   none wait with the default's reserve; no preemption);
2. a reservation changed in the mounted file takes effect without a restart (the same burst shape then fits 8);
3. invalid files (truncated, unknown class, negative, non-numeric, missing) keep the last good values and are
   logged once each by the engine core;
4. with nothing reserved vLLM preempts, and the plugin's per-class preemption counter equals vLLM's own;
5. the plugin's series on ``/metrics`` carry exact counts, sums and buckets per class for every request sent, the
   class being what the API-server process can see: the prompt-length rules, else the default (a request the
   scheduler classes by ``vllm_xargs`` counts under the default there, and an ``X-Request-Id`` names no class).
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvcore.history import series
from kvplan_dev.mounted_configmap import remove_configmap_key, write_configmap_volume
from kvplan_dev.process import wait_until
from kvplan_dev.vllm_cpu import VllmServer

pytestmark = pytest.mark.vllm

BLOCKS = 65  # 64 usable blocks of 16 tokens (vLLM keeps one null block)
MAX_MODEL_LEN = 1024
MODEL = "kvplan-test"
RULES = [{"maxPromptTokens": 8, "class": "tiny"}]


def reservations(plan: str, chat: Any, batch: Any = 400, tiny: Any = 16, **extra: Any) -> str:
    doc = {"format": "kvplan.reservations.v1", "plan": plan, "defaultClass": "chat",
           "classes": {"chat": {"reserveTokens": chat}, "batch": {"reserveTokens": batch},
                       "tiny": {"reserveTokens": tiny}},
           "priorityClasses": {}, "promptLengthRules": RULES, **extra}
    return json.dumps(doc)


@dataclass
class Sent:
    """Every request the tests sent, for the exact /metrics comparison."""

    outputs: dict[str, list[int]] = field(default_factory=dict)

    def add(self, klass: str, tokens: int) -> None:
        self.outputs.setdefault(klass, []).append(tokens)


@dataclass
class Serve:
    server: VllmServer
    volume: Path
    hold: Path
    steps: Path
    sent: Sent
    rng: np.random.Generator
    next_token: int = 1000
    bursts: int = 0

    def prompt(self, length: int) -> list[int]:
        """A prompt whose first token is new (no prefix-cache hit across requests)."""
        self.next_token += 1
        return [self.next_token] + self.rng.integers(3, 30000, size=length - 1).tolist()

    def write(self, content: str | None) -> None:
        if content is None:
            remove_configmap_key(self.volume, "reservations.json")
        else:
            write_configmap_volume(self.volume, {"reservations.json": content})


@pytest.fixture(scope="module")
def serve(plugin_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    workdir = tmp_path_factory.mktemp("serve")
    volume, hold, steps = workdir / "kvplan", workdir / "hold", workdir / "steps.jsonl"
    write_configmap_volume(volume, {"reservations.json": reservations("r1", chat=160)})
    server = VllmServer(
        python=plugin_python, workdir=workdir, num_blocks=BLOCKS, max_model_len=MAX_MODEL_LEN, served_model_name=MODEL,
        scheduler_cls="kvplan_dev.vllm_hold.HeldAsyncReservationScheduler",
        env={"KVPLAN_RESERVATIONS_FILE": str(volume / "reservations.json"), "KVPLAN_HOLD_FILE": str(hold),
             "KVPLAN_FAKE_STEP_LOG": str(steps), "KVPLAN_FAKE_ASYNC_SCHEDULING": "1", "VLLM_NO_USAGE_STATS": "1",
             "HF_HUB_OFFLINE": "1"},
    )
    try:
        server.start()
    except RuntimeError as exc:
        server.stop()
        pytest.fail(str(exc), pytrace=False)
    print(f"\nvllm serve ready after {server.startup_s:.1f} s")
    try:
        yield Serve(server, volume, hold, steps, Sent(), np.random.default_rng(20261130))
    finally:
        left = server.stop()
        assert left == [], f"processes of vllm serve still running after SIGKILL: {left}"


def complete(s: Serve, rid: str, prompt: list[int], tokens: int, xargs: dict[str, Any] | None) -> dict[str, Any]:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": tokens, "min_tokens": tokens, "ignore_eos": True}
    if xargs is not None:
        body["vllm_xargs"] = xargs
    req = urllib.request.Request(s.server.url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "X-Request-Id": rid})
    with urllib.request.urlopen(req, timeout=600) as resp:
        return json.loads(resp.read())  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Req:
    rid: str  # X-Request-Id, to find the request in the step log; ends with "x" so no id is a prefix of another
    prompt_len: int
    tokens: int
    xargs: dict[str, Any] | None
    label: str  # the class the API server must give it (prompt rules, else default)


def send(s: Serve, reqs: list[Req], *, burst: bool) -> None:
    """Send concurrently; with ``burst`` the scheduler holds until all of them wait. Checks every completion."""
    if burst:
        s.bursts += 1
        tmp = s.hold.with_suffix(".tmp")
        tmp.write_text(f"{len(reqs)} burst {s.bursts}\n")
        os.replace(tmp, s.hold)  # atomic: the scheduler never sees half a file
    prompts = [s.prompt(r.prompt_len) for r in reqs]
    with ThreadPoolExecutor(len(reqs)) as pool:
        answers = list(pool.map(lambda rp: complete(s, rp[0].rid, rp[1], rp[0].tokens, rp[0].xargs),
                                zip(reqs, prompts)))
    for r, answer in zip(reqs, answers):
        assert answer["usage"]["completion_tokens"] == r.tokens, answer
        assert answer["choices"][0]["finish_reason"] == "length"
        s.sent.add(r.label, r.tokens)


def admissions(s: Serve, reqs: list[Req]) -> dict[str, list[int]]:
    """Steps (executor step index) at which each request was admitted (new) or resumed after a preemption."""
    out: dict[str, list[int]] = {r.rid: [] for r in reqs}
    for line in s.steps.read_text().splitlines():
        step = json.loads(line)
        for internal in step["new"] + step["resumed"]:
            for r in reqs:
                if r.rid in internal:
                    out[r.rid].append(step["step"])
    return out


def last_step(s: Serve, reqs: list[Req]) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in s.steps.read_text().splitlines():
        step = json.loads(line)
        for internal in step["scheduled"]:
            for r in reqs:
                if r.rid in internal:
                    out[r.rid] = step["step"]
    return out


def scrape(s: Serve) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(s.server.url + "/metrics", timeout=60) as resp:
        text = resp.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def vllm_preemptions(m: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> float:
    return sum(v for (name, _), v in m.items() if name.endswith("num_preemptions_total") and "kvplan" not in name)


def kvplan_preemptions(m: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
    return {dict(labels)[series.KVPLAN_CLASS_LABEL]: v for (name, labels), v in m.items()
            if name == series.KVPLAN_PREEMPTIONS + "_total"}


def engine_log(s: Serve, needle: str) -> list[str]:
    return [line for line in s.server.log_text().splitlines() if line.startswith("(EngineCore") and needle in line]


def warm_up(s: Serve, tag: str) -> None:
    """One request of 40 tokens: more than 16 engine steps, so the reservation file is checked at least twice."""
    send(s, [Req(f"warm-{tag}x", 16, 40, {"kvplan_class": "chat"}, "chat")], burst=False)


def test_admissions_are_gated_by_the_reservations(serve: Serve) -> None:
    """File r1: chat reserves 160. Seven requests, prompt 32, 160 output tokens: footprint 192 tokens = 12 blocks
    of the 64, so exactly 5 fit (60) and a sixth would need 72. One names the unknown class "nope", one names nothing and its prompt is longer than the tiny rule's 8 tokens: both get the
    default, chat. Whatever order the seven reach the queue in (HTTP requests race), exactly 5 are admitted in
    the burst's first step and the other 2 together once those 5 have finished; nothing is preempted. (Had
    "nope" reserved nothing, 6 would have fitted: 5 x 12 + 2 or 4 x 12 + 2 + 12 <= 64.)"""
    before = scrape(serve)
    reqs = [Req(f"a{i}x", 32, 160, {"kvplan_class": "chat"}, "chat") for i in range(5)]
    reqs += [Req("a5x", 32, 160, {"kvplan_class": "nope"}, "chat"), Req("a6x", 32, 160, None, "chat")]
    send(serve, reqs, burst=True)
    admitted = admissions(serve, reqs)
    assert all(len(a) == 1 for a in admitted.values()), admitted
    steps = sorted({a[0] for a in admitted.values()})
    assert len(steps) == 2, admitted
    first = [rid for rid, a in admitted.items() if a[0] == steps[0]]
    later = [rid for rid, a in admitted.items() if a[0] == steps[1]]
    assert (len(first), len(later)) == (5, 2), admitted
    done = last_step(serve, [r for r in reqs if r.rid in first])
    assert steps[1] > max(done.values()), (admitted, done)
    assert vllm_preemptions(scrape(serve)) == vllm_preemptions(before)
    assert len(engine_log(serve, "reservation gate on (HeldAsyncReservationScheduler, async scheduling on")) == 1
    assert len(engine_log(serve, "names no class of the reservation file")) == 1


def test_a_changed_file_takes_effect_without_restart(serve: Serve) -> None:
    """File r2 (kubelet-style swap): chat reserves 32. Eight requests, prompt 32, 32 output tokens: footprint 64
    tokens = 4 blocks, all 8 fit (32 blocks) and are admitted in one step; under r1 only 5 would have fit."""
    pid = serve.server.process.record.pid if serve.server.process else None
    serve.write(reservations("r2", chat=32))
    warm_up(serve, "r2")
    wait_until(lambda: bool(engine_log(serve, "plan r2")), timeout_s=600, what="engine core loads plan r2")
    reqs = [Req(f"b{i}x", 32, 32, {"kvplan_class": "chat"}, "chat") for i in range(8)]
    send(serve, reqs, burst=True)
    admitted = admissions(serve, reqs)
    assert len({a[0] for a in admitted.values()}) == 1 and all(len(a) == 1 for a in admitted.values()), admitted
    assert serve.server.process is not None and serve.server.process.record.pid == pid
    assert serve.server.process.poll() is None
    assert len(engine_log(serve, "reservation gate on")) == 1, "the engine core restarted"


BAD = [
    pytest.param(reservations("bad1", chat=160)[:70], "not valid JSON", id="truncated"),
    pytest.param(reservations("bad2", chat=160, priorityClasses={"3": "ghost"}), 'priorityClasses.3: class "ghost"',
                 id="unknown-class"),
    pytest.param(reservations("bad3", chat=160, batch=-400), "classes.batch.reserveTokens: must be >= 0",
                 id="negative"),
    pytest.param(reservations("bad4", chat="160"), "classes.chat.reserveTokens: must be a non-negative whole number",
                 id="non-numeric"),
    pytest.param(None, "missing or unreadable", id="missing"),
]


@pytest.mark.parametrize(("content", "needle"), BAD)
def test_a_bad_file_keeps_the_last_good_values_and_is_logged_once(serve: Serve, content: str | None,
                                                                  needle: str) -> None:
    """Each bad version would reserve 160 for chat if it were used; after it, the same 8-request burst as under r2
    must still be admitted in one step (r2 kept). The engine core says so once per version, however many steps
    it re-checks the file."""
    serve.write(content)
    warm_up(serve, "bad-a")
    wait_until(lambda: bool(engine_log(serve, needle)), timeout_s=600, what=f"engine core reports {needle!r}")
    warm_up(serve, "bad-b")
    lines = engine_log(serve, needle)
    assert len(lines) == 1, lines
    assert "keeping the last good values (plan r2" in lines[0]
    tag = needle[:4].replace(" ", "")
    reqs = [Req(f"c{tag}{i}x", 32, 32, {"kvplan_class": "chat"}, "chat") for i in range(8)]
    send(serve, reqs, burst=True)
    admitted = admissions(serve, reqs)
    assert len({a[0] for a in admitted.values()}) == 1, admitted


def test_preemption_counters_match_vllm(serve: Serve) -> None:
    """File r3: chat reserves nothing. Eight chat requests of 160 tokens are all admitted (3 blocks each) and must
    grow to 12 blocks each, 96 > 64: vLLM preempts. The plugin's chat preemption counter moves exactly as much as
    vLLM's own counter."""
    serve.write(reservations("r3", chat=0))
    warm_up(serve, "r3")
    wait_until(lambda: bool(engine_log(serve, "plan r3")), timeout_s=600, what="engine core loads plan r3")
    before = scrape(serve)
    reqs = [Req(f"d{i}x", 32, 160, {"kvplan_class": "chat"}, "chat") for i in range(8)]
    send(serve, reqs, burst=True)
    after = scrape(serve)
    vllm_delta = vllm_preemptions(after) - vllm_preemptions(before)
    ours = kvplan_preemptions(after)
    ours_delta = ours.get("chat", 0.0) - kvplan_preemptions(before).get("chat", 0.0)
    assert vllm_delta > 0 and ours_delta == vllm_delta, (vllm_delta, ours)
    assert sum(len(a) for a in admissions(serve, reqs).values()) == 8 + vllm_delta


def test_metrics_carry_exact_per_class_counts(serve: Serve) -> None:
    """Adds a batch request (``vllm_xargs`` batch, which the API-server process never sees: it counts under the
    default chat), two short prompts with no class anywhere (the tiny rule: prompt <= 8 tokens), a request naming an
    unknown class (default chat) and one whose ``X-Request-Id`` has the old ``kvplan:<class>:`` form (an ordinary id
    now: default chat); then every kvplan series on /metrics must equal what the tests sent, per class: request
    count, output-token count and sum, and every bucket of the kvplan layout up to max_model_len."""
    reqs = [Req("e0x", 40, 300, {"kvplan_class": "batch"}, "chat"),
            Req("e1x", 6, 10, None, "tiny"), Req("e2x", 8, 3, None, "tiny"),
            Req("e3x", 20, 7, {"kvplan_class": "ghost"}, "chat"), Req("kvplan:batch:e4x", 20, 5, None, "chat")]
    send(serve, reqs, burst=False)
    m = scrape(serve)
    buckets = series.kvplan_buckets(MAX_MODEL_LEN)
    names = {name for name, _ in m}
    assert not any(n.startswith("vllm:kvplan") or n.startswith("vllm_kvplan") for n in names)
    seen_classes = {dict(labels)[series.KVPLAN_CLASS_LABEL] for (name, labels) in m
                    if name == series.KVPLAN_REQUESTS + "_total"}
    assert seen_classes == set(serve.sent.outputs)
    for klass, outputs in serve.sent.outputs.items():
        labels = tuple(sorted({series.KVPLAN_CLASS_LABEL: klass, "model_name": MODEL}.items()))
        assert m[(series.KVPLAN_REQUESTS + "_total", labels)] == len(outputs), klass
        assert m[(series.KVPLAN_OUTPUT_TOKENS + "_count", labels)] == len(outputs), klass
        assert m[(series.KVPLAN_OUTPUT_TOKENS + "_sum", labels)] == sum(outputs), klass
        for le in buckets:
            key = (series.KVPLAN_OUTPUT_TOKENS + "_bucket", tuple(sorted(dict(labels, le=f"{float(le)}").items())))
            assert m[key] == sum(1 for x in outputs if x <= le), (klass, le)
        inf = (series.KVPLAN_OUTPUT_TOKENS + "_bucket", tuple(sorted(dict(labels, le="+Inf").items())))
        assert m[inf] == len(outputs)
    assert sum(kvplan_preemptions(m).values()) == vllm_preemptions(m)
    log = serve.server.log_text()
    assert re.search(r"kvplan: stat logger on for model kvplan-test", log)
    assert "kvplan: gate error" not in log and "kvplan: stat logger error" not in log
