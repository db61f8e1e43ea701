"""Phase 1 of a reconcile: observe. Prometheus histories -> kvcore ``History`` per class; current Deployments.

PromQL (one range query per class, so the cost does not grow with the number of windows):

    sum by (le) (increase({__name__=~"vllm:request_generation_tokens_bucket|vllm_request_generation_tokens_bucket",
                           <selector>}[<lookback/windows>]))

evaluated from ``now - lookback + window`` to ``now`` every ``window``: each point is one sub-window's histogram.
Both metric spellings are matched (``prometheus_client`` >= 0.23 may store ``vllm:`` as ``vllm_``). Each window's
``le`` -> count vector becomes weighted samples through :func:`kvcore.traces.histogram_to_samples` (sorted bounds,
running max, differences, ``+Inf`` capped at the class's maxOutputTokens); windows with no requests are dropped.
The windows, oldest first, form the ``History`` the drift radius measures.
"""

from __future__ import annotations

import datetime as _dt
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kvcore.errors import InputError
from kvcore.samples import History, Samples
from kvcore.traces import histogram_to_samples

from .spec import KVPlanSpec, RequestClass

METRIC_NAMES = ("vllm:request_generation_tokens_bucket", "vllm_request_generation_tokens_bucket")


class PrometheusUnavailable(RuntimeError):
    """A query failed (connection, timeout, HTTP or PromQL error). The message says which query."""


class PromApi(Protocol):
    """The two Prometheus calls the snapshot makes (see :class:`PromClient`)."""

    def query(self, promql: str, *, at: float | None = None) -> Mapping[str, Any]: ...

    def query_range(self, promql: str, *, start: float, end: float, step: float) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class ClassObservation:
    """What Prometheus says about one class."""

    name: str
    history: History | None
    requests: float
    windows: int
    arrival_rate: float


@dataclass(frozen=True)
class DeploymentObservation:
    """One target Deployment as read now (``body`` None when missing) and who owns its replica count."""

    group: str
    body: Mapping[str, Any] | None
    autoscaler: str | None


@dataclass(frozen=True)
class Snapshot:
    classes: Mapping[str, ClassObservation]
    deployments: Mapping[str, DeploymentObservation]
    taken_at: float
    query_seconds: float


def histogram_query(selector: str, window_s: float) -> str:
    """The per-``le`` increase over one sub-window, both metric spellings."""
    names = "|".join(METRIC_NAMES)
    sel = f'__name__=~"{names}"' + (f", {selector.strip()}" if selector.strip() else "")
    return f"sum by (le) (increase({{{sel}}}[{int(window_s)}s]))"


def windows_from_matrix(result: Sequence[Mapping[str, Any]]) -> list[tuple[float, list[str], list[float]]]:
    """Prometheus matrix (one series per ``le``) -> ``[(timestamp, bounds, cumulative counts)]`` oldest first.

    A timestamp missing from some ``le`` series counts 0 there; NaN values (from ``increase`` on gaps) count 0.
    """
    by_time: dict[float, dict[str, float]] = {}
    les: list[str] = []
    for series in result:
        le = series.get("metric", {}).get("le")
        if le is None:
            continue
        les.append(le)
        for ts, value in series.get("values", []):
            v = float(value)
            by_time.setdefault(float(ts), {})[le] = v if math.isfinite(v) and v > 0 else 0.0
    out = []
    for ts in sorted(by_time):
        row = by_time[ts]
        out.append((ts, list(les), [row.get(le, 0.0) for le in les]))
    return out


def history_from_windows(windows: Sequence[tuple[float, Sequence[str], Sequence[float]]], *,
                         max_model_len: float) -> tuple[History | None, float]:
    """Windows -> (History of the non-empty ones or None, total requests). Counts are ``increase()`` values."""
    samples: list[Samples] = []
    total = 0.0
    for _, bounds, counts in windows:
        if not bounds or max(counts, default=0.0) <= 0:
            continue
        try:
            samples.append(histogram_to_samples(bounds, counts, max_model_len=max_model_len))
        except InputError:
            continue  # an all-empty window after the running max; nothing to learn from it
        total += max(counts)
    return (History.of(samples) if samples else None), total


def scalar_from_vector(result: Any) -> float:
    """An instant query's value: a scalar ``[ts, "v"]`` or the sum of a vector's samples (0 when empty)."""
    if isinstance(result, Mapping):
        result_type, data = result.get("resultType"), result.get("result")
    else:
        result_type, data = "vector", result
    if result_type == "scalar" and data is not None:
        return float(data[1])
    return float(sum(float(s["value"][1]) for s in data or []))


def observe_class(prom: PromApi, cls: RequestClass, *, lookback_s: float, windows: int, now: float) -> ClassObservation:
    """Query one class's histogram windows (and its arrival-rate query if any)."""
    window_s = max(60.0, lookback_s / windows)
    q = histogram_query(cls.history.selector, window_s)
    data = prom.query_range(q, start=now - window_s * (windows - 1), end=now, step=window_s)
    rows = windows_from_matrix(data.get("result", []))
    history, total = history_from_windows(rows, max_model_len=float(cls.max_output_tokens))
    if cls.arrival_rate is not None:
        rate = float(cls.arrival_rate)
    else:
        assert cls.arrival_rate_query is not None
        rate = scalar_from_vector(prom.query(cls.arrival_rate_query, at=now))
    return ClassObservation(cls.name, history, total, len(history.windows) if history else 0, rate)


class KubeReader(Protocol):
    def get_deployment(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def autoscaled_deployments(self, namespace: str) -> Mapping[str, str]: ...


def take_snapshot(spec: KVPlanSpec, *, namespace: str, prom: PromApi, kube: KubeReader,
                  now: float | None = None) -> Snapshot:
    """Observe everything one reconcile needs. Raises :class:`PrometheusUnavailable` on any query failure."""
    now = time.time() if now is None else now
    t0 = time.perf_counter()
    classes = {
        c.name: observe_class(prom, c, lookback_s=spec.prometheus.lookback_seconds, windows=spec.prometheus.windows,
                              now=now)
        for c in spec.classes
    }
    query_s = time.perf_counter() - t0
    scaled = kube.autoscaled_deployments(namespace)
    deployments = {
        g.name: DeploymentObservation(g.name, kube.get_deployment(namespace, g.deployment), scaled.get(g.deployment))
        for g in spec.groups
    }
    return Snapshot(classes, deployments, now, query_s)


class PromClient:
    """:class:`PromApi` over ``prometheus_api_client.PrometheusConnect`` with a timeout and optional bearer token."""

    def __init__(self, url: str, *, timeout_s: float, token: str | None = None) -> None:
        from prometheus_api_client import PrometheusConnect

        headers = {"Authorization": f"Bearer {token}"} if token else None
        self.url = url
        self.timeout_s = timeout_s
        self._pc = PrometheusConnect(url=url, headers=headers, disable_ssl=False, timeout=timeout_s)

    def query(self, promql: str, *, at: float | None = None) -> Mapping[str, Any]:
        params = {"time": str(at)} if at is not None else None
        try:
            res = self._pc.custom_query(promql, params=params, timeout=self.timeout_s)
        except Exception as exc:  # connection errors, HTTP errors, PromQL errors: one class of failure
            raise PrometheusUnavailable(f"{self.url}: query {promql!r} failed: {exc}") from exc
        return {"resultType": "vector", "result": res} if isinstance(res, list) else res

    def query_range(self, promql: str, *, start: float, end: float, step: float) -> Mapping[str, Any]:
        try:
            res = self._pc.custom_query_range(
                promql, start_time=_dt.datetime.fromtimestamp(start, _dt.UTC),
                end_time=_dt.datetime.fromtimestamp(end, _dt.UTC), step=f"{int(step)}s", timeout=self.timeout_s)
        except Exception as exc:
            raise PrometheusUnavailable(f"{self.url}: range query {promql!r} failed: {exc}") from exc
        return {"resultType": "matrix", "result": res}
