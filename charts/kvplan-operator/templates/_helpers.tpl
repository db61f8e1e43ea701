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
# KVPlans: kopf lists and watches them and patches its bookkeeping (annotations, finalizers); the operator reads
# one fresh before each reconcile. Writes are PATCH only (kopf and the operator never PUT).
- apiGroups: ["kvplan.io"]
  resources: ["kvplans"]
  verbs: ["get", "list", "watch", "patch"]
# Status: the plan, conditions and diff, as a merge patch of the status subresource.
- apiGroups: ["kvplan.io"]
  resources: ["kvplans/status"]
  verbs: ["get", "patch"]
# The operator's state ConfigMap is owned by its KVPlan (ownerReferences with blockOwnerDeletion); clusters that
# enable the OwnerReferencesPermissionEnforcement admission plugin require update on the owner's finalizers.
- apiGroups: ["kvplan.io"]
  resources: ["kvplans/finalizers"]
  verbs: ["update"]
# Serving Deployments named in a KVPlan: read each one (snapshot) and patch args, GPU limits, selectors,
# tolerations, env and replicas. No list/watch (the operator reads them by name), no create, no delete.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "patch"]
# The router ConfigMap and the per-KVPlan state ConfigMap (reservation files, budget record): read by name, created on
# first apply, patched after. No delete: the state ConfigMap goes with its KVPlan through ownerReferences.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "create", "patch"]
# Events on KVPlans, posted on condition transitions.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
# Autoscalers are only listed: a Deployment targeted by an HPA, a KEDA ScaledObject or an AIBrix PodAutoscaler
# keeps its replicas. The ScaledObject and PodAutoscaler rules are needed even without KEDA or AIBrix:
# authorisation comes before the apiserver's 404, and the operator treats 404 as "not installed" but 403 as an
# error.
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["get", "list"]
- apiGroups: ["keda.sh"]
  resources: ["scaledobjects"]
  verbs: ["get", "list"]
- apiGroups: ["autoscaling.aibrix.ai"]
  resources: ["podautoscalers"]
  verbs: ["get", "list"]
{{- if .Values.httpRoute.enabled }}
# Gateway API HTTPRoutes named in spec.router: read by name, backendRef weights patched.
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["httproutes"]
  verbs: ["get", "patch"]
# Gateway API Inference Extension InferencePools named in spec.groups[].inferencePool: read by name (each must
# select its group's pods before kvplan weights it in the HTTPRoute). Never written.
- apiGroups: ["inference.networking.k8s.io"]
  resources: ["inferencepools"]
  verbs: ["get"]
{{- end }}
{{- if .Values.kserve.enabled }}
# KServe LLMInferenceServices serving a group (groups[].workloadRef, or the controller of its Deployment): read by
# name, parallelism, replicas and the vLLM container's args and GPUs patched (server-side apply). The Deployment
# KServe owns is only read.
- apiGroups: ["serving.kserve.io"]
  resources: ["llminferenceservices"]
  verbs: ["get", "patch"]
{{- end }}
{{- if .Values.leaderWorkerSet.enabled }}
# LeaderWorkerSets named in groups[].workloadRef: read by name, size, replicas and the leader's and workers' vLLM
# argv and GPUs patched (server-side apply). Never created or deleted.
- apiGroups: ["leaderworkerset.x-k8s.io"]
  resources: ["leaderworkersets"]
  verbs: ["get", "patch"]
{{- end }}
{{- with .Values.prometheus.authSecrets }}
# Prometheus credentials (bearer token, basic auth, CA bundle): only the Secrets listed in values
# (prometheus.authSecrets), read-only.
- apiGroups: [""]
  resources: ["secrets"]
  resourceNames: {{ toJson . }}
  verbs: ["get"]
{{- end }}
{{- if and .Values.peering.enabled .Values.watchNamespaces }}
# kopf peering in namespaced mode: the KopfPeering in each watched namespace (created by this chart), read and
# patched with keep-alives (kopf.dev and the legacy zalando.org group, both of which kopf probes).
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
{{- with .Values.prometheus.allowedHosts }}
- --prometheus-allowed-hosts={{ join "," . }}
{{- end }}
{{- with .Values.prometheus.tokenFiles }}
- --prometheus-token-files={{ join "," . }}
{{- end }}
{{- if eq .Values.logLevel "debug" }}
- --verbose
{{- else if ne .Values.logLevel "info" }}
{{- fail "logLevel must be info or debug" }}
{{- end }}
- --log-format={{ .Values.logFormat }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* The operator image: repository:tag, pinned by digest when image.digest is set (repository:tag@sha256:...). */}}
{{- define "kvplan-operator.image" -}}
{{- $ref := printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- with .Values.image.digest -}}
{{- $ref = printf "%s@%s" $ref . -}}
{{- end -}}
{{- $ref -}}
{{- end -}}

{{/*
The stored-version guard, for one CRD (the dict about to be applied). With the CRD already in the cluster (lookup;
empty under `helm template`), every version in its status.storedVersions must still be served by the new one:
objects in etcd may still be encoded in such a version, and the apiserver cannot read them once it is not served.
*/}}
{{- define "kvplan-operator.crdGuard" -}}
{{- $live := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" .metadata.name -}}
{{- if $live -}}
{{- $served := list -}}
{{- range .spec.versions -}}
{{- if .served -}}
{{- $served = append $served .name -}}
{{- end -}}
{{- end -}}
{{- $stored := list -}}
{{- with $live.status -}}
{{- $stored = .storedVersions | default list -}}
{{- end -}}
{{- range $stored -}}
{{- if not (has . $served) -}}
{{- fail (printf "refusing to upgrade CustomResourceDefinition %s: the new chart stops serving %s, but the cluster's status.storedVersions %v says objects may still be stored as %s. Migrate every object to a served version first (read and write back each one, e.g. kube-storage-version-migrator), then remove %s from status.storedVersions (kubectl patch crd %s --subresource=status); see docs/upgrade.md" $live.metadata.name . $stored . . $live.metadata.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
