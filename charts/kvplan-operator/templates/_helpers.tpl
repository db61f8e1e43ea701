{{/* Chart name, truncated to the 63 characters a DNS label allows. */}}
{{- define "kvplan-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name of the release's objects: fullnameOverride, or "<release>-<chart>" (just the release if it already contains the chart name). */}}
{{- define "kvplan-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "kvplan-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kvplan-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kvplan
{{- end -}}

{{/* The stable subset used in selectors. */}}
{{- define "kvplan-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kvplan-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The ServiceAccount the operator runs as. */}}
{{- define "kvplan-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kvplan-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The namespaced rules: what the operator does inside a namespace it watches. Bound by a Role per watched
namespace, or by the cluster-wide ClusterRole when watchNamespaces is empty. Every rule names the code that needs it.
*/}}
{{- define "kvplan-operator.namespacedRules" -}}
# KVPlans: kopf lists and watches them, patches its bookkeeping annotations and finalizers (patch), and the
# operator writes status through the status subresource.
- apiGroups: ["kvplan.io"]
  resources: ["kvplans"]
  verbs: ["get", "list", "watch", "patch", "update"]
- apiGroups: ["kvplan.io"]
  resources: ["kvplans/status"]
  verbs: ["get", "patch", "update"]
# The operator's state ConfigMap is owned by its KVPlan (ownerReferences with blockOwnerDeletion); clusters that
# enable the OwnerReferencesPermissionEnforcement admission plugin require update on the owner's finalizers.
- apiGroups: ["kvplan.io"]
  resources: ["kvplans/finalizers"]
  verbs: ["update"]
# Serving Deployments named in a KVPlan: read them (snapshot) and patch args, GPU limits, selectors, env, replicas.
# No create and no delete: the operator never owns a Deployment's lifecycle.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "patch"]
# The router ConfigMap with per-class routing weights: created on first apply, patched after.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "patch"]
# Events on KVPlans (kopf's handler events and the operator's condition transitions).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
# Autoscalers are only read: a Deployment targeted by an HPA or a KEDA ScaledObject keeps its replicas.
# The ScaledObject rule is needed even without KEDA: authorisation comes before the apiserver's 404, and the
# operator treats 404 as "KEDA not installed" but 403 as an error.
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["keda.sh"]
  resources: ["scaledobjects"]
  verbs: ["get", "list", "watch"]
{{- if .Values.httpRoute.enabled }}
# Gateway API HTTPRoutes named in spec.router: the operator sets backendRef weights.
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["httproutes"]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- with .Values.prometheus.authSecrets }}
# Prometheus credentials: only the Secrets listed in values (prometheus.authSecrets), read-only.
- apiGroups: [""]
  resources: ["secrets"]
  resourceNames: {{ toJson . }}
  verbs: ["get"]
{{- end }}
{{- if and .Values.peering.enabled .Values.watchNamespaces }}
# kopf peering in namespaced mode: a KopfPeering per watched namespace (kopf.dev and the legacy zalando.org group).
- apiGroups: ["kopf.dev", "zalando.org"]
  resources: ["kopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- end -}}

{{/* The operator's command-line arguments. */}}
{{- define "kvplan-operator.args" -}}
{{- if .Values.watchNamespaces }}
{{- range .Values.watchNamespaces }}
- --namespace={{ . }}
{{- end }}
{{- else }}
- --all-namespaces
{{- end }}
{{- if .Values.peering.enabled }}
- --peering={{ .Values.peering.name }}
{{- else }}
- --standalone
{{- end }}
- --liveness=http://0.0.0.0:{{ .Values.liveness.port }}/healthz
- --metrics-port={{ if .Values.metrics.enabled }}{{ .Values.metrics.port }}{{ else }}0{{ end }}
{{- if eq .Values.logLevel "debug" }}
- --verbose
{{- else if ne .Values.logLevel "info" }}
{{- fail "logLevel must be info or debug" }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}
