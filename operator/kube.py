"""The operator's own thin wrapper over the Kubernetes API: the only module that imports ``kubernetes``.

Every phase talks to :class:`KubeApi` (a typed protocol), so unit tests substitute a fake at this level and never
need a cluster. Reads return plain dicts (the API's JSON); a missing object reads as ``None``. Every failure of a
call, whatever the client raised (an ``ApiException``, a timeout, a refused connection), becomes one
:class:`KubeError` naming the call and the class of error; nothing else leaves this module. Every write names its
field manager, and every call carries a client-side timeout so a hung apiserver cannot hang a reconcile; inside
:func:`kvplan_operator.deadline.calls_until` the timeout never runs past the reconcile's cycle deadline.
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar, cast

from . import deadline
from .desired import ANN_ROLLOUT

FIELD_MANAGER = "kvplan-operator"
APPLY = "application/apply-patch+yaml"
"""Server-side apply (the body is JSON, which is YAML)."""


def _intent(api_version: str, kind: str, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """An apply configuration: ``body`` with its type and identity."""
    return {"apiVersion": api_version, "kind": kind, **body,
            "metadata": {**body.get("metadata", {}), "name": name, "namespace": namespace}}


def split_updates(patch: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A Deployment patch -> (the rest, the fields sent as a strategic-merge update instead of applied, or None):
    ``spec.strategy`` and the annotation :data:`~kvplan_operator.desired.ANN_ROLLOUT`, which kvplan holds only
    while a re-layout rolls (:mod:`kvplan_operator.targets.rollout_room`). Applied, they would belong to kvplan's
    apply, and its next apply without them would remove them; updated, they belong to no apply and the user's next
    write takes them back."""
    rest = json.loads(json.dumps(patch))
    update: dict[str, Any] = {}
    strategy = rest.get("spec", {}).pop("strategy", None)
    if strategy is not None:
        update["spec"] = {"strategy": strategy}
    annotations = rest.get("metadata", {}).get("annotations") or {}
    if ANN_ROLLOUT in annotations:
        update["metadata"] = {"annotations": {ANN_ROLLOUT: annotations.pop(ANN_ROLLOUT)}}
    return rest, (update or None)


def _merged(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """Two patches of disjoint fields as one (maps merged key by key)."""
    if a is None or b is None:
        return a if b is None else b
    out = dict(a)
    for key, value in b.items():
        out[key] = _merged(out[key], value) if isinstance(out.get(key), dict) and isinstance(value, dict) else value
    return out


def split_removals(patch: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A target's patch -> (the apply intent without removal markers, a patch of only the removals, or None).

    Removal markers: a list item ``{"name": ..., "$patch": "delete"}`` (strategic merge) and a map value ``None``
    (merge patch). The removals patch keeps the path to each marker (list items by their ``name``)."""
    def walk(node: Any) -> tuple[Any, Any]:
        if isinstance(node, Mapping):
            keep: dict[str, Any] = {}
            drop: dict[str, Any] = {}
            for key, value in node.items():
                if value is None:
                    drop[key] = None
                    continue
                kept, dropped = walk(value)
                keep[key] = kept
                if dropped is not None:
                    drop[key] = dropped
            return keep, (drop or None)
        if isinstance(node, list):
            kept_items: list[Any] = []
            dropped_items: list[Any] = []
            for item in node:
                if isinstance(item, Mapping) and item.get("$patch") == "delete":
                    dropped_items.append(dict(item))
                    continue
                kept, dropped = walk(item)
                kept_items.append(kept)
                if dropped is not None and isinstance(item, Mapping) and "name" in item:
                    dropped_items.append({"name": item["name"], **dropped})
            return kept_items, (dropped_items or None)
        return node, None

    body, removals = walk(patch)
    return body, removals

GROUP, VERSION, PLURAL = "kvplan.io", "v1beta1", "kvplans"
GATEWAY = ("gateway.networking.k8s.io", "v1", "httproutes")
INFERENCE = ("inference.networking.k8s.io", "v1", "inferencepools")
#: KServe's LLMInferenceService, its storage version in KServe v0.17.
LLMISVC = ("serving.kserve.io", "v1alpha2", "llminferenceservices")
LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
#: Custom scalers that own a Deployment's replicas through ``spec.scaleTargetRef`` (group, version, plural, kind):
#: KEDA's ScaledObject and AIBrix's PodAutoscaler (KPA/APA, which scales without an HPA). Either may not be
#: installed (a 404 on the list: none).
SCALERS = (("keda.sh", "v1alpha1", "scaledobjects", "ScaledObject"),
           ("autoscaling.aibrix.ai", "v1alpha1", "podautoscalers", "PodAutoscaler"))
#: Client-side timeout of one API call, seconds. 15 s: far above a healthy apiserver's latency, short enough that a
#: wedged one costs a reconcile seconds, not the kopf handler's whole budget.
REQUEST_TIMEOUT_S = 15.0

#: ``KubeError.kind`` of a call not sent, or cut, because the reconcile's cycle deadline passed.
CYCLE_DEADLINE = "CycleDeadlineExceeded"
#: Error classes (``KubeError.kind``), from the HTTP status (or the transport failure).
KINDS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict",
         410: "Gone", 422: "Invalid", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
         504: "Timeout"}
#: The apiserver's own ``Status.reason`` vocabulary (metav1.StatusReason); only these are quoted from a body.
_STATUS_REASONS = {"Unauthorized", "Forbidden", "NotFound", "AlreadyExists", "Conflict", "Gone", "Invalid",
                   "ServerTimeout", "Timeout", "TooManyRequests", "BadRequest", "MethodNotAllowed",
                   "NotAcceptable", "RequestEntityTooLarge", "UnsupportedMediaType", "InternalError", "Expired",
                   "ServiceUnavailable"}
#: Longest apiserver ``Status.message`` quoted, characters (field errors of a 422 fit; a novel does not).
MAX_DETAIL = 300


class KubeError(Exception):
    """One failed Kubernetes call. ``status`` is the HTTP status (None when no response came back), ``kind`` its
    class (``Forbidden``, ``NotFound``, ``Conflict``, ``Invalid``, ``InternalError``, ``Timeout``,
    ``Unavailable``, ...), ``call`` what was attempted (``patch Deployment/vllm-a``)."""

    def __init__(self, call: str, kind: str, status: int | None = None, detail: str = "") -> None:
        self.call, self.kind, self.status, self.detail = call, kind, status, detail
        code = f"{status} " if status is not None else ""
        super().__init__(f"{call}: {code}{kind}" + (f" ({detail})" if detail else ""))


class KubeApi(Protocol):
    """Every Kubernetes call the operator makes. Reads return ``None`` for a missing object; every failure is a
    :class:`KubeError`."""

    # --- reads (observe) ---------------------------------------------------------------------------------------
    def get_kvplan(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def autoscaled_deployments(self, namespace: str) -> dict[str, str]: ...

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def get_httproute(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def get_inferencepool(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def get_llminferenceservice(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def get_leaderworkerset(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def read_secret_key(self, namespace: str, name: str, key: str) -> str | None: ...

    # --- writes (apply, record) --------------------------------------------------------------------------------
    def patch_deployment(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None: ...

    def create_configmap(self, namespace: str, body: Mapping[str, Any]) -> None: ...

    def patch_configmap(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None: ...

    def patch_httproute(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None: ...

    def patch_llminferenceservice(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None: ...

    def patch_leaderworkerset(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None: ...

    def patch_kvplan_status(self, namespace: str, name: str, status_patch: Mapping[str, Any]) -> None: ...

    def post_event(self, body: Mapping[str, Any], *, type_: str, reason: str, message: str) -> None: ...


T = TypeVar("T")


def scale_targets(kind: str, listed: Mapping[str, Any] | None) -> dict[str, str]:
    """A custom scaler list (``{"items": [...]}``; None: its API is not installed) -> Deployment name ->
    ``<kind>/<scaler name>``, for each item whose ``spec.scaleTargetRef`` names a Deployment (no kind: KEDA's
    default, a Deployment)."""
    out: dict[str, str] = {}
    for item in (listed or {}).get("items") or []:
        spec = item.get("spec") if isinstance(item, Mapping) else None
        ref = spec.get("scaleTargetRef") if isinstance(spec, Mapping) else None
        if not isinstance(ref, Mapping) or ref.get("kind", "Deployment") != "Deployment" or not ref.get("name"):
            continue
        api = str(ref.get("apiVersion") or "apps/v1")
        if api.partition("/")[0] != "apps":
            continue
        name = (item.get("metadata") or {}).get("name") or "?"
        out[str(ref["name"])] = f"{kind}/{name}"
    return out


def _status_detail(body: Any) -> tuple[str | None, str]:
    """(Status.reason if it is the apiserver's vocabulary, Status.message cut to MAX_DETAIL) of an error body."""
    try:
        doc = json.loads(body) if isinstance(body, (str, bytes)) else None
    except ValueError:
        return None, ""
    if not isinstance(doc, dict) or doc.get("kind") != "Status":
        return None, ""
    reason = doc.get("reason") if doc.get("reason") in _STATUS_REASONS else None
    message = str(doc.get("message") or "")
    if len(message) > MAX_DETAIL:
        message = message[: MAX_DETAIL - 3] + "..."
    return reason, message


def classify(call: str, exc: BaseException) -> KubeError:
    """Any exception the kubernetes client raised -> :class:`KubeError` (status code and class, never a
    traceback)."""
    if isinstance(exc, KubeError):
        return exc
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status > 0:
        reason, detail = _status_detail(getattr(exc, "body", None))
        return KubeError(call, reason or KINDS.get(status, "ServerError" if status >= 500 else "ClientError"),
                         status, detail)
    name = type(exc).__name__
    text = str(exc).lower()
    if "timeout" in name.lower() or "timed out" in text:
        return KubeError(call, "Timeout")
    return KubeError(call, "Unavailable", detail=name)


class Kube:
    """:class:`KubeApi` over a configured ``kubernetes.client.ApiClient``."""

    def __init__(self, api_client: Any, *, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        from kubernetes import client

        self._client = client
        self.api_client = api_client
        self.timeout_s = timeout_s
        self.apps = client.AppsV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.autoscaling = client.AutoscalingV2Api(api_client)

    @classmethod
    def from_environment(cls) -> Kube:
        """In-cluster config when running in a pod, else the kubeconfig (``$KUBECONFIG``)."""
        import os

        from kubernetes import client, config

        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            return cls(client.ApiClient())
        except config.ConfigException:
            # $KUBECONFIG is read now, not at import time (the kubernetes package caches it on import).
            return cls(config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=os.environ.get("KUBECONFIG") or None))

    def _timeout(self) -> float:
        """This call's client-side timeout: :attr:`timeout_s`, or less when the reconcile's writes must end sooner
        (:func:`kvplan_operator.deadline.calls_until`)."""
        left = deadline.calls_left()
        return self.timeout_s if left is None else max(0.001, min(self.timeout_s, left))

    def _call(self, call: str, fn: Callable[[], T], *, missing_ok: bool = False) -> T | None:
        """Run one API call; 404 is ``None`` when ``missing_ok``; every failure is a :class:`KubeError` (kind
        :data:`CYCLE_DEADLINE` and nothing sent once the block's end passed: :func:`~kvplan_operator.deadline.
        calls_until`)."""
        left = deadline.calls_left()
        if left is not None and left <= 0:
            raise KubeError(call, CYCLE_DEADLINE, detail="the reconcile's cycle deadline passed; not sent")
        try:
            return fn()
        except Exception as exc:
            err = classify(call, exc)
            if err.kind == "Timeout" and left is not None and left < self.timeout_s:  # the cycle's end cut it
                err = KubeError(call, CYCLE_DEADLINE, detail="cut at the reconcile's cycle deadline")
            if missing_ok and err.status == 404:
                return None
            raise err from None

    def _write(self, call: str, fn: Callable[[], Any]) -> None:
        """One write made with ``_preload_content=False`` (its answer is not needed: see :meth:`_raw`); the body is
        drained so the connection goes back to the pool."""
        resp = self._call(call, fn)
        getattr(resp, "data", None)

    def _raw(self, call: str, fn: Callable[[], Any], *, missing_ok: bool = False) -> dict[str, Any] | None:
        """One call made with ``_preload_content=False``: the response's JSON as the apiserver sent it, without the
        client's model round trip (which took most of the time of reading or writing a Deployment with 256 env
        entries). A body that is not a JSON object is a :class:`KubeError`."""
        resp = self._call(call, fn, missing_ok=missing_ok)
        if resp is None:
            return None
        try:
            doc = json.loads(resp.data)
        except (ValueError, TypeError, AttributeError) as exc:
            raise KubeError(call, "BadResponse", detail=type(exc).__name__) from None
        if not isinstance(doc, dict):
            raise KubeError(call, "BadResponse", detail="not a JSON object")
        return doc

    def _custom_get(self, gvp: tuple[str, str, str], namespace: str, name: str, kind: str) -> dict[str, Any] | None:
        return cast(dict[str, Any] | None, self._call(
            f"get {kind}/{name}", lambda: self.custom.get_namespaced_custom_object(
                *gvp[:2], namespace, gvp[2], name, _request_timeout=self._timeout()), missing_ok=True))

    # --- reads -----------------------------------------------------------------------------------------------------
    def get_kvplan(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._custom_get((GROUP, VERSION, PLURAL), namespace, name, "KVPlan")

    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._raw(f"get Deployment/{name}", lambda: self.apps.read_namespaced_deployment(
            name, namespace, _request_timeout=self._timeout(), _preload_content=False), missing_ok=True)

    def autoscaled_deployments(self, namespace: str) -> dict[str, str]:
        """Deployment name -> ``HorizontalPodAutoscaler/<name>``, ``ScaledObject/<name>`` or
        ``PodAutoscaler/<name>`` targeting it (:data:`SCALERS`; a scaler's API that is not installed, a 404 on its
        list, has none)."""
        out: dict[str, str] = {}
        hpas: Any = self._call("list HorizontalPodAutoscalers", lambda: self.autoscaling
                               .list_namespaced_horizontal_pod_autoscaler(namespace, _request_timeout=self._timeout()))
        for hpa in hpas.items:
            ref = hpa.spec.scale_target_ref
            if ref.kind == "Deployment":
                out[ref.name] = f"HorizontalPodAutoscaler/{hpa.metadata.name if hpa.metadata else '?'}"
        for group, version, plural, kind in SCALERS:
            listed: Any = self._call(f"list {kind}s", self._lister(group, version, namespace, plural),
                                     missing_ok=True)
            out.update(scale_targets(kind, listed))
        return out

    def _lister(self, group: str, version: str, namespace: str, plural: str) -> Callable[[], Any]:
        """The list call of one custom resource in ``namespace``."""
        return lambda: self.custom.list_namespaced_custom_object(group, version, namespace, plural,
                                                                 _request_timeout=self._timeout())

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._raw(f"get ConfigMap/{name}", lambda: self.core.read_namespaced_config_map(
            name, namespace, _request_timeout=self._timeout(), _preload_content=False), missing_ok=True)

    def get_httproute(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._custom_get(GATEWAY, namespace, name, "HTTPRoute")

    def get_inferencepool(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._custom_get(INFERENCE, namespace, name, "InferencePool")

    def get_llminferenceservice(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._custom_get(LLMISVC, namespace, name, "LLMInferenceService")

    def get_leaderworkerset(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._custom_get(LWS, namespace, name, "LeaderWorkerSet")

    def read_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        secret: Any = self._call(f"get Secret/{name}", lambda: self.core.read_namespaced_secret(
            name, namespace, _request_timeout=self._timeout()), missing_ok=True)
        raw = (secret.data or {}).get(key) if secret is not None else None
        # Undecodable bytes stay as lone surrogates, for the credential's check to refuse naming the key
        # (kvplan_operator.prom.credentials), instead of a UnicodeDecodeError escaping as InternalError.
        return base64.b64decode(raw).decode("utf-8", "surrogateescape") if raw else None

    # --- writes ----------------------------------------------------------------------------------------------------
    # Deployments, ConfigMaps and HTTPRoutes are written with server-side apply as the field manager kvplan-operator
    # (force: the operator's fields are its own; a GitOps tool is told to ignore them, docs/upgrade.md). The targets
    # build the operator's whole owned intent; what they mark for removal (`$patch: delete` env entries, `None` map
    # values) is removed by a separate patch first, since an apply removes only fields the same manager applied
    # before, and fields written by kvplan-operator's earlier patches (operation Update) are not among them.
    def _remove_then_apply(self, kind: str, api_version: str, namespace: str, name: str, patch: Mapping[str, Any],
                           send: Callable[..., Any], removal_type: str,
                           update: dict[str, Any] | None = None) -> None:
        """The removals ``patch`` marks (a patch of content type ``removal_type``, with the fields of ``update``),
        then the apply of the rest. ``send(body, **kw)`` makes the object's patch call as kvplan-operator."""
        body, removals = split_removals(patch)
        removals = _merged(removals, update)
        if removals is not None:
            self._write(f"patch {kind}/{name} (removals)", lambda: send(removals, _content_type=removal_type))
        intent = _intent(api_version, kind, namespace, name, body)
        self._write(f"apply {kind}/{name}", lambda: send(intent, force=True, _content_type=APPLY))

    def patch_deployment(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        rest, update = split_updates(patch)
        self._remove_then_apply("Deployment", "apps/v1", namespace, name, rest, lambda body, **kw: (
            self.apps.patch_namespaced_deployment(name, namespace, body, field_manager=FIELD_MANAGER,
                                                  _request_timeout=self._timeout(), _preload_content=False, **kw)),
            "application/strategic-merge-patch+json", update)

    def create_configmap(self, namespace: str, body: Mapping[str, Any]) -> None:
        name = body.get("metadata", {}).get("name")
        self._write(f"create ConfigMap/{name}", lambda: self.core.create_namespaced_config_map(
            namespace, dict(body), field_manager=FIELD_MANAGER,  # type: ignore[arg-type]
            _request_timeout=self._timeout(), _preload_content=False))

    def patch_configmap(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self._remove_then_apply("ConfigMap", "v1", namespace, name, patch, lambda body, **kw: (
            self.core.patch_namespaced_config_map(name, namespace, body, field_manager=FIELD_MANAGER,
                                                  _request_timeout=self._timeout(), _preload_content=False, **kw)),
            "application/merge-patch+json")

    def patch_httproute(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self._remove_then_apply("HTTPRoute", f"{GATEWAY[0]}/{GATEWAY[1]}", namespace, name, patch, lambda body, **kw: (
            self.custom.patch_namespaced_custom_object(*GATEWAY[:2], namespace, GATEWAY[2], name, body,
                                                       field_manager=FIELD_MANAGER, _request_timeout=self._timeout(),
                                                       _preload_content=False, **kw)),
            "application/merge-patch+json")

    def patch_llminferenceservice(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self._remove_then_apply("LLMInferenceService", f"{LLMISVC[0]}/{LLMISVC[1]}", namespace, name, patch,
                                lambda body, **kw: self.custom.patch_namespaced_custom_object(
                                    *LLMISVC[:2], namespace, LLMISVC[2], name, body, field_manager=FIELD_MANAGER,
                                    _request_timeout=self._timeout(), _preload_content=False, **kw),
                                "application/merge-patch+json")

    def patch_leaderworkerset(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self._remove_then_apply("LeaderWorkerSet", f"{LWS[0]}/{LWS[1]}", namespace, name, patch,
                                lambda body, **kw: self.custom.patch_namespaced_custom_object(
                                    *LWS[:2], namespace, LWS[2], name, body, field_manager=FIELD_MANAGER,
                                    _request_timeout=self._timeout(), _preload_content=False, **kw),
                                "application/merge-patch+json")

    def patch_kvplan_status(self, namespace: str, name: str, status_patch: Mapping[str, Any]) -> None:
        self._call(f"patch KVPlan/{name}/status", lambda: self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, {"status": dict(status_patch)}, field_manager=FIELD_MANAGER,
            _request_timeout=self._timeout(), _content_type="application/merge-patch+json"))

    def post_event(self, body: Mapping[str, Any], *, type_: str, reason: str, message: str) -> None:
        """A core/v1 Event on the KVPlan (only called on condition transitions)."""
        meta = body["metadata"]
        now = _dt.datetime.now(_dt.UTC)
        event = self._client.CoreV1Event(
            metadata=self._client.V1ObjectMeta(name=f"{meta['name']}.{uuid.uuid4().hex[:12]}",
                                               namespace=meta["namespace"]),
            involved_object=self._client.V1ObjectReference(
                api_version=f"{GROUP}/{VERSION}", kind="KVPlan", name=meta["name"], namespace=meta["namespace"],
                uid=meta.get("uid"), resource_version=meta.get("resourceVersion")),
            reason=reason, message=message[:1024], type=type_, first_timestamp=now, last_timestamp=now, count=1,
            source=self._client.V1EventSource(component=FIELD_MANAGER), reporting_component=FIELD_MANAGER)
        self._call("create Event", lambda: self.core.create_namespaced_event(
            meta["namespace"], event, _request_timeout=self._timeout()))


def ensure_peering(kube: Kube, *, name: str, namespaces: list[str], clusterwide: bool) -> list[str]:
    """Make sure the kopf peering object(s) exist (kopf only patches them; when absent, replicas cannot see
    each other). Returns one line per object: ``exists``, ``created``, or ``cannot check (403)`` when RBAC
    allows only patch (then whoever installed the operator must create it, e.g. the Helm chart).
    """
    out: list[str] = []
    targets: list[str | None] = [None] if clusterwide else list(namespaces)
    api = kube.custom
    for ns in targets:
        kind = "ClusterKopfPeering" if ns is None else "KopfPeering"
        label = f"{kind}/{name}" if ns is None else f"{kind}/{ns}/{name}"
        body = {"apiVersion": "kopf.dev/v1", "kind": kind, "metadata": {"name": name}}
        try:
            try:
                if ns is None:
                    api.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", name)
                else:
                    api.get_namespaced_custom_object("kopf.dev", "v1", ns, "kopfpeerings", name)
                out.append(f"{label}: exists")
                continue
            except kube._client.ApiException as exc:
                if exc.status != 404:
                    raise
            if ns is None:
                api.create_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", body)
            else:
                api.create_namespaced_custom_object("kopf.dev", "v1", ns, "kopfpeerings", body)
            out.append(f"{label}: created")
        except kube._client.ApiException as exc:
            if exc.status == 409:
                out.append(f"{label}: exists")
            elif exc.status == 403:
                out.append(f"{label}: cannot check ({exc.status}); it must exist for peering to work")
            else:
                raise
    return out
