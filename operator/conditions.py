"""KVPlan status conditions: the documented types, the CamelCase reasons, and one pure helper that sets them.

Condition types (``status.conditions[].type``):

- ``Ready``: the plan in status is current and (in Apply mode) applied. ``False`` names why in ``reason``.
- ``Planned``: the last attempt produced a plan from fresh data.
- ``Applied``: the cluster matches the plan (``False`` in DryRun, with reason ``DryRun``).
- ``Degraded``: the operator is serving the last good plan because something is wrong (Prometheus, samples).
- ``EngineKnobs``: every engine knob the plan chose (``--max-num-seqs``, ``--watermark``, ``--scheduling-policy``,
  kvplan's ``--scheduler-cls``) is in force; ``False`` says which group's knob was refused or held back, and why.
- ``StepTimes``: every group's step times are fitted from its engines (``StepTimesFitted``); ``False``
  (``StepTimesFromProfile``) names each group that keeps its profile and why (too few windows, an unknown or rolling
  layout, a poor fit, a Prometheus error). Absent with ``spec.capacity.stepTimes.fromEngine: false``.

Every condition carries ``type``, ``status``, ``reason``, ``message`` (truncated to :data:`MAX_MESSAGE`),
``lastTransitionTime`` (changes only when ``status`` changes) and ``observedGeneration``.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Any

READY = "Ready"
PLANNED = "Planned"
APPLIED = "Applied"
DEGRADED = "Degraded"
ENGINE_KNOBS = "EngineKnobs"
STEP_TIMES = "StepTimes"
TYPES = (READY, PLANNED, APPLIED, DEGRADED, ENGINE_KNOBS, STEP_TIMES)
INFORMATIONAL = frozenset({STEP_TIMES})
"""Condition types whose False is a state, not a fault (a new fleet has no engine steps to fit yet): their
transitions are Normal events."""

# --- Reasons (CamelCase, stable: alerts and tests match on them) -------------------------------------------------
#: The plan was computed and every owned object matches it.
RECONCILED = "Reconciled"
#: A plan was computed from fresh Prometheus data.
PLAN_SUCCEEDED = "PlanSucceeded"
#: Every owned field was patched (or already matched).
APPLY_SUCCEEDED = "ApplySucceeded"
#: Mode DryRun: the plan is in status (and its detail ConfigMaps), nothing else was touched.
DRY_RUN = "DryRun"
#: Nothing is degraded.
HEALTHY = "Healthy"
#: The spec passed the schema but not the operator's checks (message has every field path).
INVALID_SPEC = "InvalidSpec"
#: A listed layout needs more GPUs than one node of the pool has (multi-node serving is out of scope), or a
#: data-parallel pod (``--data-parallel-size-local`` engines x TP x PP) more than a node or the group's gpuCount.
LAYOUT_EXCEEDS_NODE = "LayoutExceedsNode"
#: Prometheus could not be queried; the last good plan is kept.
PROMETHEUS_UNAVAILABLE = "PrometheusUnavailable"
#: A class has fewer samples in the lookback than its minSamples; the last good plan is kept.
TOO_FEW_SAMPLES = "TooFewSamples"
#: A target Deployment does not exist in the KVPlan's namespace; nothing is applied.
DEPLOYMENT_MISSING = "DeploymentMissing"
#: The Deployment has no container with the configured name (or several and none named).
CONTAINER_NOT_FOUND = "ContainerNotFound"
#: The workload a group names (``workloadRef``, or its Deployment's controller) does not exist; nothing is applied.
WORKLOAD_MISSING = "WorkloadMissing"
#: The group's workload has a field set that kvplan's plan cannot be expressed with (the message names the field,
#: e.g. an LLMInferenceService's ``spec.worker``); nothing is applied.
UNSUPPORTED_WORKLOAD_FIELD = "UnsupportedWorkloadField"
#: The planner found no feasible plan; status says why, nothing applied.
INFEASIBLE = "Infeasible"
#: The planner failed (error status); nothing applied.
PLANNER_ERROR = "PlannerError"
#: A write was refused or failed (apiserver error class and code in the message); what was written before it is
#: listed, nothing after it was attempted, ``status.plan`` still names the last plan applied in full.
APPLY_FAILED = "ApplyFailed"
#: Not yet attempted.
PENDING = "Pending"
#: (Applied=Unknown) Writes for ``status.applying.planId`` are being sent; recorded before the first write, so a
#: crash or a failed status write mid-apply never leaves status claiming an older plan as applied.
APPLYING = "Applying"
#: A Kubernetes read (Deployment, ConfigMap, HTTPRoute, InferencePool, autoscalers, Secret) failed with an error
#: other than 404; nothing applied, the last good plan is kept.
READ_FAILED = "ReadFailed"
#: A target Deployment (or the router ConfigMap / HTTPRoute) carries another KVPlan's ``kvplan.io/owner`` and that
#: KVPlan exists; nothing applied.
OWNED_BY_OTHER = "OwnedByOther"
#: A target Deployment has a controller ownerReference (``controller: true``) to an object kvplan has no target for
#: (KServe's LLMInferenceService, production-stack's VLLMRuntime, any other operator): that controller restores its
#: pod template, so a write would only start an endless rollout. The message names the owner (kind/name and
#: apiVersion) and the Deployment's field managers; nothing applied, the last good plan stays in force.
OWNED_BY_CONTROLLER = "OwnedByController"
#: The vLLM container's command/args cannot express the planned flags (e.g. a shell script that takes
#: ``--tensor-parallel-size`` from a variable, or no ``vllm serve`` to attach a flag to); nothing applied.
UNSUPPORTED_CONTAINER_LAYOUT = "UnsupportedContainerLayout"
#: The vLLM container's argv has ``--config FILE`` (any spelling): vLLM reads more flags from a YAML file inside the
#: image that kvplan cannot see, so any flag kvplan wrote might be overridden; the Deployment is not touched
#: (nothing applied); the message names the Deployment and the word.
UNREADABLE_ENGINE_CONFIG = "UnreadableEngineConfig"
#: A router target is unusable: an InferencePool that is missing or does not select its group's pods, or a router
#: ConfigMap key that is not a valid ConfigMap key; nothing applied.
ROUTER_TARGET_INVALID = "RouterTargetInvalid"
#: spec.prometheus.url points where the operator may not send requests (link-local or metadata address, a host
#: outside the operator's allowed list); no request was sent.
PROMETHEUS_URL_REFUSED = "PrometheusUrlRefused"
#: Prometheus answered with an HTTP 4xx (401, 403, 404, ...) or a redirect (never followed).
PROMETHEUS_REJECTED = "PrometheusRejected"
#: Prometheus answered ``status: error`` (bad PromQL, execution error); the body is not copied.
PROMETHEUS_QUERY_ERROR = "PrometheusQueryError"
#: Prometheus answered something that is not its JSON API (malformed JSON, wrong result type, non-numeric values).
PROMETHEUS_BAD_RESPONSE = "PrometheusBadResponse"
#: A class's histogram is unusable: NaN/Inf or absurd (> 1e15) counts, negative counts, unparsable or negative
#: ``le`` bounds, or cumulative counts that decrease with ``le`` (reversed buckets) beyond scrape skew.
INVALID_HISTOGRAM = "InvalidHistogram"
#: Prometheus answered samples of other times than asked: a range answer's point before the window's start, after
#: its end or off its step, or an instant sample away from the time asked (a stale cache, a replayed answer);
#: nothing of it is used, the last good plan is kept.
STALE_SAMPLES = "StaleSamples"
#: A class's arrivalRateQuery returned no sample (an empty vector), which is not 0 requests/s.
NO_RATE_DATA = "NoRateData"
#: A class's arrivalRateQuery returned NaN, +-Inf, a negative or an absurd (> 1e9 requests/s) value.
INVALID_RATE = "InvalidRate"
#: A Secret or ConfigMap (key) that spec.prometheus names (bearer token, basic auth, CA bundle) does not exist.
AUTH_SECRET_MISSING = "AuthSecretMissing"
#: The ConfigMap (or its key) that a group's modelConfigRef names does not exist; nothing applied, retried.
MODEL_CONFIG_MISSING = "ModelConfigMissing"
#: spec.prometheus.bearerTokenFile names a file outside the operator's allowed token files, or one it cannot read;
#: no request was sent.
PROMETHEUS_AUTH_REFUSED = "PrometheusAuthRefused"
#: TLS to Prometheus failed: the message names the URL and the certificate problem (self-signed, expired, hostname
#: mismatch, a CA bundle that is not PEM, a server that does not speak TLS).
PROMETHEUS_TLS_ERROR = "PrometheusTLSError"
#: A history source's metric has no series for the selector (or for a class's label value): the message names
#: the metric, the selector and the class; the last good plan is kept.
METRIC_ABSENT = "MetricAbsent"
#: A query matched more series than a plan can come from (a class label with thousands of values, such as a
#: request id or a user); the message names the label or selector.
TOO_MANY_SERIES = "TooManySeries"
#: The status write, or the write of the plan detail ConfigMaps it refers to, failed (only in the outcome and the
#: log: the status cannot say it).
STATUS_WRITE_FAILED = "StatusWriteFailed"
#: An unexpected error inside the operator (a bug); its type is in the message, the last good plan is kept.
INTERNAL_ERROR = "InternalError"

REASONS: tuple[str, ...] = (
    RECONCILED, PLAN_SUCCEEDED, APPLY_SUCCEEDED, DRY_RUN, HEALTHY, INVALID_SPEC, LAYOUT_EXCEEDS_NODE,
    PROMETHEUS_UNAVAILABLE, TOO_FEW_SAMPLES, DEPLOYMENT_MISSING, CONTAINER_NOT_FOUND, INFEASIBLE, PLANNER_ERROR,
    APPLY_FAILED, PENDING, READ_FAILED, OWNED_BY_OTHER, UNSUPPORTED_CONTAINER_LAYOUT, UNREADABLE_ENGINE_CONFIG,
    ROUTER_TARGET_INVALID,
    PROMETHEUS_URL_REFUSED, PROMETHEUS_REJECTED, PROMETHEUS_QUERY_ERROR, PROMETHEUS_BAD_RESPONSE, INVALID_HISTOGRAM,
    NO_RATE_DATA, INVALID_RATE, AUTH_SECRET_MISSING, STATUS_WRITE_FAILED, INTERNAL_ERROR, APPLYING,
    PROMETHEUS_AUTH_REFUSED, PROMETHEUS_TLS_ERROR, METRIC_ABSENT, TOO_MANY_SERIES, STALE_SAMPLES,
    WORKLOAD_MISSING, UNSUPPORTED_WORKLOAD_FIELD, OWNED_BY_CONTROLLER, MODEL_CONFIG_MISSING,
)
#: Failures of observation: the operator keeps serving the last good plan (Degraded=True; Ready stays True when a
#: plan was applied before) and retries with backoff.
DEGRADED_REASONS: tuple[str, ...] = (
    PROMETHEUS_UNAVAILABLE, TOO_FEW_SAMPLES, READ_FAILED, PROMETHEUS_URL_REFUSED, PROMETHEUS_REJECTED,
    PROMETHEUS_QUERY_ERROR, PROMETHEUS_BAD_RESPONSE, INVALID_HISTOGRAM, NO_RATE_DATA, INVALID_RATE,
    AUTH_SECRET_MISSING, PROMETHEUS_AUTH_REFUSED, PROMETHEUS_TLS_ERROR, METRIC_ABSENT, TOO_MANY_SERIES, STALE_SAMPLES,
    MODEL_CONFIG_MISSING,
)

# --- Deadlines and stopping (issue 26) ---------------------------------------------------------------------------
#: The reconcile's cycle deadline (``--cycle-deadline``, chart ``replan.cycleDeadlineSeconds``) passed before it
#: could apply: nothing of this cycle was applied, the last good plan stays in force (Degraded), retried with backoff.
CYCLE_DEADLINE_EXCEEDED = "CycleDeadlineExceeded"
#: The operator is shutting down (SIGTERM): the reconcile in flight was cut before it applied anything; only in the
#: outcome and the log (status is not written on the way out; the next operator re-plans).
OPERATOR_STOPPING = "OperatorStopping"
#: A reconcile was not started because its namespace already has ``--namespace-concurrency`` reconciles in flight,
#: or the KVPlan one (only in the log: the timer tries again at its next tick, a change handler shortly).
NAMESPACE_BUSY = "NamespaceBusy"
REASONS = REASONS + (CYCLE_DEADLINE_EXCEEDED, OPERATOR_STOPPING, NAMESPACE_BUSY)
DEGRADED_REASONS = DEGRADED_REASONS + (CYCLE_DEADLINE_EXCEEDED,)

# --- Reasons of EngineKnobs (the plan applies; these say what of the engine knobs did not) ----------------------
#: Every knob the plan chose is in force (or, with ``engine.knobs: Formula``, kvplan sets only --max-num-seqs).
KNOBS_IN_FORCE = "KnobsInForce"
#: A group's engine cannot take a knob: ``--watermark`` on vLLM older than 0.33, the plugin on anything but 0.33.x,
#: or a container that runs its own ``--scheduler-cls``. The message names the group, the version and the knob;
#: the knob is not written at all (nothing of it half-applied), the rest of the plan applies.
KNOB_UNSUPPORTED = "KnobUnsupported"
#: A knob change would restart a group's pods and the disruption budget is spent: the group keeps every knob it
#: runs; the message and ``status.plan.groups.<g>.engine.held`` give each knob's planned and current value.
KNOBS_HELD = "KnobsHeld"
#: kvcore's knob rule failed (its error in the message); the groups keep the knobs they run.
KNOB_RULE_FAILED = "KnobRuleFailed"
#: kvcore's reservation rule failed for a plugin group (its error in the message); the group keeps the reservation
#: file in force.
RESERVE_RULE_FAILED = "ReserveRuleFailed"
#: The re-plan cycle's work budget for the engine-model rules (``KVPLAN_RULE_WORK``) was spent before every group
#: had an answer: the groups named keep their knobs and reservation file until a later cycle.
RULES_PENDING = "RulesPending"
#: A group's vLLM version is unknown (no ``engine.vllmVersion``, no label ``kvplan.io/vllm-version``, not an official
#: ``vllm/vllm-openai:vX.Y.Z`` image): no version-gated knob (``--watermark``, the plugin) is written for it; the
#: message names the group and how to state the version. The rest of the plan applies.
ENGINE_VERSION_UNKNOWN = "EngineVersionUnknown"
# --- Who owns a group's replicas (``status.plan.groups.<g>.replicasReason``; not condition reasons) ----------------
#: kvplan writes ``spec.replicas``.
REPLICAS_BY_KVPLAN = "ManagedByKVPlan"
#: An HPA (autoscaling/v2), a KEDA ScaledObject or an AIBrix PodAutoscaler targets the Deployment.
REPLICAS_BY_AUTOSCALER = "OwnedByAutoscaler"
#: A field manager listed in ``spec.groups[].replicaOwner.fieldManagers`` last wrote ``spec.replicas``.
REPLICAS_BY_FIELD_MANAGER = "OwnedByFieldManager"
#: ``spec.groups[].replicaOwner.policy: External``: someone kvplan cannot see scales the Deployment.
REPLICAS_EXTERNAL = "External"
REPLICA_REASONS = (REPLICAS_BY_KVPLAN, REPLICAS_BY_AUTOSCALER, REPLICAS_BY_FIELD_MANAGER, REPLICAS_EXTERNAL)

REASONS = REASONS + (KNOBS_IN_FORCE, KNOB_UNSUPPORTED, KNOBS_HELD, KNOB_RULE_FAILED, RESERVE_RULE_FAILED,
                     RULES_PENDING, ENGINE_VERSION_UNKNOWN)

# --- Applied while no plan can be made (:mod:`kvplan_operator.decide.bootstrap`) ----------------------------------
#: Observe waits for the history of classes labelled by kvplan's classification file (``history.source: kvplan``),
#: so there is no plan; the file (nothing reserved) is written and mounted in each Deployment group so that their
#: history can start. Ready stays False with the observe reason (``TooFewSamples`` / ``MetricAbsent``).
CLASSIFICATION_FILE_MOUNTED = "ClassificationFileMounted"
REASONS = REASONS + (CLASSIFICATION_FILE_MOUNTED,)

# --- StepTimes (:mod:`kvplan_operator.observe.sources.steptime`) ----------------------------------------------------
#: Every group's step times at its running layout are fitted from its engines' series (or the model scaled to them).
STEP_TIMES_FITTED = "StepTimesFitted"
#: Some group keeps its profile's step times: the message names each and why.
STEP_TIMES_FROM_PROFILE = "StepTimesFromProfile"
REASONS = REASONS + (STEP_TIMES_FITTED, STEP_TIMES_FROM_PROFILE)

#: Longest message kept, characters. Long enough for a handful of field errors, short enough for `kubectl get -o wide`.
MAX_MESSAGE = 1024


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def truncate(message: str, limit: int = MAX_MESSAGE) -> str:
    """Cut ``message`` to ``limit`` characters, marking the cut."""
    if len(message) <= limit:
        return message
    return message[: limit - 15] + "... (truncated)"


def find(conditions: Sequence[Mapping[str, Any]], type_: str) -> Mapping[str, Any] | None:
    """The condition of ``type_`` or None."""
    for cond in conditions:
        if cond.get("type") == type_:
            return cond
    return None


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    type_: str,
    status: bool | str,
    reason: str,
    message: str,
    *,
    generation: int | None,
    now: str | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """Return ``(new_conditions, changed)`` with ``type_`` set; the input is not modified.

    ``lastTransitionTime`` moves only when ``status`` flips; ``changed`` is True when anything (status, reason,
    message, observedGeneration) differs, so callers write status and emit events only when needed.
    """
    if type_ not in TYPES:
        raise ValueError(f"unknown condition type {type_!r}")
    if reason not in REASONS:
        raise ValueError(f"undocumented reason {reason!r}")
    status_s = ("True" if status else "False") if isinstance(status, bool) else status
    if status_s not in ("True", "False", "Unknown"):
        raise ValueError(f"condition status must be True/False/Unknown, got {status_s!r}")
    message = truncate(message)
    out = [dict(c) for c in conditions]
    old = find(out, type_)
    new: dict[str, Any] = {
        "type": type_,
        "status": status_s,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now or _now(),
        "observedGeneration": generation,
    }
    if old is None:
        out.append(new)
        return out, True
    if old.get("status") == status_s:
        new["lastTransitionTime"] = old.get("lastTransitionTime", new["lastTransitionTime"])
    changed = any(old.get(k) != new[k] for k in ("status", "reason", "message", "observedGeneration"))
    idx = out.index(old)  # type: ignore[arg-type]
    out[idx] = new if changed else dict(old)
    return out, changed


def transitioned(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]], type_: str) -> bool:
    """True when ``type_`` changed status or reason between two condition lists (event-worthy)."""
    a, b = find(before, type_), find(after, type_)
    if a is None or b is None:
        return a is not b
    return (a.get("status"), a.get("reason")) != (b.get("status"), b.get("reason"))
