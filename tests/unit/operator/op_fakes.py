"""A fake of the operator's own Kubernetes wrapper (``kvplan_operator.kube.KubeApi``), shared by the operator's unit
tests: in-memory objects, strategic-merge and JSON merge patches applied as the apiserver does for the shapes the
operator sends, a log of every call, and fault injection (any call can raise a ``KubeError`` of any class, or the
process can "die" right after a write)."""

from __future__ import annotations

import contextlib
import copy
import http.server
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kvplan_operator.kube import KubeError

READS = ("get_kvplan", "get_deployment", "autoscaled_deployments", "get_configmap", "get_httproute",
         "get_inferencepool", "read_secret_key")
WRITES = ("patch_deployment", "create_configmap", "patch_configmap", "patch_httproute", "patch_kvplan_status",
          "post_event")
#: HTTP status and class of each injected Kubernetes error; None: no response (a client-side timeout).
ERRORS = {"403": (403, "Forbidden"), "404": (404, "NotFound"), "409": (409, "Conflict"), "422": (422, "Invalid"),
          "500": (500, "InternalError"), "timeout": (None, "Timeout")}


SECRET_BODY = "SECRET-BODY-TEXT-do-not-copy"


class Killed(BaseException):
    """The operator process died (kill -9) right after a write: nothing after it runs, not even status."""


class _Missing(Exception):
    """An injected 404 on a read: the wrapper returns None (or {} for the autoscaler list)."""


#: Lists the strategic merge merges by key (Kubernetes' patchMergeKey of each), as the apiserver does.
MERGE_KEYS = {"containers": "name", "env": "name", "volumes": "name", "volumeMounts": "mountPath"}


def smp(target: dict, patch: dict) -> None:
    """Strategic merge (containers/env/volumes by name, volumeMounts by mountPath, ``$patch: delete``) and JSON
    merge (None deletes) in one."""
    for k, v in patch.items():
        if k in MERGE_KEYS and isinstance(v, list):
            key = MERGE_KEYS[k]
            cur = {e[key]: e for e in target.get(k, [])}
            order = [e[key] for e in target.get(k, [])]
            for e in v:
                if e.get("$patch") == "delete":
                    cur.pop(e[key], None)
                    continue
                if e[key] in cur:
                    smp(cur[e[key]], e)
                else:
                    cur[e[key]] = copy.deepcopy(e)
                    order.append(e[key])
            target[k] = [cur[n] for n in order if n in cur]
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            smp(target[k], v)
        elif v is None:
            target.pop(k, None)
        else:
            target[k] = copy.deepcopy(v)


@dataclass
class Fault:
    """Raise ``error`` on the ``nth`` call (1-based, counting calls that match; 0: every call) of ``method`` (on
    object ``name``, or any)."""

    method: str
    error: str
    nth: int = 1
    name: str | None = None
    seen: int = 0


@dataclass
class FakeKube:
    """The operator's Kube wrapper, in memory. ``writes`` records every mutating call (``status`` for status)."""

    deployments: dict[str, dict] = field(default_factory=dict)
    configmaps: dict[str, dict] = field(default_factory=dict)
    httproutes: dict[str, dict] = field(default_factory=dict)
    inferencepools: dict[str, dict] = field(default_factory=dict)
    llmisvcs: dict[str, dict] = field(default_factory=dict)
    lwss: dict[str, dict] = field(default_factory=dict)
    kvplans: dict[str, dict] = field(default_factory=dict)
    secrets: dict[tuple[str, str], str] = field(default_factory=dict)
    scaled: dict[str, str] = field(default_factory=dict)
    writes: list[str] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)
    events: list[tuple[str, str]] = field(default_factory=list)
    status: dict = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    #: die (raise Killed) right after the n-th successful write of a run (1-based; status and events included).
    kill_after_write: int | None = None
    writes_done: int = 0
    on_write: Callable[[FakeKube, str], None] | None = None

    # --- fault machinery -------------------------------------------------------------------------------------
    def _enter(self, method: str, name: str) -> None:
        self.calls.append((method, name))
        for f in self.faults:
            if f.method == method and (f.name is None or f.name == name):
                f.seen += 1
                if f.nth in (0, f.seen):
                    status, kind = ERRORS[f.error]
                    if status == 404 and method in READS:  # the real wrapper reads a 404 as "missing"
                        raise _Missing()
                    raise KubeError(f"{method} {name}", kind, status)

    def _wrote(self, label: str) -> None:
        self.writes.append(label)
        self.writes_done += 1
        if self.on_write is not None:
            self.on_write(self, label)
        if self.kill_after_write is not None and self.writes_done == self.kill_after_write:
            raise Killed(label)

    # --- reads -----------------------------------------------------------------------------------------------
    def get_kvplan(self, ns, name):
        try:
            self._enter("get_kvplan", name)
        except _Missing:
            return None
        return copy.deepcopy(self.kvplans.get(name))

    def get_deployment(self, ns, name):
        try:
            self._enter("get_deployment", name)
        except _Missing:
            return None
        return copy.deepcopy(self.deployments.get(name))

    def autoscaled_deployments(self, ns):
        try:
            self._enter("autoscaled_deployments", "")
        except _Missing:
            return {}
        return dict(self.scaled)

    def get_configmap(self, ns, name):
        try:
            self._enter("get_configmap", name)
        except _Missing:
            return None
        return copy.deepcopy(self.configmaps.get(name))

    def get_httproute(self, ns, name):
        try:
            self._enter("get_httproute", name)
        except _Missing:
            return None
        return copy.deepcopy(self.httproutes.get(name))

    def get_inferencepool(self, ns, name):
        try:
            self._enter("get_inferencepool", name)
        except _Missing:
            return None
        return copy.deepcopy(self.inferencepools.get(name))

    def get_llminferenceservice(self, ns, name):
        try:
            self._enter("get_llminferenceservice", name)
        except _Missing:
            return None
        return copy.deepcopy(self.llmisvcs.get(name))

    def get_leaderworkerset(self, ns, name):
        try:
            self._enter("get_leaderworkerset", name)
        except _Missing:
            return None
        return copy.deepcopy(self.lwss.get(name))

    def read_secret_key(self, ns, name, key):
        try:
            self._enter("read_secret_key", name)
        except _Missing:
            return None
        return self.secrets.get((name, key))

    # --- writes ----------------------------------------------------------------------------------------------
    def create_configmap(self, ns, body):
        name = body["metadata"]["name"]
        self._enter("create_configmap", name)
        if name in self.configmaps:
            raise KubeError(f"create ConfigMap/{name}", "AlreadyExists", 409)
        self.configmaps[name] = copy.deepcopy(dict(body))
        self._wrote(f"create ConfigMap/{name}")

    def patch_configmap(self, ns, name, patch):
        self._enter("patch_configmap", name)
        if name not in self.configmaps:
            raise KubeError(f"patch ConfigMap/{name}", "NotFound", 404)
        smp(self.configmaps[name], copy.deepcopy(dict(patch)))
        self._wrote(f"patch ConfigMap/{name}")

    def patch_deployment(self, ns, name, patch):
        self._enter("patch_deployment", name)
        if name not in self.deployments:
            raise KubeError(f"patch Deployment/{name}", "NotFound", 404)
        smp(self.deployments[name], copy.deepcopy(dict(patch)))
        self._wrote(f"patch Deployment/{name}")

    def patch_llminferenceservice(self, ns, name, patch):
        self._enter("patch_llminferenceservice", name)
        if name not in self.llmisvcs:
            raise KubeError(f"patch LLMInferenceService/{name}", "NotFound", 404)
        smp(self.llmisvcs[name], copy.deepcopy(dict(patch)))
        self._wrote(f"patch LLMInferenceService/{name}")

    def patch_leaderworkerset(self, ns, name, patch):
        self._enter("patch_leaderworkerset", name)
        if name not in self.lwss:
            raise KubeError(f"patch LeaderWorkerSet/{name}", "NotFound", 404)
        smp(self.lwss[name], copy.deepcopy(dict(patch)))
        self._wrote(f"patch LeaderWorkerSet/{name}")

    def patch_httproute(self, ns, name, patch):
        self._enter("patch_httproute", name)
        if name not in self.httproutes:
            raise KubeError(f"patch HTTPRoute/{name}", "NotFound", 404)
        smp(self.httproutes[name], copy.deepcopy(dict(patch)))
        self._wrote(f"patch HTTPRoute/{name}")

    def patch_kvplan_status(self, ns, name, patch):
        self._enter("patch_kvplan_status", name)
        smp(self.status, copy.deepcopy(dict(patch)))
        self._wrote("status")

    def post_event(self, body, *, type_, reason, message):
        self._enter("post_event", reason)
        self.events.append((type_, reason))


def dep(name: str, args: list[str] | None = None) -> dict:
    """A serving Deployment with one vLLM container (flags in args)."""
    return {"metadata": {"name": name, "annotations": {}},
            "spec": {"replicas": 1, "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                {"name": "vllm", "image": "vllm/vllm-openai:v0.33.0",
                 "args": args if args is not None else ["--model", "m", "--tensor-parallel-size", "1", "--port", "8000"],
                 "env": [{"name": "HF_HOME", "value": "/c"}]}]}}}}


def kvplan(spec: dict, kube: FakeKube, generation: int = 1, name: str = "fleet") -> dict:
    """The KVPlan as the apiserver would return it, with the fake's stored status."""
    return {"apiVersion": "kvplan.io/v1beta1", "kind": "KVPlan",
            "metadata": {"name": name, "namespace": "ns", "uid": "u1", "generation": generation},
            "spec": spec, "status": copy.deepcopy(kube.status)}


def container(body: dict, name: str = "vllm") -> dict[str, Any]:
    return next(c for c in body["spec"]["template"]["spec"]["containers"] if c["name"] == name)


class Script:
    """What a scripted Prometheus answers per path (status, headers, body), which paths hang, and what it saw."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, dict[str, str], bytes]] = {}
        self.hang: set[str] = set()
        self.seen: list[tuple[str, str | None]] = []
        #: every request's headers, in order
        self.headers: list[dict[str, str]] = []
        self.release = threading.Event()


def serve(script: Script, host: str = "127.0.0.1", port: int = 0) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve ``script`` on ``host`` (127.0.0.1; any loopback address, a daemon thread); returns (server, base URL)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?", 1)[0]
            script.seen.append((path, self.headers.get("Authorization")))
            script.headers.append(dict(self.headers.items()))
            if path in script.hang:
                script.release.wait(30)
                return
            status, headers, body = script.answers.get(path, (404, {}, b"not found " + SECRET_BODY.encode()))
            self.send_response_only(status)
            if "Date" not in headers:  # a scripted Date (Retry-After tests) replaces the server's own
                self.send_header("Date", self.date_time_string())
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}"


@contextlib.contextmanager
def scripted_prometheus(host: str = "127.0.0.1", port: int = 0) -> Iterator[tuple[Script, str]]:
    """A :class:`Script` served on ``host`` (127.0.0.1; ``port``: any free one) for the block (script, base URL);
    afterwards hung requests are released and the server is closed."""
    script = Script()
    server, url = serve(script, host, port)
    try:
        yield script, url
    finally:
        script.release.set()
        server.shutdown()
        server.server_close()


class ScriptedKnobs:
    """A knob rule with ``kvcore.rules.knobs.knobs_for_plan``'s signature that answers scripted knobs instantly (the real
    rule replays thousands of requests per group and is tested in test_knobs.py; the operator's tests test what the
    operator does with its answer). ``knobs``: group -> (max_num_seqs, watermark, policy); a group not listed gets
    stock vLLM (256, 0, fcfs). Only groups of the plan with replicas get an answer, as from the real rule; a
    watermark is dropped for engines older than 0.33, as the real rule does. ``fail``: raise this instead. Every
    call is recorded (engine version, groups, the ``current`` knobs passed)."""

    def __init__(self, knobs: dict[str, tuple[int, float, str]] | None = None, *,
                 priorities: dict[str, int] | None = None, fail: Exception | None = None,
                 work: dict[str, int] | None = None) -> None:
        self.knobs = dict(knobs or {})
        self.work = dict(work or {})
        self.priorities = priorities
        self.fail = fail
        self.calls: list[tuple[str, list[str], dict]] = []
        #: per call, the groups and the latency targets (TTFT s, TPOT s) passed
        self.targets: list[tuple[list[str], tuple[Any, Any]]] = []

    def __call__(self, plan: Any, instance: Any, *, engine_version: str = "0.33.0", current: Any = None,
                 **shared: Any) -> dict:
        from kvcore.rules.knobs import KnobChoice

        groups = [g.name for g in plan.groups if g.replicas > 0 and g.tp > 0]
        self.calls.append((engine_version, groups, dict(current or {})))
        self.targets.append((groups, (shared.get("ttft_slo_s"), shared.get("tpot_slo_s"))))
        if self.fail is not None:
            raise self.fail
        old = tuple(int(p) for p in engine_version.split(".")) < (0, 33, 0)
        out = {}
        for g in groups:
            seqs, wm, policy = self.knobs.get(g, (256, 0.0, "fcfs"))
            prio = dict(self.priorities or {c.name: i for i, c in enumerate(plan.classes)}) if policy == "priority" \
                else {}
            out[g] = KnobChoice(group=g, max_num_seqs=seqs, watermark=None if old else wm, scheduling_policy=policy,
                                class_priority=prio, reason=f"scripted for {g}", work=self.work.get(g, 0))
        return out


class ScriptedReserves:
    """A reservation rule with ``kvcore.rules.reserve.reserves_for_plan``'s signature that answers instantly (the real
    rule is tested in test_reserve_rule.py and test_reserve_search.py, on the real apiserver in
    tests/integration/test_operator_engine.py): per group, each class routed
    there gets ``scale`` x its plan y (``reserves``: group -> class -> tokens overrides it); ``work``: group ->
    simulated requests it reports; ``fail``: raise this instead (only when asked for a group in ``fail_on``, if
    given). Every call is recorded (groups, the engine bases)."""

    def __init__(self, scale: float = 0.25, *, reserves: dict[str, dict[str, int]] | None = None,
                 work: dict[str, int] | None = None, fail: Exception | None = None,
                 fail_on: set[str] | None = None) -> None:
        self.scale, self.reserves, self.work, self.fail = scale, dict(reserves or {}), dict(work or {}), fail
        self.fail_on = fail_on
        self.calls: list[tuple[list[str], dict]] = []
        #: per call, the groups and the latency targets (TTFT s, TPOT s) passed
        self.targets: list[tuple[list[str], tuple[Any, Any]]] = []

    def __call__(self, plan: Any, instance: Any, *, groups: Any = None, bases: Any = None, **shared: Any) -> dict:
        from kvcore.rules.reserve import ReserveChoice

        names = [g.name for g in plan.groups if g.replicas > 0 and g.tp > 0 and (groups is None or g.name in groups)]
        self.calls.append((names, dict(bases or {})))
        self.targets.append((names, (shared.get("ttft_slo_s"), shared.get("tpot_slo_s"))))
        if self.fail is not None and (self.fail_on is None or set(names) & self.fail_on):
            raise self.fail
        out = {}
        for g in names:
            routed = {c.name: int(round(self.scale * c.reserve_tokens)) for c in plan.classes
                      if c.admitted and c.routing.get(g, 0) > 0}
            ys = {**routed, **self.reserves.get(g, {})}
            out[g] = ReserveChoice(group=g, reserves=ys, sources={c: "scripted" for c in ys},
                                   rho=dict.fromkeys(ys, 1.0), token_interval_s=0.03, reason=f"scripted for {g}",
                                   work=self.work.get(g, 0))
        return out
