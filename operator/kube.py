"""The operator's own thin wrapper over the Kubernetes API (the only module that calls ``kubernetes``).

Everything else talks to :class:`Kube`, so unit tests substitute a fake at this level and never need a cluster.
Reads return plain dicts (the API's JSON), missing objects return None, and every write names its field manager.
"""

from __future__ import annotations

import base64
import datetime as _dt
import uuid
from collections.abc import Mapping
from typing import Any, cast

FIELD_MANAGER = "kvplan-operator"
GROUP, VERSION, PLURAL = "kvplan.io", "v1alpha1", "kvplans"


class Kube:
    """Kubernetes calls used by the reconcile. ``api_client`` is a configured ``kubernetes.client.ApiClient``."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self._client = client
        self.api_client = api_client
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

    def _json(self, obj: Any) -> dict[str, Any]:
        return dict(self.api_client.sanitize_for_serialization(obj))

    def _missing(self, exc: Exception) -> bool:
        return isinstance(exc, self._client.ApiException) and exc.status == 404

    # --- reads -----------------------------------------------------------------------------------------------------
    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._json(self.apps.read_namespaced_deployment(name, namespace))
        except Exception as exc:
            if self._missing(exc):
                return None
            raise

    def autoscaled_deployments(self, namespace: str) -> dict[str, str]:
        """Deployment name -> ``HorizontalPodAutoscaler/<name>`` or ``ScaledObject/<name>`` targeting it."""
        out: dict[str, str] = {}
        for hpa in self.autoscaling.list_namespaced_horizontal_pod_autoscaler(namespace).items:
            ref = hpa.spec.scale_target_ref
            if ref.kind == "Deployment":
                out[ref.name] = f"HorizontalPodAutoscaler/{hpa.metadata.name if hpa.metadata else '?'}"
        try:
            scaled: Any = self.custom.list_namespaced_custom_object("keda.sh", "v1alpha1", namespace, "scaledobjects")
        except Exception as exc:
            if self._missing(exc):
                return out  # KEDA not installed
            raise
        for so in scaled.get("items", []):
            ref = so.get("spec", {}).get("scaleTargetRef", {})
            if ref.get("kind", "Deployment") == "Deployment" and ref.get("name"):
                out[ref["name"]] = f"ScaledObject/{so['metadata']['name']}"
        return out

    def get_kvplan(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return cast(dict[str, Any], self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name))
        except Exception as exc:
            if self._missing(exc):
                return None
            raise

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._json(self.core.read_namespaced_config_map(name, namespace))
        except Exception as exc:
            if self._missing(exc):
                return None
            raise

    def get_httproute(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return cast(dict[str, Any], self.custom.get_namespaced_custom_object(
                "gateway.networking.k8s.io", "v1", namespace, "httproutes", name))
        except Exception as exc:
            if self._missing(exc):
                return None
            raise

    def read_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        try:
            secret = self.core.read_namespaced_secret(name, namespace)
        except Exception as exc:
            if self._missing(exc):
                return None
            raise
        raw = (secret.data or {}).get(key)
        return base64.b64decode(raw).decode() if raw else None

    # --- writes ----------------------------------------------------------------------------------------------------
    def patch_deployment(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self.apps.patch_namespaced_deployment(name, namespace, dict(patch), field_manager=FIELD_MANAGER,
                                              _content_type="application/strategic-merge-patch+json")

    def create_configmap(self, namespace: str, body: Mapping[str, Any]) -> None:
        self.core.create_namespaced_config_map(namespace, dict(body), field_manager=FIELD_MANAGER)  # type: ignore[arg-type]

    def patch_configmap(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self.core.patch_namespaced_config_map(name, namespace, dict(patch), field_manager=FIELD_MANAGER,
                                              _content_type="application/merge-patch+json")

    def patch_httproute(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object("gateway.networking.k8s.io", "v1", namespace, "httproutes", name,
                                                   dict(patch), field_manager=FIELD_MANAGER,
                                                   _content_type="application/merge-patch+json")

    def patch_kvplan_status(self, namespace: str, name: str, status_patch: Mapping[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name,
                                                          {"status": dict(status_patch)},
                                                          field_manager=FIELD_MANAGER,
                                                          _content_type="application/merge-patch+json")

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
        self.core.create_namespaced_event(meta["namespace"], event)


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
